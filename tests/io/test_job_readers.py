"""The controller rules of workload objects: a Job's completions and limits, the failure model,
PyTorchJob restart policies, MPIJobs and KubeRay objects as gangs, and bad input in each."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.io.readers import read_scenario
from gpufleet.model.jobs import JobKind, JobSpec, Lifetime, ReplicaSet, RestartPolicy, SimFailures
from gpufleet.model.workload import TimedWorkload
from gpufleet.testing.job_objects import (
    batch_job,
    mpi_job,
    pod_template,
    pytorch_job,
    ray_cluster,
    ray_job,
    sim_notes,
)
from tests.io.conftest import WriteFile
from tests.io.test_queues import Case, at, check_bad_scenario, scenario_text

Obj = dict[str, Any]


def read_one(write_file: WriteFile, obj: Obj) -> TimedWorkload:
    (timed,) = read_scenario(write_file("scenario.yaml", scenario_text(obj))).workloads
    return timed


# -------------------------------------------------------------------------------- batch/v1 Job
@pytest.mark.parametrize(
    ("job", "pods", "spec"),
    [
        pytest.param(
            batch_job("j", 2, 5),
            ["j-0", "j-1"],
            JobSpec(
                JobKind.JOB,
                "j",
                (ReplicaSet("Job", ("j-0", "j-1"), RestartPolicy.NEVER),),
                completions=5,
                backoff_limit=6,
            ),
            id="completions-beyond-parallelism",
        ),
        pytest.param(
            batch_job("j", 4, 2),
            ["j-0", "j-1"],
            JobSpec(
                JobKind.JOB,
                "j",
                (ReplicaSet("Job", ("j-0", "j-1"), RestartPolicy.NEVER),),
                completions=2,
                backoff_limit=6,
            ),
            id="fewer-completions-than-parallelism",
        ),
        pytest.param(
            batch_job("j", 2, restart_policy=None),
            ["j-0", "j-1"],
            JobSpec(
                JobKind.JOB,
                "j",
                (ReplicaSet("Job", ("j-0", "j-1"), RestartPolicy.NEVER),),
                completions=2,
                backoff_limit=6,
            ),
            id="no-completions-no-restart-policy",
        ),
        pytest.param(
            batch_job(
                "j",
                1,
                3,
                restart_policy="OnFailure",
                backoffLimit=2,
                activeDeadlineSeconds=600,
                annotations=sim_notes("1m", 2, "30s", 3),
            ),
            ["j-0"],
            JobSpec(
                JobKind.JOB,
                "j",
                (ReplicaSet("Job", ("j-0",), RestartPolicy.ON_FAILURE, SimFailures(2, 30.0, 3)),),
                completions=3,
                backoff_limit=2,
                active_deadline=600.0,
            ),
            id="on-failure-limits-and-failures",
        ),
        pytest.param(
            batch_job("j", 2, 4, indexed=True, backoffLimitPerIndex=1, maxFailedIndexes=2),
            ["j-0", "j-1"],
            JobSpec(
                JobKind.JOB,
                "j",
                (ReplicaSet("Job", ("j-0", "j-1"), RestartPolicy.NEVER),),
                completions=4,
                indexed=True,
                backoff_limit=None,
                backoff_limit_per_index=1,
                max_failed_indexes=2,
            ),
            id="per-index-limit-lifts-the-job-limit",
        ),
    ],
)
def test_batch_job_rules(write_file: WriteFile, job: Obj, pods: list[str], spec: JobSpec) -> None:
    timed = read_one(write_file, job)
    assert [p.name for p in timed.workload.pods] == pods
    assert timed.jobs == (spec,)


def test_a_pod_only_gets_rules_when_it_may_fail(write_file: WriteFile) -> None:
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    plain["spec"] = pod_template()["spec"]
    assert read_one(write_file, plain).jobs == ()
    failing = {**plain, "metadata": {"name": "p", "annotations": sim_notes(failures=1)}}
    (spec,) = read_one(write_file, failing).jobs
    assert spec.replicas == (ReplicaSet("Pod", ("p",), RestartPolicy.ALWAYS, SimFailures(1)),)


# ------------------------------------------------------------------------------- PyTorchJob
def test_pytorch_job_rules(write_file: WriteFile) -> None:
    job = pytorch_job("pt", 2, backoff_limit=4, annotations=sim_notes(failures=1))
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    (spec,) = read_one(write_file, job).jobs
    failures = SimFailures(1)
    assert spec == JobSpec(
        JobKind.PYTORCH_JOB,
        "pt",
        (
            ReplicaSet("Master", ("pt-master-0",), RestartPolicy.ON_FAILURE, failures),
            ReplicaSet(
                "Worker", ("pt-worker-0", "pt-worker-1"), RestartPolicy.EXIT_CODE, failures,
                driver=False,
            ),
        ),
        backoff_limit=4,
    )  # fmt: skip


# ----------------------------------------------------------------------------------- MPIJob
@pytest.mark.parametrize("api", ["kubeflow.org/v2beta1", "kubeflow.org/v1"])
def test_mpi_job_gang_labels_and_rules(write_file: WriteFile, api: str) -> None:
    job = mpi_job("m", 2, launcher_gpus=0, api=api)
    job["spec"]["runLauncherAsWorker"] = True
    timed = read_one(write_file, job)
    workload = timed.workload
    assert [p.name for p in workload.pods] == ["m-launcher", "m-worker-0", "m-worker-1"]
    assert workload.gang_size == 3
    index = "training.kubeflow.org/replica-index"
    assert [p.labels[index] for p in workload.pods] == ["0", "1", "2"]
    assert {p.labels["training.kubeflow.org/job-name"] for p in workload.pods} == {"m"}
    assert [p.labels["training.kubeflow.org/job-role"] for p in workload.pods] == [
        "launcher", "worker", "worker",
    ]  # fmt: skip
    (spec,) = timed.jobs
    assert spec == JobSpec(
        JobKind.MPI_JOB,
        "m",
        (
            ReplicaSet("Launcher", ("m-launcher",), RestartPolicy.ON_FAILURE),
            ReplicaSet(
                "Worker", ("m-worker-0", "m-worker-1"), RestartPolicy.NEVER,
                lifetime=Lifetime.JOB, driver=False,
            ),
        ),
        backoff_limit=6,
    )  # fmt: skip


def test_mpi_job_min_available(write_file: WriteFile) -> None:
    job = mpi_job("m", 4, run_policy={"schedulingPolicy": {"minAvailable": 3}, "backoffLimit": 1})
    timed = read_one(write_file, job)
    assert timed.workload.gang_size == 3
    assert timed.jobs[0].backoff_limit == 1


# ------------------------------------------------------------------------------------ Ray
@pytest.mark.parametrize(
    ("groups", "autoscaling", "pods", "gang"),
    [
        pytest.param({"a": 2}, False, ["r-head", "r-a-worker-0", "r-a-worker-1"], 3, id="plain"),
        pytest.param(
            {"a": {"replicas": 5, "maxReplicas": 2}}, False,
            ["r-head", "r-a-worker-0", "r-a-worker-1"], 3, id="replicas-held-to-max",
        ),
        pytest.param(
            {"a": {"replicas": 0, "minReplicas": 1, "numOfHosts": 2}}, False,
            ["r-head", "r-a-worker-0", "r-a-worker-1"], 3, id="min-replicas-times-hosts",
        ),
        pytest.param(
            {"a": {"replicas": 2, "suspend": True}, "b": 1}, False,
            ["r-head", "r-b-worker-0"], 2, id="suspended-group",
        ),
        pytest.param(
            {"a": {"replicas": 3, "minReplicas": 1}}, True,
            ["r-head", "r-a-worker-0", "r-a-worker-1", "r-a-worker-2"], 2,
            id="autoscaling-gang-of-head-and-min-replicas",
        ),
    ],
)  # fmt: skip
def test_ray_cluster_pods_and_gang(
    write_file: WriteFile, groups: dict[str, Any], autoscaling: bool, pods: list[str], gang: int
) -> None:
    timed = read_one(write_file, ray_cluster("r", groups, autoscaling=autoscaling))
    workload = timed.workload
    assert [p.name for p in workload.pods] == pods
    assert workload.gang_size == gang
    head = workload.pods[0]
    assert (head.labels["ray.io/node-type"], head.labels["ray.io/cluster"]) == ("head", "r")
    (spec,) = timed.jobs
    assert spec.kind is JobKind.RAY_CLUSTER
    assert timed.duration is None  # a cluster runs until deleted


@pytest.mark.parametrize(
    ("mode", "pods", "head_cpu"),
    [
        pytest.param(None, ["r-head", "r-a-worker-0", "r-submitter"], 1000, id="k8s-job-mode"),
        pytest.param("HTTPMode", ["r-head", "r-a-worker-0"], 1000, id="http-mode"),
        pytest.param("SidecarMode", ["r-head", "r-a-worker-0"], 1500, id="sidecar-mode"),
    ],
)
def test_ray_job_submitter(
    write_file: WriteFile, mode: str | None, pods: list[str], head_cpu: int
) -> None:
    job = ray_job("r", {"a": 1}, submission_mode=mode, annotations=sim_notes("5m", 2))
    timed = read_one(write_file, job)
    assert [p.name for p in timed.workload.pods] == pods
    assert timed.workload.gang_size == 2
    assert timed.workload.pods[0].cpu_milli == head_cpu
    (spec,) = timed.jobs
    driver = "submitter" if mode is None else "head"
    for replica in spec.replicas:
        # The RayJob's failures are its Ray job's: the driver's only.
        assert replica.driver == (replica.role == driver)
        assert replica.failures == (SimFailures(2) if replica.driver else SimFailures())
        assert replica.lifetime is (Lifetime.WORK if replica.driver else Lifetime.JOB)
    assert spec.backoff_limit == 0


def test_a_ray_job_that_keeps_its_cluster_runs_it_until_deleted(write_file: WriteFile) -> None:
    (spec,) = read_one(write_file, ray_job("r", {"a": 1}, shutdown=False)).jobs
    assert [r.lifetime for r in spec.replicas] == [
        Lifetime.FOREVER,
        Lifetime.FOREVER,
        Lifetime.WORK,
    ]


# -------------------------------------------------------------------------------- bad input
def job_with(**spec: Any) -> Obj:
    return batch_job("j", 2, 2, **spec)


def mpi_with(**replica_specs: Obj) -> Obj:
    return {**mpi_job("m", 1), "spec": {"mpiReplicaSpecs": replica_specs}}


BAD = {
    "completion-mode": Case(
        [job_with(completionMode="Sometimes")], at(1, "Job default/j"), "spec.completionMode",
        "expected 'NonIndexed' or 'Indexed', got 'Sometimes'",
    ),
    "indexed-without-completions": Case(
        [batch_job("j", 2, indexed=True)], at(1, "Job default/j"), "spec.completions",
        "required when completionMode is Indexed",
    ),
    "per-index-not-indexed": Case(
        [job_with(backoffLimitPerIndex=1)], at(1, "Job default/j"), "spec.backoffLimitPerIndex",
        "requires completionMode: Indexed",
    ),
    "max-failed-without-per-index": Case(
        [batch_job("j", 2, 2, indexed=True, maxFailedIndexes=1)], at(1, "Job default/j"),
        "spec.maxFailedIndexes", "requires backoffLimitPerIndex",
    ),
    "per-index-with-on-failure": Case(
        [batch_job("j", 2, 2, indexed=True, restart_policy="OnFailure", backoffLimitPerIndex=1)],
        at(1, "Job default/j"), "spec.template.spec.restartPolicy",
        "backoffLimitPerIndex requires restartPolicy Never, got 'OnFailure'",
    ),
    "job-restarts-always": Case(
        [batch_job("j", restart_policy="Always")], at(1, "Job default/j"),
        "spec.template.spec.restartPolicy", "a Job's pods restart OnFailure or Never",
    ),
    "restart-policy-value": Case(
        [batch_job("j", restart_policy="Sometimes")], at(1, "Job default/j"),
        "spec.template.spec.restartPolicy", "expected 'Always', 'OnFailure' or 'Never'",
    ),
    "negative-backoff-limit": Case(
        [job_with(backoffLimit=-1)], at(1, "Job default/j"), "spec.backoffLimit",
        "expected a whole number >= 0, got -1",
    ),
    "zero-deadline": Case(
        [job_with(activeDeadlineSeconds=0)], at(1, "Job default/j"),
        "spec.activeDeadlineSeconds", "expected a whole number >= 1, got 0",
    ),
    "sim-failures-not-a-number": Case(
        [batch_job("j", annotations=sim_notes(failures="two"))],  # type: ignore[arg-type]
        at(1, "Job default/j"), "metadata.annotations[gpufleet.dev/sim-failures]",
        "expected a whole number >= 0, got 'two'",
    ),
    "sim-exit-code-out-of-range": Case(
        [batch_job("j", annotations=sim_notes(failures=1, exit_code=300))],
        at(1, "Job default/j"), "metadata.annotations[gpufleet.dev/sim-exit-code]",
        "expected an exit code from 1 to 255, got 300",
    ),
    "sim-fail-after-not-a-duration": Case(
        [batch_job("j", annotations=sim_notes(failures=1, fail_after="soon"))],
        at(1, "Job default/j"), "metadata.annotations[gpufleet.dev/sim-fail-after]",
        "expected seconds or a duration",
    ),
    "pytorch-restart-policy": Case(
        [pytorch_job("pt", 1, restart_policy="Sometimes")], at(1, "PyTorchJob default/pt"),
        "spec.pytorchReplicaSpecs.Master.restartPolicy",
        "expected 'Always', 'OnFailure', 'Never' or 'ExitCode'",
    ),
    "mpi-without-launcher": Case(
        [mpi_with(Worker={"template": pod_template()})],
        at(1, "MPIJob default/m"), "spec.mpiReplicaSpecs.Launcher", "an MPIJob needs a Launcher",
    ),
    "mpi-two-launchers": Case(
        [mpi_with(Launcher={"replicas": 2, "template": pod_template()})],
        at(1, "MPIJob default/m"), "spec.mpiReplicaSpecs.Launcher.replicas",
        "an MPIJob has one Launcher, got 2",
    ),
    "mpi-replica-type": Case(
        [mpi_with(Chief={"template": pod_template()})],
        at(1, "MPIJob default/m"), "spec.mpiReplicaSpecs.Chief",
        "expected replica type Launcher or Worker, got 'Chief'",
    ),
    "mpi-api-version": Case(
        [mpi_job("m", 1, api="kubeflow.org/v9")], at(1, "MPIJob default/m"), "apiVersion",
        "expected kubeflow.org/v2beta1 or kubeflow.org/v1 for a MPIJob",
    ),
    "ray-group-named-head": Case(
        [ray_cluster("r", {"head": 1})], at(1, "RayCluster default/r"),
        "spec.workerGroupSpecs[0].groupName", "group name 'head' is taken",
    ),
    "ray-min-above-max": Case(
        [ray_cluster("r", {"a": {"minReplicas": 3, "maxReplicas": 1}})],
        at(1, "RayCluster default/r"), "spec.workerGroupSpecs[0].minReplicas",
        "expected at most maxReplicas (1), got 3",
    ),
    "ray-job-on-existing-cluster": Case(
        [{**ray_job("r", {"a": 1}), "spec": {"clusterSelector": {"ray.io/cluster": "c"}}}],
        at(1, "RayJob default/r"), "spec.clusterSelector", "not supported",
    ),
    "ray-job-submission-mode": Case(
        [ray_job("r", {"a": 1}, submission_mode="Pigeon")], at(1, "RayJob default/r"),
        "spec.submissionMode", "expected one of K8sJobMode, HTTPMode, InteractiveMode",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_job_objects(write_file: WriteFile, case: Case) -> None:
    check_bad_scenario(write_file, case)
