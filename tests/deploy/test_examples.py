"""deploy/examples: what gpufleet reads of them (one scenario: queues, priority classes, gangs
and pods), that every workload is for the gpufleet scheduler, and the device-plugin config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.io.assembly import Scenario
from gpufleet.io.fleet.cluster_spec import cluster_spec_from_dict
from gpufleet.io.kube.pods import pods_from_object
from gpufleet.io.readers import read_scenario
from tests.deploy.support import DEPLOY_EXAMPLES, Loaded, load_objects

#: Kinds a scenario holds (read by gpufleet.io.readers.read_scenario).
SCENARIO_KINDS = frozenset(
    {"Queue", "PriorityClass", "PodGroup", "ResourceQuota", "Pod", "Job", "Deployment"}
)
#: Kinds the examples need on a real cluster that the scheduler does not read.
CLUSTER_KINDS = frozenset({"Namespace", "Service", "ConfigMap", "RoleBinding"})
WORKLOAD_KINDS = frozenset({"Pod", "Job", "Deployment"})

EXAMPLE_FILES = sorted(DEPLOY_EXAMPLES.glob("*.yaml"))
EXAMPLES = [item for path in EXAMPLE_FILES for item in load_objects(path)]
WORKLOADS = [item for item in EXAMPLES if item.kind in WORKLOAD_KINDS]


def test_expected_example_files() -> None:
    assert [path.name for path in EXAMPLE_FILES] == [
        "inference-deployment.yaml",
        "namespaces.yaml",
        "one-gpu-pod.yaml",
        "priority-classes.yaml",
        "pytorch-gang.yaml",
        "queues.yaml",
        "tenant-rbac.yaml",
        "time-slicing-configmap.yaml",
    ]


@pytest.mark.parametrize("item", EXAMPLES, ids=lambda item: item.id)
def test_example_kind_is_known(item: Loaded) -> None:
    assert item.kind in SCENARIO_KINDS | CLUSTER_KINDS


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """All the examples as one scenario, less the objects that only a cluster needs."""
    directory = tmp_path_factory.mktemp("scenario")
    for path in EXAMPLE_FILES:
        objects = [item.obj for item in load_objects(path) if item.kind in SCENARIO_KINDS]
        if objects:
            (directory / path.name).write_text(yaml.safe_dump_all(objects))
    return read_scenario(directory)


def test_scenario_queues(scenario: Scenario) -> None:
    queues = scenario.queues
    assert {name: queue.parent for name, queue in queues.items()} == {
        "acme": None,
        "ml-research": "acme",
        "ml-serving": "acme",
    }
    # GPU quotas per model, in milli-GPU.
    assert queues["acme"].nominal["nvidia.com/gpu.H100"] == 16_000
    assert queues["ml-research"].nominal["nvidia.com/gpu.H100"] == 16_000
    assert queues["ml-serving"].nominal["nvidia.com/gpu.L4"] == 16_000
    assert queues["ml-serving"].lending_limit["nvidia.com/gpu"] == 2_500
    assert queues["ml-research"].namespaces == ("ml-research",)


def test_scenario_priority_classes(scenario: Scenario) -> None:
    classes = {
        name: (pc.value, pc.preemption_policy.value, pc.global_default)
        for name, pc in scenario.priority_classes.items()
    }
    assert classes == {
        "inference-critical": (1000000, "PreemptLowerPriority", False),
        "training-batch": (100000, "PreemptLowerPriority", False),
    }


# name, queue, min_member, pods, priority, preemptible, milli-GPU per pod
EXPECTED_WORKLOADS: list[tuple[str, str, int, int, int, bool, int]] = [
    ("cuda-smoke-test", "ml-research", 1, 1, 0, True, 1000),
    ("embeddings-0", "ml-serving", 1, 1, 1000000, False, 250),
    ("embeddings-1", "ml-serving", 1, 1, 1000000, False, 250),
    ("embeddings-2", "ml-serving", 1, 1, 1000000, False, 250),
    ("pytorch-ddp", "ml-research", 4, 4, 100000, True, 1000),
]


def test_scenario_workloads(scenario: Scenario) -> None:
    found = sorted(
        (
            w.workload.name,
            w.workload.queue,
            w.workload.min_member,
            len(w.workload.pods),
            w.workload.priority,
            w.workload.preemptible,
            w.workload.pods[0].gpu.milli,
        )
        for w in scenario.workloads
    )
    assert found == EXPECTED_WORKLOADS


def test_gang_is_one_workload_with_a_topology_preference(scenario: Scenario) -> None:
    (gang,) = [w.workload for w in scenario.workloads if w.workload.name == "pytorch-ddp"]
    assert gang.topology is not None
    assert gang.topology.mode.value == "preferred"
    assert gang.topology.level == "gpufleet.dev/rack"
    assert {pod.labels["gpufleet.dev/pod-group"] for pod in gang.pods} == {"pytorch-ddp"}


@pytest.mark.parametrize("item", WORKLOADS, ids=lambda item: item.id)
def test_workload_pods_are_readable(item: Loaded) -> None:
    pods = pods_from_object(item.obj, str(item.path))
    assert pods
    for timed in pods:
        assert timed.pod.gpu.count == 1


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    return spec


def _pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    metadata = obj["metadata"] if obj["kind"] == "Pod" else obj["spec"]["template"]["metadata"]
    labels: dict[str, str] = metadata.get("labels", {})
    return labels


@pytest.mark.parametrize("item", WORKLOADS, ids=lambda item: item.id)
def test_workload_is_for_gpufleet(item: Loaded) -> None:
    spec = _pod_spec(item.obj)
    assert spec["schedulerName"] == "gpufleet"
    assert _pod_labels(item.obj)["gpufleet.dev/queue"] in ("ml-research", "ml-serving")
    assert {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "present",
        "effect": "NoSchedule",
    } in spec["tolerations"]
    for container in spec["containers"]:
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_inference_deployment_shares_a_gpu() -> None:
    (item,) = [item for item in WORKLOADS if item.kind == "Deployment"]
    template = item.obj["spec"]["template"]
    assert item.obj["spec"]["replicas"] == 3
    assert template["metadata"]["annotations"]["gpufleet.dev/gpu-milli"] == "250"
    assert template["spec"]["priorityClassName"] == "inference-critical"


def test_gang_pod_group_matches_the_job() -> None:
    objects = {item.kind: item.obj for item in load_objects(DEPLOY_EXAMPLES / "pytorch-gang.yaml")}
    group, job = objects["PodGroup"], objects["Job"]
    assert group["spec"]["minMember"] == 4
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 4
    assert job["spec"]["completionMode"] == "Indexed"
    assert _pod_labels(job)["gpufleet.dev/pod-group"] == group["metadata"]["name"]
    assert job["metadata"]["namespace"] == group["metadata"]["namespace"]
    # The rendezvous: a headless Service named as the pods' subdomain.
    service = objects["Service"]
    assert service["spec"]["clusterIP"] == "None"
    assert _pod_spec(job)["subdomain"] == service["metadata"]["name"]


def test_example_namespaces_exist() -> None:
    namespaces = {item.name for item in load_objects(DEPLOY_EXAMPLES / "namespaces.yaml")}
    used = {item.namespace for item in EXAMPLES if item.namespace is not None}
    assert used - {"gpu-operator"} == namespaces


def test_time_slicing_config_is_the_device_plugin_format() -> None:
    path: Path = DEPLOY_EXAMPLES / "time-slicing-configmap.yaml"
    (item,) = load_objects(path)
    assert (item.kind, item.namespace, item.name) == (
        "ConfigMap",
        "gpu-operator",
        "time-slicing-config",
    )
    config = yaml.safe_load(item.obj["data"]["any"])
    assert config["version"] == "v1"
    assert config["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}
    ]


def test_the_time_slicing_config_declares_a_simulated_pool() -> None:
    """The ConfigMap's config, as is, under a ClusterSpec pool's devicePlugin: 8 GPUs of 4
    replicas advertise 32 nvidia.com/gpu, as the device plugin advertises them."""
    (item,) = load_objects(DEPLOY_EXAMPLES / "time-slicing-configmap.yaml")
    pool = {
        "name": "t4",
        "count": 1,
        "cpu": "32",
        "memory": "128Gi",
        "gpu": {"model": "T4", "count": 8, "memory": "15Gi"},
        "devicePlugin": yaml.safe_load(item.obj["data"]["any"]),
    }
    spec = {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "ClusterSpec",
        "metadata": {"name": "ts"},
        "spec": {"pools": [pool]},
    }
    (node,) = cluster_spec_from_dict(spec, "cluster.yaml")
    assert (node.gpu_units, node.gpu_resource) == (32, "nvidia.com/gpu")
    assert node.labels["nvidia.com/gpu.replicas"] == "4"
