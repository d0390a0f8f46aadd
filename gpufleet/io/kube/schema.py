"""Strict decoding of the Kubernetes objects users bring: no field is silently dropped.

Owns :func:`check_kube_object`, the one check every reader of files and requests runs on a
Kubernetes object before reading it (``place``, ``simulate``, ``serve --scenario``, ``submit``,
``POST /api/v1/workloads``): a field the kind does not have is an error naming the file, the
document, the object and the field's path, with a did-you-mean (as ``kubectl apply`` refuses
it: strict field validation is the API server's default since 1.27). It also checks the names
Kubernetes checks inside a pod spec: container and volume names (DNS-1123 labels) and port
names (IANA service names).

The fields come from ``gpufleet/data/kube_fields.json``, derived from the official
``kubernetes`` client's model classes and the operators' published CRDs (see
:mod:`gpufleet.kube_client.field_tables`, which writes it and says which versions). Free-form
parts (labels, annotations, a CRD's ``x-kubernetes-preserve-unknown-fields``) are not checked.
Objects read back from a live API server are not checked here (it validated them already, and
a newer server's fields must not stop the scheduler). Kinds the tables do not know (gpufleet's
own, which their readers check) are passed over. It reads one data file, once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.fields import unknown_field
from gpufleet.io.kinds import shown_name
from gpufleet.io.manifests import Context
from gpufleet.io.names import NameRule, name_problem, port_name_problem

#: The apiVersion a kind is read as when an object gives none (gpufleet allows that).
DEFAULT_API_VERSIONS = {
    "Pod": "v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "PriorityClass": "scheduling.k8s.io/v1",
    "ResourceQuota": "v1",
    "HorizontalPodAutoscaler": "autoscaling/v2",
    "Node": "v1",
    "PyTorchJob": "kubeflow.org/v1",
    "MPIJob": "kubeflow.org/v2beta1",
    "RayJob": "ray.io/v1",
    "RayCluster": "ray.io/v1",
    "ScaledObject": "keda.sh/v1alpha1",
    "DeviceClass": "resource.k8s.io/v1",
    "ResourceClaim": "resource.k8s.io/v1",
    "ResourceClaimTemplate": "resource.k8s.io/v1",
    "ResourceSlice": "resource.k8s.io/v1",
}
#: apiVersions gpufleet reads with another's shape: a kubeflow.org/v1 MPIJob is read as the MPI
#: operator's v2beta1 (runLauncherAsWorker included), not as the training operator's v1 CRD.
SAME_SHAPE = {"kubeflow.org/v1/MPIJob": "kubeflow.org/v2beta1/MPIJob"}
_MAP = "{}"
#: Types whose ``name`` Kubernetes checks as a DNS-1123 label (containers, volumes).
_LABEL_NAMED = frozenset({"V1Container", "V1EphemeralContainer", "V1Volume"})
#: Types whose ``name`` is an IANA service name (ports a Service may name).
_PORT_NAMED = frozenset({"V1ContainerPort"})
_NAMED = _LABEL_NAMED | _PORT_NAMED

Types = dict[str, dict[str, str]]


@functools.cache
def tables() -> tuple[dict[str, str], Types, dict[str, str]]:
    """The roots (``apiVersion/kind`` -> type), the types' fields and each root's source."""
    text = resources.files("gpufleet").joinpath("data/kube_fields.json").read_text("utf-8")
    data = json.loads(text)
    return data["roots"], data["types"], data["sources"]


def root_type(obj: Mapping[str, Any]) -> str | None:
    """The type ``obj`` is checked as, or None for a kind (or apiVersion) not in the tables."""
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    api_version = obj.get("apiVersion", DEFAULT_API_VERSIONS.get(kind))
    roots, _, _ = tables()
    key = f"{api_version}/{kind}"
    return roots.get(SAME_SHAPE.get(key, key))


def check_kube_object(obj: Mapping[str, Any], source: str, location: str | None) -> None:
    """Raise :class:`~gpufleet.io.errors.InputError` at the first unknown field of ``obj`` (or
    misnamed container, volume or port), when its kind is one the tables know."""
    root = root_type(obj)
    if root is None:
        return
    _, types, _ = tables()
    problem = _check(obj, root, "", types)
    if problem is not None:
        field, message = problem
        kind = str(obj["kind"])
        shown = shown_name(obj, kind)
        context = Context(source, location).naming(f"{kind} {shown}" if shown else kind)
        raise context.error(field, message)


def _check(value: object, type_name: str, path: str, types: Types) -> tuple[str, str] | None:
    """The first problem under ``value`` of type ``type_name``: (field path, message)."""
    found = _find(value, type_name, types)
    if found is None:
        return None
    steps, message = found
    field = path
    for step in reversed(steps):
        field = (
            f"{field}[{step}]" if isinstance(step, int) else f"{field}.{step}" if field else step
        )
    return field, message


#: A problem found: the steps to it, innermost first (built only when there is one).
_Found = tuple[list[str | int], str]


def _find(value: object, type_name: str, types: Types) -> _Found | None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _find(item, type_name, types)
            if found is not None:
                found[0].append(index)
                return found
        return None
    if not isinstance(value, dict):
        return None  # a wrong type is the reader's to say
    if type_name.startswith(_MAP):
        inner = type_name[len(_MAP) :]
        for key, item in value.items():
            found = _find(item, inner, types)
            if found is not None:
                found[0].append(str(key))
                return found
        return None
    fields = types[type_name]
    for key, item in value.items():
        child = fields.get(key) if isinstance(key, str) else None
        if child is None:
            return [str(key)], unknown_field(str(key), sorted(fields))
        if child and isinstance(item, dict | list):
            found = _find(item, child, types)
            if found is not None:
                found[0].append(key)
                return found
    if type_name in _NAMED:
        return _name_problem(value.get("name"), type_name)
    return None


def _name_problem(name: object, type_name: str) -> _Found | None:
    if not isinstance(name, str):
        return None  # absent, or not text: the reader's to say
    if type_name in _PORT_NAMED:
        problem = port_name_problem(name)
    else:
        problem = name_problem(name, NameRule.LABEL)
    if problem is None:
        return None
    return ["name"], f"{problem}; got {quoted(name)}"
