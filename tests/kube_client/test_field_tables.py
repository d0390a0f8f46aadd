"""The shipped field tables are what the installed ``kubernetes`` client's models say: a moved
client without regenerating them fails here."""

from __future__ import annotations

import json
from importlib import resources

import kubernetes
import pytest

from gpufleet.io.kube.schema import tables
from gpufleet.kube_client.field_tables import CORE_ROOTS, core_tables, renewed_core


def test_the_core_tables_are_the_installed_clients() -> None:
    _, shipped_types, sources = tables()
    if kubernetes.__version__ not in sources["v1/Pod"]:
        pytest.skip(f"tables from another client than {kubernetes.__version__}")
    roots, types = core_tables()
    shipped_roots, _, _ = tables()
    assert {key: shipped_roots[key] for key in roots} == roots
    assert {name: shipped_types[name] for name in types} == types
    assert len(roots) == len(CORE_ROOTS)


def test_a_crd_pod_template_is_the_core_pod_template() -> None:
    _, types, _ = tables()
    worker = types["kubeflow.org/v1/PyTorchJob.spec.pytorchReplicaSpecs.*"]
    assert worker["template"] == "V1PodTemplateSpec"
    assert types["ray.io/v1/RayJob"]["metadata"] == "V1ObjectMeta"


def test_renewing_the_core_keeps_the_crds_tables() -> None:
    """``--core-from``: the installed client's core kinds, every CRD table as shipped."""
    shipped = json.loads(resources.files("gpufleet").joinpath("data/kube_fields.json").read_text())
    if kubernetes.__version__ not in shipped["sources"]["v1/Pod"]:
        pytest.skip(f"tables from another client than {kubernetes.__version__}")
    assert renewed_core(shipped) == shipped
    assert shipped["roots"]["resource.k8s.io/v1/ResourceClaim"] == "ResourceV1ResourceClaim"
