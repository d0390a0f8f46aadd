"""Kubeflow PyTorchJobs one at a time: their pods, replica sets and rules, and bad input."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.io.kube.pytorch_jobs import pytorch_job_pods, read_pytorch_job
from gpufleet.model import GpuRequest
from tests.io.test_queues import SOURCE, WHERE, Bad, check_bad_object, parse


def pytorch_job(replica_specs: str, extra: str = "") -> dict[str, Any]:
    return parse(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: pt, namespace: ml}\n"
        f"spec:\n{extra}  pytorchReplicaSpecs:\n{replica_specs}"
    )


TEMPLATE = (
    "template: {spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: GPUS}}}]}}"
)


def replica(kind: str, replicas: int | None, gpus: int = 1) -> str:
    count = "" if replicas is None else f"replicas: {replicas}, "
    return f"    {kind}: {{{count}{TEMPLATE.replace('GPUS', str(gpus))}}}\n"


@pytest.mark.parametrize(
    ("specs", "names"),
    [
        pytest.param(
            replica("Master", 1) + replica("Worker", 3),
            ["pt-master-0", "pt-worker-0", "pt-worker-1", "pt-worker-2"],
            id="master-and-workers",
        ),
        pytest.param(
            replica("Worker", 2) + replica("Master", None),
            ["pt-master-0", "pt-worker-0", "pt-worker-1"],
            id="master-first-replicas-default-1",
        ),
        pytest.param(replica("Worker", 2), ["pt-worker-0", "pt-worker-1"], id="workers-only"),
        pytest.param(replica("Master", 1) + replica("Worker", 0), ["pt-master-0"], id="no-workers"),
    ],
)
def test_pytorch_job_pods(specs: str, names: list[str]) -> None:
    pods = pytorch_job_pods(pytorch_job(specs), SOURCE, WHERE)
    assert [t.pod.name for t in pods] == names
    assert {t.pod.namespace for t in pods} == {"ml"}


def test_pytorch_job_pod_details() -> None:
    job = read_pytorch_job(
        pytorch_job(
            replica("Master", 1, gpus=2) + replica("Worker", 2),
            extra="  runPolicy: {schedulingPolicy: {minAvailable: 2}}\n",
        ),
        SOURCE,
        WHERE,
    )
    assert job.min_available == 2
    assert [r.replica_type for r in job.replicas] == ["Master", "Worker"]
    assert job.replicas[1].template_path == "spec.pytorchReplicaSpecs.Worker.template"
    master, worker = job.pods[0].pod, job.pods[2].pod
    assert master.gpu == GpuRequest.whole(2)
    assert worker.gpu == GpuRequest.whole(1)
    assert dict(worker.labels) == {
        "training.kubeflow.org/job-name": "pt",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "1",
    }


# ----------------------------------------------------------------------------------- bad input
BAD = {
    "pytorch-unknown-replica-type": Bad(
        read_pytorch_job,
        pytorch_job(replica("Chief", 1)),
        f"{WHERE}, PyTorchJob ml/pt",
        "spec.pytorchReplicaSpecs.Chief",
        "expected replica type Master or Worker, got 'Chief'",
    ),
    "pytorch-huge-replica-type-quoted-short": Bad(
        read_pytorch_job,
        pytorch_job(replica("C" * 600, 1)),
        f"{WHERE}, PyTorchJob ml/pt",
        "spec.pytorchReplicaSpecs." + "C" * 100 + "... (600 characters)",
        "expected replica type Master or Worker, got '" + "C" * 200 + "'... (600 characters)",
    ),
    "pytorch-template-field": Bad(
        read_pytorch_job,
        pytorch_job(replica("Worker", 2).replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 0.5")),
        f"{WHERE}, PyTorchJob ml/pt",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits"
        "[nvidia.com/gpu]",
        "expected a whole number, got 0.5",
    ),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_pytorch_jobs(case: Bad) -> None:
    check_bad_object(case)
