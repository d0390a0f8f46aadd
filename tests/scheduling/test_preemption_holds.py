"""Non-preemptible work within nominal quota, and the holds of preemptors: a preemptor whose
victims are leaving keeps what its preemption freed (quota and rows) until it is admitted, so
that nothing else takes it in between (found by the invariant properties)."""

from __future__ import annotations

from gpufleet.model.actions import Action, Evict, MarkUnschedulable
from gpufleet.model.events import PodDeleted, WorkloadAdded
from gpufleet.model.queues import Queue
from gpufleet.model.resources import GPU, gpu_model_key
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core


def names(actions: list[Action], kind: type) -> list[str]:
    return [a.pod.name for a in actions if isinstance(a, kind)]


def gpu_usage(core: SchedulerCore, queue: str) -> int:
    tree = core.quotas.tree
    return int(tree.usage[tree.index[queue], tree.key_index[GPU]])


def test_non_preemptible_work_counts_only_itself_against_nominal() -> None:
    # KAI's rule: a queue's non-preemptible work stays within its nominal quota, whatever
    # its preemptible work borrows; so it evicts nothing of its own queue to get in (an
    # earlier rule counted all the queue's usage, and made it evict borrowed work that the
    # queue then borrowed back).
    core = make_core(
        [make_node("n0", gpus=1), make_node("n1", gpus=2)],
        [make_queue("q", 1)],
        min_runtime=120.0,
    )
    cluster = EchoCluster(core)
    small = make_workload("small", "q", gpus=0, milli=250)
    whole = make_workload("whole", "q")
    cluster.submit(small, now=0)
    cluster.submit(whole, now=0)
    pinned = make_workload(
        "pinned", "q", pods=2, min_member=1, gpus=0, milli=500, priority=1, preemptible=False
    )
    actions = cluster.submit(pinned, now=130)
    assert names(actions, Evict) == []
    assert all(p.key in cluster.running for p in pinned.pods)
    more = make_workload("more", "q", gpus=0, milli=500, priority=1, preemptible=False)
    actions = cluster.submit(more, now=140)
    assert more.key in core.pending
    (why,) = {a.message for a in actions if isinstance(a, MarkUnschedulable)}
    assert "non-preemptible work stays within nominal quota" in why
    assert core.quotas.pinned_usage[core.quotas.tree.index["q"]].max() == 1000


def test_a_hold_is_given_back_when_the_preemptor_is_deleted() -> None:
    core = make_core([make_node("n0", gpus=1)], [make_queue("q", 1)], min_runtime=0.0)
    cluster = EchoCluster(core)
    low = make_workload("low", "q")
    cluster.submit(low, now=0)
    high = make_workload("high", "q", priority=5)
    core.handle(WorkloadAdded(high))
    actions = core.run_until_idle(10)
    assert names(actions, Evict) == ["low"]
    assert gpu_usage(core, "q") == 2000  # the victim, still there, and the hold
    core.handle_all([PodDeleted(p.key) for p in high.pods])  # gone before its victim left
    assert high.key not in core.nominated
    assert gpu_usage(core, "q") == 1000
    core.handle_all(cluster.apply(actions))  # the victim leaves, waits again, finds room
    cluster.settle(now=11)
    assert low.key in core.running
    assert gpu_usage(core, "q") == 1000


def test_non_preemptible_pod_goes_to_the_model_its_queue_has_nominal_quota_of() -> None:
    # The pod allows A100 or H100; its queue's nominal quota covers H100 only (the A100 quota
    # is another queue's). The engine may prefer an A100, but non-preemptible work must stay
    # within nominal for the model too: it goes to the H100 rather than waiting forever.
    a100 = make_node("a100", gpus=2, model="A100")
    h100 = make_node("h100", gpus=2, model="H100")
    ns = frozenset({"default"})
    chat = Queue("chat", nominal={GPU: 1000, gpu_model_key("H100"): 1000}, admitted_namespaces=ns)
    batch = Queue("batch", nominal={GPU: 1000, gpu_model_key("A100"): 1000}, admitted_namespaces=ns)
    core = make_core([a100, h100], [chat, batch])
    cluster = EchoCluster(core)
    serve = make_workload(
        "serve", "chat", gpus=0, milli=500, preemptible=False, models=["A100", "H100"]
    )
    cluster.submit(serve, now=0)
    assert serve.key in core.running
    assert cluster.running[serve.pods[0].key].node == "h100"
