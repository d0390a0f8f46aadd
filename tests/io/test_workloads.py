"""A whole scenario: gangs, queues, priorities, annotations, times, bad input, the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.io.assembly import Scenario
from gpufleet.io.errors import InputError
from gpufleet.io.readers import read_cluster, read_scenario, workloads_from_pods
from gpufleet.model import GpuRequest, Pod
from gpufleet.model.priorities import PreemptionPolicy
from gpufleet.model.queues import implicit_default_queue
from gpufleet.model.resources import GPU, GPU_MODEL_PREFIX
from gpufleet.model.workload import TimedPod, TopologyMode, TopologyRequest
from tests.conftest import REPO_ROOT
from tests.io.conftest import WriteFile
from tests.io.test_queues import (
    Case,
    Obj,
    at,
    check_bad_scenario,
    pod_group,
    priority_class,
    queue,
    scenario_text,
)

CONTAINERS = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]


# ------------------------------------------------------------------------------------ builders
def k8s(
    api: str, kind: str, name: str, ns: str | None, labels: Obj | None, notes: Obj | None
) -> Obj:
    """An object's header; ``notes`` are its annotations."""
    metadata = {"name": name, "namespace": ns, "labels": labels, "annotations": notes}
    return {"apiVersion": api, "kind": kind, "metadata": {k: v for k, v in metadata.items() if v}}


def template(labels: Obj | None = None, annotations: Obj | None = None, **spec: Any) -> Obj:
    metadata = {"labels": labels or {}, "annotations": annotations or {}}
    return {"metadata": metadata, "spec": {"containers": CONTAINERS, **spec}}


def pod(
    name: str,
    ns: str | None = None,
    labels: Obj | None = None,
    annotations: Obj | None = None,
    **spec: Any,
) -> Obj:
    return {**k8s("v1", "Pod", name, ns, labels, annotations), "spec": template(**spec)["spec"]}


def job(
    name: str,
    parallelism: int,
    ns: str | None = None,
    labels: Obj | None = None,
    annotations: Obj | None = None,
    pod_template: Obj | None = None,
) -> Obj:
    spec = {"parallelism": parallelism, "template": pod_template or template()}
    return {**k8s("batch/v1", "Job", name, ns, labels, annotations), "spec": spec}


def deployment(
    name: str,
    replicas: int,
    ns: str | None = None,
    labels: Obj | None = None,
    annotations: Obj | None = None,
    pod_template: Obj | None = None,
) -> Obj:
    spec = {"replicas": replicas, "template": pod_template or template()}
    return {**k8s("apps/v1", "Deployment", name, ns, labels, annotations), "spec": spec}


def pytorch_job(
    name: str,
    masters: int,
    workers: int,
    ns: str | None = None,
    labels: Obj | None = None,
    min_available: int | None = None,
    worker_template: Obj | None = None,
) -> Obj:
    master = {"replicas": masters, "template": template()}
    worker = {"replicas": workers, "template": worker_template or template()}
    spec: Obj = {"pytorchReplicaSpecs": {"Master": master, "Worker": worker}}
    if min_available is not None:
        spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    return {**k8s("kubeflow.org/v1", "PyTorchJob", name, ns, labels, None), "spec": spec}


def read(write_file: WriteFile, *objects: Obj) -> Scenario:
    return read_scenario(write_file("scenario.yaml", scenario_text(*objects)))


GROUP = "gpufleet.dev/pod-group"
COSCHEDULING = "scheduling.x-k8s.io/pod-group"
QUEUE = "gpufleet.dev/queue"
KUEUE = "kueue.x-k8s.io/queue-name"


# --------------------------------------------------------------------------------------- gangs
@pytest.mark.parametrize(
    ("objects", "gangs"),
    [
        pytest.param(
            [pod("a"), pod("b")],
            {"default/a": (["a"], 1), "default/b": (["b"], 1)},
            id="plain-pods",
        ),
        pytest.param(
            [pod("a", labels={GROUP: "g"}), pod("b", labels={GROUP: "g"}), pod("c")],
            {"default/g": (["a", "b"], 2), "default/c": (["c"], 1)},
            id="pod-group-label-without-podgroup",
        ),
        pytest.param(
            [pod_group("g", 2, "ml"), *(pod(n, "ml", labels={GROUP: "g"}) for n in "abc")],
            {"ml/g": (["a", "b", "c"], 2)},
            id="pod-group-with-podgroup",
        ),
        pytest.param(
            [
                pod_group("g", 1, api="scheduling.x-k8s.io/v1alpha1"),
                pod("a", labels={COSCHEDULING: "g"}),
                pod("b", labels={COSCHEDULING: "g"}),
            ],
            {"default/g": (["a", "b"], 1)},
            id="scheduler-plugins-pod-group",
        ),
        pytest.param(
            [pod("a", "x", labels={GROUP: "g"}), pod("b", "y", labels={GROUP: "g"})],
            {"x/g": (["a"], 1), "y/g": (["b"], 1)},
            id="pod-group-per-namespace",
        ),
        pytest.param([job("j", 3)], {"default/j": (["j-0", "j-1", "j-2"], 3)}, id="job"),
        pytest.param([job("j", 0)], {}, id="job-parallelism-0-has-no-workload"),
        pytest.param(
            [pod_group("g", 2), job("j", 2, labels={GROUP: "g"}), pod("p", labels={GROUP: "g"})],
            {"default/g": (["j-0", "j-1", "p"], 2)},
            id="job-joins-pod-group",
        ),
        pytest.param(
            [job("j", 2, pod_template=template(labels={GROUP: "g"}))],
            {"default/g": (["j-0", "j-1"], 2)},
            id="job-template-pod-group-label",
        ),
        pytest.param(
            [pytorch_job("pt", 1, 3)],
            {"default/pt": (["pt-master-0", "pt-worker-0", "pt-worker-1", "pt-worker-2"], 4)},
            id="pytorch-job",
        ),
        pytest.param(
            [pytorch_job("pt", 1, 3, min_available=2)],
            {"default/pt": (["pt-master-0", "pt-worker-0", "pt-worker-1", "pt-worker-2"], 2)},
            id="pytorch-job-min-available",
        ),
        pytest.param(
            [deployment("web", 2)],
            {"default/web-0": (["web-0"], 1), "default/web-1": (["web-1"], 1)},
            id="deployment-replicas-independent",
        ),
    ],
)
def test_gangs(
    write_file: WriteFile, objects: list[Obj], gangs: dict[str, tuple[list[str], int]]
) -> None:
    scenario = read(write_file, *objects)
    found = {
        t.workload.key: ([p.name for p in t.workload.pods], t.workload.gang_size)
        for t in scenario.workloads
    }
    assert found == gangs


# -------------------------------------------------------------------------------------- queues
TREE = [queue("org"), queue("team", "org", namespaces=["ml"])]


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param([*TREE, pod("p", "ml", labels={QUEUE: "org"})], "org", id="label"),
        pytest.param(
            [*TREE, job("j", 2, "ml", pod_template=template(labels={QUEUE: "org"}))],
            "org",
            id="template-label",
        ),
        pytest.param(
            [
                *TREE,
                queue("other", "org"),
                job(
                    "j",
                    1,
                    "ml",
                    labels={QUEUE: "other"},
                    pod_template=template(labels={QUEUE: "org"}),
                ),
            ],
            "other",
            id="object-label-wins-over-template",
        ),
        pytest.param(
            [*TREE, pytorch_job("pt", 1, 1, "ml", labels={QUEUE: "org"})],
            "org",
            id="pytorch-job-label",
        ),
        pytest.param(
            [*TREE, deployment("d", 1, "ml", labels={QUEUE: "org"})], "org", id="deployment-label"
        ),
        pytest.param([*TREE, pod("p", "ml")], "team", id="namespace-default"),
        pytest.param([pod("p", "ml")], "default", id="implicit-default"),
        pytest.param(
            [
                *TREE,
                pod("a", "ml", labels={GROUP: "g", QUEUE: "org"}),
                pod("b", "ml", labels={GROUP: "g"}),
            ],
            "org",
            id="gang-label-on-one-pod",
        ),
        pytest.param([*TREE, pod("p", "ml", labels={KUEUE: "org"})], "org", id="kueue-label"),
        pytest.param(
            [*TREE, job("j", 2, "ml", labels={KUEUE: "org"})], "org", id="kueue-label-on-a-job"
        ),
        pytest.param(
            [*TREE, job("j", 2, "ml", pod_template=template(labels={KUEUE: "org"}))],
            "org",
            id="kueue-template-label",
        ),
        pytest.param(
            [*TREE, pod("p", "ml", labels={KUEUE: "org", QUEUE: "org"})],
            "org",
            id="kueue-and-own-label-agree",
        ),
    ],
)
def test_queue_resolution(write_file: WriteFile, objects: list[Obj], expected: str) -> None:
    scenario = read(write_file, *objects)
    assert {t.workload.queue for t in scenario.workloads} == {expected}
    assert expected in scenario.queues


def test_implicit_default_queue_is_added_only_without_queues(write_file: WriteFile) -> None:
    # every namespace may use it: it is where a workload goes that names no queue
    assert read(write_file, pod("p")).queues == {"default": implicit_default_queue()}
    assert list(read(write_file, *TREE, pod("p", "ml")).queues) == ["org", "team"]


# ---------------------------------------------------------------------------------- priorities
CLASSES = [priority_class("high", 1000), priority_class("never", 5, preemptionPolicy="Never")]
DEFAULT_CLASS = priority_class("batch", 10, globalDefault=True)
PREEMPT = PreemptionPolicy.PREEMPT_LOWER_PRIORITY


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param(
            [*CLASSES, pod("p", priorityClassName="high")], (1000, "high", PREEMPT), id="class"
        ),
        pytest.param(
            [*CLASSES, pod("p", priorityClassName="never")],
            (5, "never", PreemptionPolicy.NEVER),
            id="class-never",
        ),
        pytest.param(
            [*CLASSES, DEFAULT_CLASS, pod("p")], (10, "batch", PREEMPT), id="global-default"
        ),
        pytest.param(
            [*CLASSES, DEFAULT_CLASS, pod("p", priority=42)],
            (42, None, PREEMPT),
            id="explicit-priority",
        ),
        pytest.param([*CLASSES, pod("p")], (0, None, PREEMPT), id="no-class-no-default"),
        pytest.param(
            [*CLASSES, job("j", 2, pod_template=template(priorityClassName="high"))],
            (1000, "high", PREEMPT),
            id="job-template",
        ),
        pytest.param(
            [*CLASSES, pytorch_job("pt", 1, 1, worker_template=template(priorityClassName="high"))],
            (1000, "high", PREEMPT),
            id="pytorch-worker-class-covers-master",
        ),
    ],
)
def test_priority_resolution(
    write_file: WriteFile, objects: list[Obj], expected: tuple[int, str | None, PreemptionPolicy]
) -> None:
    (timed,) = read(write_file, *objects).workloads
    found = timed.workload
    assert (found.priority, found.priority_class, found.preemption_policy) == expected
    assert {p.priority for p in found.pods} == {expected[0]}


# --------------------------------------------------------------------------------- annotations
NVLINK = "gpufleet.dev/nvlink-domain"


@pytest.mark.parametrize(
    ("obj", "attribute", "expected"),
    [
        pytest.param(pod("p"), "preemptible", True, id="preemptible-default"),
        pytest.param(
            pod("p", annotations={"gpufleet.dev/preemptible": "false"}),
            "preemptible",
            False,
            id="not-preemptible",
        ),
        pytest.param(
            pod("p", annotations={"gpufleet.dev/expected-runtime": "1h30m"}),
            "expected_runtime",
            5400.0,
            id="expected-runtime",
        ),
        pytest.param(
            pod("p", annotations={"gpufleet.dev/checkpoint-interval": "600"}),
            "checkpoint_interval",
            600.0,
            id="checkpoint-interval",
        ),
        pytest.param(pod("p"), "topology", None, id="no-topology"),
        pytest.param(
            pod("p", annotations={"gpufleet.dev/topology": "required"}),
            "topology",
            TopologyRequest(TopologyMode.REQUIRED, NVLINK),
            id="topology-defaults-to-nvlink",
        ),
        pytest.param(
            pod(
                "p",
                annotations={
                    "gpufleet.dev/topology": "preferred",
                    "gpufleet.dev/topology-level": "rack",
                },
            ),
            "topology",
            TopologyRequest(TopologyMode.PREFERRED, "gpufleet.dev/rack"),
            id="topology-rack",
        ),
        pytest.param(
            pod(
                "p",
                annotations={
                    "gpufleet.dev/topology": "required",
                    "gpufleet.dev/topology-level": "zone",
                },
            ),
            "topology",
            TopologyRequest(TopologyMode.REQUIRED, "topology.kubernetes.io/zone"),
            id="topology-zone",
        ),
        pytest.param(
            pod(
                "p",
                annotations={
                    "gpufleet.dev/topology": "required",
                    "gpufleet.dev/topology-level": "example.com/pod",
                },
            ),
            "topology",
            TopologyRequest(TopologyMode.REQUIRED, "example.com/pod"),
            id="topology-label-key",
        ),
        pytest.param(job("j", 2), "mixed_gpu_models", False, id="one-gpu-model-by-default"),
        pytest.param(
            job("j", 2, annotations={"gpufleet.dev/mixed-gpu-models": "true"}),
            "mixed_gpu_models",
            True,
            id="mixed-gpu-models",
        ),
        pytest.param(
            job(
                "j",
                2,
                annotations={"gpufleet.dev/checkpoint-interval": "5m"},
                pod_template=template(annotations={"gpufleet.dev/checkpoint-interval": "1m"}),
            ),
            "checkpoint_interval",
            300.0,
            id="object-wins-over-template",
        ),
        pytest.param(
            deployment(
                "d", 1, pod_template=template(annotations={"gpufleet.dev/preemptible": "false"})
            ),
            "preemptible",
            False,
            id="template-annotation",
        ),
    ],
)
def test_annotations(write_file: WriteFile, obj: Obj, attribute: str, expected: object) -> None:
    (timed,) = read(write_file, obj).workloads
    assert getattr(timed.workload, attribute) == expected


# --------------------------------------------------------------------------------------- times
@pytest.mark.parametrize(
    ("objects", "created", "duration"),
    [
        pytest.param([pod("p")], 0.0, None, id="no-times"),
        pytest.param(
            [
                pod(
                    "p",
                    annotations={"gpufleet.dev/submit-at": "2m", "gpufleet.dev/sim-duration": "1h"},
                )
            ],
            120.0,
            3600.0,
            id="pod",
        ),
        pytest.param(
            [pod("p", annotations={"gpufleet.dev/expected-runtime": "1h"})],
            0.0,
            3600.0,
            id="expected-runtime-ends-it-without-sim-duration",
        ),
        pytest.param(
            [
                pod(
                    "p",
                    annotations={
                        "gpufleet.dev/expected-runtime": "1h",
                        "gpufleet.dev/sim-duration": "10m",
                    },
                )
            ],
            0.0,
            600.0,
            id="sim-duration-wins-over-expected-runtime",
        ),
        pytest.param(
            [
                pod("a", labels={GROUP: "g"}, annotations={"gpufleet.dev/sim-duration": "10m"}),
                pod("b", labels={GROUP: "g"}, annotations={"gpufleet.dev/expected-runtime": "2h"}),
            ],
            0.0,
            600.0,
            id="a-gang-with-a-sim-duration-ignores-expected-runtime",
        ),
        pytest.param(
            [job("j", 2, annotations={"gpufleet.dev/expected-runtime": "30m"})],
            0.0,
            1800.0,
            id="job-expected-runtime",
        ),
        pytest.param(
            [
                pod(
                    "a",
                    labels={GROUP: "g"},
                    annotations={
                        "gpufleet.dev/submit-at": "90",
                        "gpufleet.dev/sim-duration": "10m",
                    },
                ),
                pod(
                    "b",
                    labels={GROUP: "g"},
                    annotations={
                        "gpufleet.dev/submit-at": "30",
                        "gpufleet.dev/sim-duration": "20m",
                    },
                ),
            ],
            30.0,
            1200.0,
            id="gang-earliest-and-longest",
        ),
        pytest.param(
            [
                job(
                    "j",
                    2,
                    annotations={"gpufleet.dev/submit-at": "1m", "gpufleet.dev/sim-duration": "5m"},
                )
            ],
            60.0,
            300.0,
            id="job",
        ),
    ],
)
def test_times(
    write_file: WriteFile, objects: list[Obj], created: float, duration: float | None
) -> None:
    (timed,) = read(write_file, *objects).workloads
    assert (timed.created, timed.duration) == (created, duration)


# ------------------------------------------------------------------- files, CSVs, plain pods
def test_scenario_contents_across_files(write_file: WriteFile, tmp_path: Path) -> None:
    write_file("dir/a.yaml", scenario_text(*TREE, *CLASSES))
    write_file("dir/b.yml", scenario_text(pod("p", "ml", priorityClassName="high")))
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "rq", "namespace": "ml"},
        "spec": {"hard": {"requests.nvidia.com/gpu": 4}},
    }
    extra = write_file("quota.yaml", scenario_text(quota))
    scenario = read_scenario([tmp_path / "dir", extra, tmp_path / "dir" / "a.yaml"])
    assert list(scenario.queues) == ["org", "team"]
    assert list(scenario.priority_classes) == ["high", "never"]
    assert [(q.name, dict(q.hard)) for q in scenario.resource_quotas] == [("rq", {GPU: 4000})]
    assert [
        (t.workload.key, t.workload.queue, t.workload.priority) for t in scenario.workloads
    ] == [("ml/p", "team", 1000)]


def test_alibaba_csv(write_file: WriteFile) -> None:
    csv = write_file(
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1024,1,500,10,110,20\np1,2000,2048,2,1000,15,,\n",
    )
    scenario = read_scenario(csv)
    found = [(t.workload.key, t.workload.queue, t.created, t.duration) for t in scenario.workloads]
    assert found == [("default/p0", "default", 10.0, 90.0), ("default/p1", "default", 15.0, None)]
    assert scenario.workloads[1].workload.pods[0].gpu == GpuRequest.whole(2)
    assert list(scenario.queues) == ["default"]


def test_workloads_from_pods() -> None:
    pods = [TimedPod(Pod("a", "ml", priority=7), 5.0, 65.0), TimedPod(Pod("b"))]
    found = [
        (t.workload.key, t.workload.queue, t.workload.priority, t.created, t.duration)
        for t in workloads_from_pods(pods)
    ]
    assert found == [("ml/a", "default", 7, 5.0, 60.0), ("default/b", "default", 0, 0.0, None)]


def test_a_name_two_kinds_share_makes_two_workloads_keyed_with_their_kinds(
    write_file: WriteFile,
) -> None:
    """As in Kubernetes, a Pod "g" and the pods of pod group "g" are two objects."""
    scenario = read(write_file, pod("g"), pod("a", labels={GROUP: "g"}), job("j", 1))
    assert sorted(scenario.kinds.items()) == [
        ("default/Pod/g", "Pod"),
        ("default/PodGroup/g", "PodGroup"),
        ("default/j", "Job"),
    ]
    grouped = next(t.workload for t in scenario.workloads if t.workload.kind == "PodGroup")
    assert (grouped.name, [p.name for p in grouped.pods]) == ("g", ["a"])


# ----------------------------------------------------------------------------------- bad input
BAD = {
    "missing-queue": Case(
        [queue("org", namespaces=["ml"]), pod("p", "research")],
        at(2, "Pod research/p"),
        "metadata.labels[gpufleet.dev/queue]",
        "no queue: expected the label gpufleet.dev/queue, or a Queue whose spec.namespaces "
        "lists 'research' (defined: org)",
    ),
    "label-names-missing-queue": Case(
        [queue("org"), job("j", 1, "ml", pod_template=template(labels={QUEUE: "orgg"}))],
        at(2, "Job ml/j"),
        "spec.template.metadata.labels[gpufleet.dev/queue]",
        "queue 'orgg' is not defined (defined: org)",
    ),
    "mixed-queues-in-gang": Case(
        [
            queue("a"),
            queue("b"),
            pod("p1", labels={GROUP: "g", QUEUE: "a"}),
            pod("p2", labels={GROUP: "g", QUEUE: "b"}),
        ],
        at(4, "Pod default/p2"),
        "metadata.labels[gpufleet.dev/queue]",
        "all pods of gang default/g must name the same queue: got 'b' here, but 'a' in ",
    ),
    "missing-priority-class": Case(
        [*CLASSES, deployment("d", 2, "ml", pod_template=template(priorityClassName="hihg"))],
        at(3, "Deployment ml/d"),
        "spec.template.spec.priorityClassName",
        "priority class 'hihg' is not defined (defined: high, never)",
    ),
    "min-member-larger-than-pods": Case(
        [
            pod("a", "ml", labels={GROUP: "g"}),
            pod("b", "ml", labels={GROUP: "g"}),
            pod_group("g", 3, "ml"),
        ],
        at(3, "PodGroup ml/g"),
        "spec.minMember",
        "expected at most the 2 pods that name pod group ml/g, got 3",
    ),
    "min-available-larger-than-pods": Case(
        [pytorch_job("pt", 1, 1, "ml", min_available=3)],
        at(1, "PyTorchJob ml/pt"),
        "spec.runPolicy.schedulingPolicy.minAvailable",
        "expected at most the job's 2 pods, got 3",
    ),
    "duplicate-pod": Case(
        [pod("p"), job("p", 1), pod("p-0")],
        at(3, "Pod default/p-0"),
        "metadata.name",
        "pod default/p-0 appears twice (first from ",
    ),
    "bad-preemptible": Case(
        [job("j", 1, annotations={"gpufleet.dev/preemptible": "no"})],
        at(1, "Job default/j"),
        "metadata.annotations[gpufleet.dev/preemptible]",
        'expected "true" or "false", got \'no\'',
    ),
    "bad-checkpoint-interval": Case(
        [pod("p", annotations={"gpufleet.dev/checkpoint-interval": "often"})],
        at(1, "Pod default/p"),
        "metadata.annotations[gpufleet.dev/checkpoint-interval]",
        "expected seconds or a duration such as 90s, 5m or 1h30m, got 'often'",
    ),
    "topology-level-without-mode": Case(
        [pod("p", annotations={"gpufleet.dev/topology-level": "rack"})],
        at(1, "Pod default/p"),
        "metadata.annotations[gpufleet.dev/topology-level]",
        "a topology level needs gpufleet.dev/topology: required or preferred",
    ),
    "bad-topology-mode": Case(
        [
            deployment(
                "d", 1, pod_template=template(annotations={"gpufleet.dev/topology": "strict"})
            )
        ],
        at(1, "Deployment default/d"),
        "spec.template.metadata.annotations[gpufleet.dev/topology]",
        "expected required or preferred, got 'strict'",
    ),
    "bad-topology-level": Case(
        [
            pod(
                "p",
                annotations={
                    "gpufleet.dev/topology": "required",
                    "gpufleet.dev/topology-level": "my rack",
                },
            )
        ],
        at(1, "Pod default/p"),
        "metadata.annotations[gpufleet.dev/topology-level]",
        "expected nvlink, rack, zone or a node label key, got 'my rack'",
    ),
    "gang-priority-classes-differ": Case(
        [
            *CLASSES,
            pod("a", labels={GROUP: "g"}, priorityClassName="high"),
            pod("b", labels={GROUP: "g"}, priorityClassName="never"),
        ],
        at(4, "Pod default/b"),
        "spec.priorityClassName",
        "all pods of gang default/g must name the same priorityClassName: got 'never' here, "
        "but 'high' in ",
    ),
    "two-pod-group-labels-differ": Case(
        [pod("a", labels={GROUP: "g", COSCHEDULING: "h"})],
        at(1, "Pod default/a"),
        "metadata.labels[scheduling.x-k8s.io/pod-group]",
        "names pod group 'h', but gpufleet.dev/pod-group names 'g'",
    ),
    "kueue-and-own-queue-labels-differ": Case(
        [*TREE, pod("a", "ml", labels={QUEUE: "org", KUEUE: "team"})],
        at(3, "Pod ml/a"),
        "metadata.labels[kueue.x-k8s.io/queue-name]",
        "names queue 'team', but gpufleet.dev/queue names 'org': give one queue",
    ),
    "kueue-label-names-an-unknown-queue": Case(
        [*TREE, pod("a", "ml", labels={KUEUE: "lq"})],
        at(3, "Pod ml/a"),
        "metadata.labels[kueue.x-k8s.io/queue-name]",
        "queue 'lq' is not defined (defined: org, team); kueue.x-k8s.io/queue-name is read as "
        "gpufleet.dev/queue",
    ),
    "unknown-kind": Case(
        [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
            }
        ],
        "document 1 (line 1), ClusterQueue cq",
        "kind",
        "gpufleet does not read kind ClusterQueue: Kueue's quota; give it as a gpufleet Queue",
    ),
    "cluster-kind": Case(
        [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}],
        "document 1 (line 1), Node n",
        "kind",
        "got kind Node (a cluster, not a scenario)",
    ),
    "pod-error-inside-scenario": Case(
        [queue("org"), {**pod("p", "ml"), "spec": {"containers": []}}],
        at(2, "Pod ml/p"),
        "spec.containers",
        "required: expected at least one container, got none",
    ),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_scenarios(write_file: WriteFile, case: Case) -> None:
    check_bad_scenario(write_file, case)


def test_bad_error_in_second_file_names_it(write_file: WriteFile, tmp_path: Path) -> None:
    write_file("a.yaml", scenario_text(queue("org", namespaces=["ml"])))
    second = write_file(
        "b.yaml", scenario_text(pod("p", "ml"), pod("q", "ml", labels={QUEUE: "a", GROUP: "g"}))
    )
    with pytest.raises(InputError) as raised:
        read_scenario(tmp_path)
    assert str(raised.value).startswith(
        f"{second}:{at(2, 'Pod ml/q')}: metadata.labels[gpufleet.dev/queue]: queue 'a'"
    )


def test_empty_file(write_file: WriteFile) -> None:
    path = write_file("empty.yaml", "# nothing\n")
    with pytest.raises(InputError, match="found no objects"):
        read_scenario(path)


# ------------------------------------------------------------------------------------ examples
EXAMPLES = REPO_ROOT / "examples" / "tenancy"


def test_examples_load_together() -> None:
    scenario = read_scenario(EXAMPLES)
    assert list(scenario.queues) == ["org", "research", "llm", "inference", "chat"]
    assert {
        n: (c.value, c.preemption_policy, c.global_default)
        for n, c in scenario.priority_classes.items()
    } == {
        "inference-critical": (1000000, PREEMPT, False),
        "training-batch": (100000, PREEMPT, True),
        "best-effort": (0, PreemptionPolicy.NEVER, False),
    }
    found = {t.workload.key: t.workload for t in scenario.workloads}
    assert list(found) == [
        "research/notebook",
        "llm/llm-pretrain",
        "research/finetune",
        "research/sweep",
        "chat/chat-api-0",
        "chat/chat-api-1",
        "chat/chat-api-2",
        *(f"llm/eval-{i}" for i in range(12)),
    ]
    pretrain = found["llm/llm-pretrain"]
    assert (pretrain.gang_size, pretrain.queue) == (4, "llm")
    assert pretrain.topology == TopologyRequest(TopologyMode.REQUIRED, NVLINK)
    finetune = found["research/finetune"]
    assert (finetune.priority_class, finetune.checkpoint_interval, finetune.gang_size) == (
        "training-batch",
        1800.0,
        2,
    )
    sweep = found["research/sweep"]
    assert (sweep.min_member, sweep.preemption_policy) == (3, PreemptionPolicy.NEVER)
    chat = found["chat/chat-api-0"]
    assert (chat.priority, chat.preemptible, chat.queue) == (1000000, False, "chat")
    assert chat.pods[0].gpu == GpuRequest.share(500, units=1)
    assert found["research/notebook"].priority_class == "training-batch"  # the global default


def test_examples_fit_the_small_cluster() -> None:
    """The per-model quotas and GPU-model constraints name models of examples/clusters/small.yaml,
    and the org's nominal GPUs are no more than the cluster has."""
    nodes = read_cluster(REPO_ROOT / "examples" / "clusters" / "small.yaml")
    models = {gpu.model for node in nodes for gpu in node.gpus}
    assert models == {"H100", "A100", "T4"}
    scenario = read_scenario(EXAMPLES)
    for queue_ in scenario.queues.values():
        for resources in (queue_.nominal, queue_.borrowing_limit, queue_.lending_limit):
            named = {
                key.removeprefix(GPU_MODEL_PREFIX)
                for key in resources
                if key.startswith(GPU_MODEL_PREFIX)
            }
            assert named <= models, queue_.name
    for timed in scenario.workloads:
        for p in timed.workload.pods:
            assert p.gpu_models is None or p.gpu_models <= models, p.key
    total = sum(len(node.gpus) for node in nodes) * 1000
    assert scenario.queues["org"].nominal[GPU] <= total
    for model in ("H100", "A100"):
        on_model = sum(1000 for node in nodes for gpu in node.gpus if gpu.model == model)
        assert scenario.queues["org"].nominal[GPU_MODEL_PREFIX + model] <= on_model
