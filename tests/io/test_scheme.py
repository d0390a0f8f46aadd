"""Kind readers by API group and kind (io/scheme.py), and the readers the faces dispatch on:
a scenario's (``ScenarioBuilder.add``) and a cluster's (``read_cluster``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from gpufleet.io.assembly import SCENARIO_READERS, SUPPORTED, ScenarioBuilder
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.cluster_spec import cluster_spec_from_dict
from gpufleet.io.kube.autoscaling import AUTOSCALER_KINDS
from gpufleet.io.manifests import Manifest
from gpufleet.io.readers import CLUSTER_READERS, SCENARIO_KINDS
from gpufleet.io.scheme import Scheme

Reader = Callable[[], str]


def core_pod() -> str:
    return "core Pod"


def mpi_job() -> str:
    return "MPIJob"


def core_service() -> str:
    return "core Service"


def knative_service() -> str:
    return "Knative Service"


def example_scheme() -> Scheme[Reader]:
    scheme: Scheme[Reader] = Scheme()
    scheme.add("", "Pod", core_pod)
    scheme.register("kubeflow.org", "MPIJob")(mpi_job)
    scheme.add("", "Service", core_service)
    scheme.add("serving.knative.dev", "Service", knative_service)
    return scheme


class Lookup(NamedTuple):
    obj: dict[str, Any]
    reader: Reader | None


LOOKUPS = {
    "by-group-and-kind": Lookup({"apiVersion": "v1", "kind": "Pod"}, core_pod),
    "another-version-of-the-group": Lookup(
        {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob"}, mpi_job
    ),
    # The one reader of a kind checks the apiVersion itself (and says what it expects).
    "no-apiversion-one-reader": Lookup({"kind": "Pod"}, core_pod),
    "another-group-one-reader": Lookup({"apiVersion": "apps/v1", "kind": "Pod"}, core_pod),
    "apiversion-not-a-string-one-reader": Lookup({"apiVersion": 1, "kind": "Pod"}, core_pod),
    # Two groups read Service differently: the group decides, and without it nothing reads it.
    "core-group": Lookup({"apiVersion": "v1", "kind": "Service"}, core_service),
    "knative-group": Lookup(
        {"apiVersion": "serving.knative.dev/v1", "kind": "Service"}, knative_service
    ),
    "another-group-two-readers": Lookup({"apiVersion": "example.com/v1", "kind": "Service"}, None),
    "no-apiversion-two-readers": Lookup({"kind": "Service"}, None),
    "unknown-kind": Lookup({"apiVersion": "v1", "kind": "ConfigMap"}, None),
    "kind-of-another-case": Lookup({"apiVersion": "v1", "kind": "pod"}, None),
    "no-kind": Lookup({"apiVersion": "v1"}, None),
    "kind-not-a-string": Lookup({"apiVersion": "v1", "kind": ["Pod"]}, None),
}


@pytest.mark.parametrize("case", LOOKUPS.values(), ids=LOOKUPS.keys())
def test_reader_of(case: Lookup) -> None:
    assert example_scheme().reader_of(case.obj) is case.reader


def test_a_group_and_kind_has_one_reader() -> None:
    scheme = example_scheme()
    with pytest.raises(ValueError, match="kind Pod of API group '' has a reader already"):
        scheme.add("", "Pod", core_service)
    assert scheme.reader_of({"apiVersion": "v1", "kind": "Pod"}) is core_pod


def test_register_reads_every_kind_it_names_and_returns_the_reader() -> None:
    scheme: Scheme[Reader] = Scheme()
    assert scheme.register("ray.io", "RayCluster", "RayJob")(mpi_job) is mpi_job
    assert scheme.kinds == {"RayCluster", "RayJob"}
    for kind in ("RayCluster", "RayJob"):
        assert scheme.reader_of({"apiVersion": "ray.io/v1", "kind": kind}) is mpi_job


#: Each object of a scenario, by apiVersion and kind, and what reads it.
SCENARIO_OBJECTS = {
    "queue": ("gpufleet.dev/v1alpha1", "Queue", ScenarioBuilder.add_catalog_object),
    "priority-class": ("scheduling.k8s.io/v1", "PriorityClass", ScenarioBuilder.add_catalog_object),
    "pod-group": ("gpufleet.dev/v1alpha1", "PodGroup", ScenarioBuilder.add_pod_group),
    "coscheduling-pod-group": (
        "scheduling.x-k8s.io/v1alpha1", "PodGroup", ScenarioBuilder.add_pod_group,
    ),
    "resource-quota": ("v1", "ResourceQuota", ScenarioBuilder.add_resource_quota),
    "gpu-fault": ("gpufleet.dev/v1alpha1", "GpuFault", ScenarioBuilder.add_gpu_fault),
    "spot-interruption": (
        "gpufleet.dev/v1alpha1", "SpotInterruption", ScenarioBuilder.add_node_fault,
    ),
    "node-failure": ("gpufleet.dev/v1alpha1", "NodeFailure", ScenarioBuilder.add_node_fault),
    "idle-policy": ("gpufleet.dev/v1alpha1", "IdlePolicy", ScenarioBuilder.add_idle_policy),
    "inference-load": ("gpufleet.dev/v1alpha1", "InferenceLoad", ScenarioBuilder.add_inference),
    "telemetry": ("gpufleet.dev/v1alpha1", "SimulatedTelemetry", ScenarioBuilder.add_telemetry),
    "pytorch-job": ("kubeflow.org/v1", "PyTorchJob", ScenarioBuilder.add_operator_job),
    "mpi-job": ("kubeflow.org/v2beta1", "MPIJob", ScenarioBuilder.add_operator_job),
    "ray-cluster": ("ray.io/v1", "RayCluster", ScenarioBuilder.add_operator_job),
    "ray-job": ("ray.io/v1", "RayJob", ScenarioBuilder.add_operator_job),
    "pod": ("v1", "Pod", ScenarioBuilder.add_workload_object),
    "job": ("batch/v1", "Job", ScenarioBuilder.add_workload_object),
    "deployment": ("apps/v1", "Deployment", ScenarioBuilder.add_workload_object),
    "stateful-set": ("apps/v1", "StatefulSet", ScenarioBuilder.add_workload_object),
    "replica-set": ("apps/v1", "ReplicaSet", ScenarioBuilder.add_workload_object),
    "device-class": ("resource.k8s.io/v1", "DeviceClass", ScenarioBuilder.add_dra_object),
    "resource-claim": ("resource.k8s.io/v1", "ResourceClaim", ScenarioBuilder.add_dra_object),
    "resource-claim-template": (
        "resource.k8s.io/v1", "ResourceClaimTemplate", ScenarioBuilder.add_dra_object,
    ),
    "resource-slice": ("resource.k8s.io/v1", "ResourceSlice", ScenarioBuilder.add_dra_object),
}  # fmt: skip


@pytest.mark.parametrize(
    ("api_version", "kind", "reader"), SCENARIO_OBJECTS.values(), ids=SCENARIO_OBJECTS.keys()
)
def test_the_scenario_readers(api_version: str, kind: str, reader: object) -> None:
    assert SCENARIO_READERS.reader_of({"apiVersion": api_version, "kind": kind}) is reader


def test_a_scenario_reads_the_kinds_it_always_read() -> None:
    assert {kind for _, kind, _ in SCENARIO_OBJECTS.values()} == SCENARIO_READERS.kinds
    # The scenario files' reader reads the autoscalers and NodePools besides.
    assert SCENARIO_READERS.kinds | set(AUTOSCALER_KINDS) | {"NodePool"} == SCENARIO_KINDS


def test_the_cluster_readers() -> None:
    spec = {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "ClusterSpec"}
    assert CLUSTER_READERS.reader_of(spec) is cluster_spec_from_dict
    assert CLUSTER_READERS.kinds == {"ClusterSpec", "Node"}


#: Objects a scenario's builder has no reader for, and what it says (as before the scheme).
UNREAD = {
    "no-scheduling-meaning": ({"apiVersion": "v1", "kind": "ConfigMap"}, "got kind 'ConfigMap'"),
    "a-cluster-kind": (
        {"apiVersion": "v1", "kind": "Node"},
        "got kind 'Node' (a cluster, not a scenario)",
    ),
}


@pytest.mark.parametrize(("obj", "said"), UNREAD.values(), ids=UNREAD.keys())
def test_a_kind_no_reader_reads_is_refused_as_before(obj: dict[str, Any], said: str) -> None:
    manifest = Manifest({**obj, "metadata": {"name": "x"}}, 1, 1)
    with pytest.raises(InputError) as raised:
        ScenarioBuilder(strict=False).add(manifest, "in.yaml")
    assert str(raised.value) == (f"in.yaml:document 1 (line 1): kind: expected {SUPPORTED}, {said}")
