"""Kubernetes workloads into timed pods: requests, GPU forms, constraints, Jobs, times."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpufleet.io.kube.pods import pods_from_object
from gpufleet.io.readers import read_workload
from gpufleet.model import (
    GpuRequest,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    TaintEffect,
    Toleration,
)
from gpufleet.model.workload import TimedPod
from tests.io.conftest import WriteFile


def pod_object(
    *containers: dict[str, Any],
    name: str = "p",
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": list(containers) or [{"name": "main"}], **spec},
    }


def container(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "c", "image": "busybox", "resources": resources, **extra}


def one(obj: dict[str, Any]) -> TimedPod:
    (timed,) = pods_from_object(obj, "pods.yaml", "document 1 (line 1)")
    return timed


@pytest.mark.parametrize(
    ("obj", "gpu"),
    [
        pytest.param(pod_object(container()), GpuRequest(), id="cpu-only"),
        pytest.param(pod_object(container({"nvidia.com/gpu": 2})), GpuRequest.whole(2), id="whole"),
        pytest.param(
            pod_object(container({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})),
            GpuRequest.whole(1),
            id="whole-requests-equal-limits",
        ),
        pytest.param(
            pod_object(container({"nvidia.com/gpu": 1}), container({"nvidia.com/gpu": 1})),
            GpuRequest.whole(2),
            id="whole-summed-over-containers",
        ),
        pytest.param(
            pod_object(annotations={"gpufleet.dev/gpu-milli": "250"}),
            GpuRequest.share(250),
            id="share-milli-without-gpu-resource",
        ),
        pytest.param(
            pod_object(
                container({"nvidia.com/gpu": 1}), annotations={"gpufleet.dev/gpu-memory": "10Gi"}
            ),
            GpuRequest.share(0, 10240, units=1),
            id="share-memory",
        ),
        pytest.param(
            pod_object(
                annotations={"gpufleet.dev/gpu-milli": "500", "gpufleet.dev/gpu-memory": "8000Mi"}
            ),
            GpuRequest.share(500, 8000),
            id="share-milli-and-memory",
        ),
        pytest.param(
            pod_object(annotations={"gpufleet.dev/gpu-milli": "1000"}),
            GpuRequest.whole(1),
            id="share-of-1000-is-whole",
        ),
        pytest.param(
            pod_object(
                container(
                    {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4096, "nvidia.com/gpucores": 50}
                )
            ),
            GpuRequest.share(500, 4096, units=1),
            id="hami-memory-and-cores",
        ),
        pytest.param(
            pod_object(container({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100})),
            GpuRequest.whole(1),
            id="hami-all-cores-is-whole",
        ),
        pytest.param(
            pod_object(container({"nvidia.com/mig-3g.40gb": 1})),
            GpuRequest.mig("3g.40gb", 1),
            id="mig",
        ),
        pytest.param(
            pod_object(
                container({"nvidia.com/mig-1g.10gb": 1}), container({"nvidia.com/mig-1g.10gb": 2})
            ),
            GpuRequest.mig("1g.10gb", 3),
            id="mig-summed",
        ),
        pytest.param(
            pod_object(container({"nvidia.com/gpu.shared": 2})),
            GpuRequest.whole(2, "nvidia.com/gpu.shared"),
            id="renamed-time-slicing-replicas",
        ),
        pytest.param(
            pod_object(
                container({"nvidia.com/gpu.shared": 1}),
                annotations={"gpufleet.dev/gpu-milli": "300"},
            ),
            GpuRequest.share(300, units=1, resource="nvidia.com/gpu.shared"),
            id="share-of-a-renamed-replica",
        ),
    ],
)
def test_gpu_requests(obj: dict[str, Any], gpu: GpuRequest) -> None:
    assert one(obj).pod.gpu == gpu


@pytest.mark.parametrize(
    ("obj", "cpu_milli", "memory_mib"),
    [
        pytest.param(
            pod_object(container({"cpu": "2", "memory": "4Gi"})), 2000, 4096, id="limits-only"
        ),
        pytest.param(
            pod_object(container({"cpu": "2", "memory": "4Gi"}, {"cpu": "500m"})),
            500,
            4096,
            id="requests-per-resource-default-to-limits",
        ),
        pytest.param(
            pod_object(
                container(requests={"cpu": "1", "memory": "1Gi"}),
                container(requests={"cpu": "250m", "memory": "512Mi"}),
            ),
            1250,
            1536,
            id="sum-over-containers",
        ),
        pytest.param(
            pod_object(
                container(requests={"cpu": "1", "memory": "1Gi"}),
                initContainers=[container(requests={"cpu": "4", "memory": "256Mi"})],
            ),
            4000,
            1024,
            id="init-container-larger-cpu",
        ),
        pytest.param(
            pod_object(
                container(requests={"cpu": "1", "memory": "1Gi"}),
                initContainers=[
                    container(requests={"cpu": "2"}),
                    container(requests={"cpu": "100m", "memory": "100Mi"}, restartPolicy="Always"),
                ],
            ),
            2000,
            1124,
            id="sidecar-adds-to-app-containers",
        ),
        pytest.param(
            pod_object(
                container(requests={"cpu": "1"}),
                initContainers=[
                    container(requests={"cpu": "500m"}, restartPolicy="Always"),
                    container(requests={"cpu": "2"}),
                ],
            ),
            2500,
            0,
            id="init-after-sidecar-runs-beside-it",
        ),
        pytest.param(
            pod_object(
                container(requests={"cpu": "1", "memory": "1Gi"}),
                overhead={"cpu": "250m", "memory": "120Mi"},
            ),
            1250,
            1144,
            id="overhead",
        ),
        pytest.param(
            pod_object(
                container(requests={"memory": "1.5Mi"}), container(requests={"memory": "1.5Mi"})
            ),
            0,
            3,
            id="summed-exactly-then-rounded",
        ),
    ],
)
def test_cpu_and_memory(obj: dict[str, Any], cpu_milli: int, memory_mib: int) -> None:
    pod = one(obj).pod
    assert (pod.cpu_milli, pod.memory_mib) == (cpu_milli, memory_mib)


def test_scheduling_constraints_and_metadata() -> None:
    obj = pod_object(
        container({"nvidia.com/gpu": 1}),
        annotations={"gpufleet.dev/gpu-models": "A100|H100", "note": "x"},
        nodeSelector={"zone": "b", "accelerator": "h100", "spot": True},
        tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "ml"},
            {"operator": "Exists"},
        ],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "gpu", "operator": "In", "values": ["a", "b"]},
                                {"key": "cores", "operator": "Gt", "values": ["16"]},
                            ]
                        },
                        {"matchExpressions": [{"key": "spare", "operator": "Exists"}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [],
            }
        },
        priority=1000,
    )
    obj["metadata"].update(namespace="ml", labels={"team": "research"})
    pod = one(obj).pod
    assert pod.key == "ml/p"
    assert pod.gpu_models == frozenset({"A100", "H100"})
    assert pod.node_selector == (("accelerator", "h100"), ("spot", "true"), ("zone", "b"))
    assert pod.tolerations == (
        Toleration("nvidia.com/gpu", "Exists", "", TaintEffect.NO_SCHEDULE),
        Toleration("dedicated", "Equal", "ml", None),
        Toleration(None, "Exists", "", None),
    )
    assert pod.required_affinity == (
        NodeSelectorTerm(
            (
                NodeSelectorRequirement("gpu", "In", ("a", "b")),
                NodeSelectorRequirement("cores", "Gt", ("16",)),
            )
        ),
        NodeSelectorTerm((NodeSelectorRequirement("spare", "Exists"),)),
    )
    assert pod.priority == 1000
    assert pod.labels == {"team": "research"}
    assert pod.annotations["note"] == "x"


@pytest.mark.parametrize(
    ("annotations", "created", "deleted"),
    [
        pytest.param({}, 0.0, None, id="no-times"),
        pytest.param({"gpufleet.dev/submit-at": "90"}, 90.0, None, id="submit-seconds"),
        pytest.param(
            {"gpufleet.dev/submit-at": "1h30m", "gpufleet.dev/sim-duration": "90s"},
            5400.0,
            5490.0,
            id="go-durations",
        ),
        pytest.param({"gpufleet.dev/expected-runtime": "5m"}, 0.0, 300.0, id="expected-runtime"),
        pytest.param(
            {"gpufleet.dev/sim-duration": "10", "gpufleet.dev/expected-runtime": "5m"},
            0.0,
            10.0,
            id="sim-duration-wins",
        ),
    ],
)
def test_times(annotations: dict[str, str], created: float, deleted: float | None) -> None:
    timed = one(pod_object(annotations=annotations))
    assert (timed.created, timed.deleted, timed.scheduled) == (created, deleted, None)


def test_numeric_annotation_values_are_read_as_text(write_file: WriteFile) -> None:
    path = write_file(
        "pods.yaml",
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: p
          annotations: {gpufleet.dev/submit-at: 30, gpufleet.dev/gpu-milli: 300}
        spec: {containers: [{name: c}]}
        """,
    )
    (timed,) = read_workload(path)
    assert timed.created == 30.0
    assert timed.pod.gpu == GpuRequest.share(300)


def job_object(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "research",
            "annotations": {"gpufleet.dev/sim-duration": "1h", "other": "not copied"},
        },
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "train"}, "annotations": {"x": "y"}},
                "spec": {"containers": [container({"nvidia.com/gpu": 1, "cpu": "8"})]},
            },
            **spec,
        },
    }


def test_job_parallelism_makes_named_labelled_pods() -> None:
    pods = pods_from_object(job_object(parallelism=4), "jobs.yaml")
    assert [t.pod.key for t in pods] == [f"research/train-{i}" for i in range(4)]
    first = pods[0]
    assert first.pod.labels == {
        "app": "train",
        "job-name": "train",
        "batch.kubernetes.io/job-name": "train",
    }
    assert first.pod.annotations == {"x": "y", "gpufleet.dev/sim-duration": "1h"}
    assert first.deleted == 3600.0
    assert first.pod.gpu == GpuRequest.whole(1)
    assert first.pod.cpu_milli == 8000


@pytest.mark.parametrize(
    ("spec", "count"),
    [
        pytest.param({}, 1, id="default-parallelism"),
        pytest.param({"parallelism": 4, "completions": 2}, 2, id="fewer-completions"),
        pytest.param({"parallelism": 0}, 0, id="suspended"),
    ],
)
def test_job_pod_count(spec: dict[str, Any], count: int) -> None:
    assert len(pods_from_object(job_object(**spec), "jobs.yaml")) == count


def test_indexed_job_pods_carry_their_index() -> None:
    pods = pods_from_object(job_object(parallelism=2, completionMode="Indexed"), "jobs.yaml")
    assert [t.pod.labels["batch.kubernetes.io/job-completion-index"] for t in pods] == ["0", "1"]


def test_deployment_replicas() -> None:
    obj = job_object(replicas=3)
    obj.update(apiVersion="apps/v1", kind="Deployment")
    pods = pods_from_object(obj, "deploy.yaml")
    assert [t.pod.name for t in pods] == ["train-0", "train-1", "train-2"]
    assert "job-name" not in pods[0].pod.labels


def test_read_pods_keeps_file_order(write_file: WriteFile) -> None:
    documents = [pod_object(name="a"), job_object(parallelism=2), pod_object(name="b")]
    path = write_file("pods.yaml", yaml.safe_dump_all(documents))
    assert [t.pod.name for t in read_workload(path)] == ["a", "train-0", "train-1", "b"]
