"""The field tables of the Kubernetes objects gpufleet reads, derived from maintained sources.

Owns writing ``gpufleet/data/kube_fields.json``, the data :mod:`gpufleet.io.kube.schema` checks
every object against (it lives here because only ``kube_client`` may import the client):

* the core kinds' fields come from the official ``kubernetes`` client's model classes
  (``openapi_types`` and ``attribute_map``, walked from each root kind), for the Kubernetes
  version that client targets;
* the operators' kinds come from the CRDs those projects publish (``openAPIV3Schema``), given as
  files: a pod template inside a CRD is the core ``V1PodTemplateSpec`` (the CRDs inline it).

Each table maps a JSON field name to the type of its value: ``""`` for a value that is not
checked further (a scalar, a free-form map such as labels, or a schema that keeps unknown
fields), a type name, or ``{}`` and a type name for a map whose values are of that type. Lists
are transparent: a list's items are of the field's type. Run it after moving the client or a CRD:
``python -m gpufleet.kube_client.field_tables CRD_DIR > gpufleet/data/kube_fields.json``.
After moving the client alone, ``--core-from gpufleet/data/kube_fields.json`` in place of
``CRD_DIR`` renews the core kinds and keeps the CRDs' tables as that file has them.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes import client

#: (apiVersion, kind) -> the client's model class name.
CORE_ROOTS = {
    ("v1", "Pod"): "V1Pod",
    ("batch/v1", "Job"): "V1Job",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("apps/v1", "ReplicaSet"): "V1ReplicaSet",
    ("scheduling.k8s.io/v1", "PriorityClass"): "V1PriorityClass",
    ("v1", "ResourceQuota"): "V1ResourceQuota",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
    ("v1", "Node"): "V1Node",
    # Dynamic Resource Allocation (resource.k8s.io/v1, GA in Kubernetes 1.34). The client names
    # the claim ResourceV1ResourceClaim, apart from a container's resources.claims entry.
    ("resource.k8s.io/v1", "DeviceClass"): "V1DeviceClass",
    ("resource.k8s.io/v1", "ResourceClaim"): "ResourceV1ResourceClaim",
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): "V1ResourceClaimTemplate",
    ("resource.k8s.io/v1", "ResourceSlice"): "V1ResourceSlice",
}
#: The CRD files read (their names under the directory given) and where they were published.
CRD_SOURCES = {
    "pytorchjobs.yaml": "kubeflow/training-operator v1.9.0 "
    "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
    "mpijobs.yaml": "kubeflow/mpi-operator v0.8.0 manifests/base/kubeflow.org_mpijobs.yaml",
    "rayjobs.yaml": "ray-project/kuberay v1.7.0 "
    "helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml",
    "rayclusters.yaml": "ray-project/kuberay v1.7.0 "
    "helm-chart/kuberay-operator/crds/ray.io_rayclusters.yaml",
    "scaledobjects.yaml": "kedacore/keda v2.20.2 config/crd/bases/keda.sh_scaledobjects.yaml",
}
POD_TEMPLATE = "V1PodTemplateSpec"
_LIST = re.compile(r"list\[(.+)\]")
_DICT = re.compile(r"dict\(str, (.+)\)")


def core_tables() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Roots (``apiVersion/kind`` -> type) and the tables of every type they reach."""
    types: dict[str, dict[str, str]] = {}
    for name in CORE_ROOTS.values():
        _walk_model(name, types)
    roots = {f"{version}/{kind}": name for (version, kind), name in CORE_ROOTS.items()}
    return roots, types


def _walk_model(name: str, types: dict[str, dict[str, str]]) -> None:
    if name in types:
        return
    model = getattr(client, name)
    table: dict[str, str] = {}
    types[name] = table
    for attribute, declared in model.openapi_types.items():
        table[model.attribute_map[attribute]] = _value_type(declared, types)


def _value_type(declared: str, types: dict[str, dict[str, str]]) -> str:
    listed = _LIST.fullmatch(declared)
    if listed:
        return _value_type(listed.group(1), types)
    mapped = _DICT.fullmatch(declared)
    if mapped:
        inner = _value_type(mapped.group(1), types)
        return f"{{}}{inner}" if inner else ""
    if hasattr(client, declared) and getattr(client, declared).openapi_types:
        _walk_model(declared, types)
        return declared
    return ""  # a scalar, a quantity, IntOrString, or a free-form object


def crd_tables(
    directory: Path, types: dict[str, dict[str, str]]
) -> tuple[dict[str, str], dict[str, str]]:
    """Roots and sources of the CRDs of :data:`CRD_SOURCES` found in ``directory`` (their
    types added to ``types``)."""
    roots: dict[str, str] = {}
    sources: dict[str, str] = {}
    for file, published in CRD_SOURCES.items():
        crd = yaml.safe_load((directory / file).read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            key = f"{group}/{version['name']}/{kind}"
            if key in roots:
                continue
            schema = version["schema"]["openAPIV3Schema"]
            roots[key] = _walk_schema(schema, key, types)
            types[key]["metadata"] = "V1ObjectMeta"  # the CRD leaves it to the API server
            sources[key] = published
    return roots, sources


def _walk_schema(schema: Mapping[str, Any], name: str, types: dict[str, dict[str, str]]) -> str:
    if schema.get("type") == "array":
        return _walk_schema(schema.get("items") or {}, name, types)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return ""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    if not properties:
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            inner = _walk_schema(extra, f"{name}.*", types)
            return f"{{}}{inner}" if inner else ""
        return ""
    if _is_pod_template(properties):
        return POD_TEMPLATE
    types[name] = {
        field: _walk_schema(value, f"{name}.{field}", types) for field, value in properties.items()
    }
    return name


def _is_pod_template(properties: Mapping[str, Any]) -> bool:
    spec = properties.get("spec") or {}
    return set(properties) <= {"metadata", "spec"} and "containers" in (
        spec.get("properties") or {}
    )


def tables(crd_directory: Path) -> dict[str, Any]:
    """Everything ``kube_fields.json`` holds."""
    roots, types = core_tables()
    crd_roots, crd_sources = crd_tables(crd_directory, types)
    core_source = f"kubernetes python client {kubernetes.__version__} (model classes)"
    return {
        "about": __doc__.split("\n\n")[0] if __doc__ else "",
        "sources": {**dict.fromkeys(roots, core_source), **crd_sources},
        "roots": {**roots, **crd_roots},
        "types": {name: types[name] for name in sorted(types)},
    }


def renewed_core(shipped: Mapping[str, Any]) -> dict[str, Any]:
    """``shipped`` (a ``kube_fields.json``) with the core kinds' tables taken anew from the
    installed client and the CRDs' tables kept: for a moved client when the CRD files are not
    at hand."""
    roots, types = core_tables()
    core_source = f"kubernetes python client {kubernetes.__version__} (model classes)"
    crd_roots = {key: root for key, root in shipped["roots"].items() if key in shipped["sources"]}
    crd_roots = {key: root for key, root in crd_roots.items() if not _is_core(root)}
    crd_types = {name: table for name, table in shipped["types"].items() if not _is_core(name)}
    merged = {**crd_types, **types}
    return {
        "about": __doc__.split("\n\n")[0] if __doc__ else "",
        "sources": {
            **dict.fromkeys(roots, core_source),
            **{key: shipped["sources"][key] for key in crd_roots},
        },
        "roots": {**roots, **crd_roots},
        "types": {name: merged[name] for name in sorted(merged)},
    }


def _is_core(type_name: str) -> bool:
    """A core type is a client model class (``V1Pod``); a CRD's is keyed by its apiVersion."""
    return "/" not in type_name


def main(argv: Iterable[str]) -> None:
    args = list(argv)
    if args[:1] == ["--core-from"]:
        (_, shipped) = args
        data = renewed_core(json.loads(Path(shipped).read_text()))
    else:
        (directory,) = args
        data = tables(Path(directory))
    json.dump(data, sys.stdout, indent=0, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
