"""The core's public view: what waits (why, for what, since when) and what runs where, as
frozen values that agree with the core's own accounting."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.resources import GPU
from gpufleet.scheduling.view import SchedulerView
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

G = 1000


def busy_view() -> tuple[SchedulerView, EchoCluster]:
    """Two 4-GPU nodes; queue a may use 4 GPUs (no more), queue b (no quota) what a leaves. a runs 3
    GPUs and waits for quota with 2 more; b runs 2 and waits for capacity with a gang of two
    pods that each need almost a whole node's CPU."""
    core = make_core(
        [make_node("n0", gpus=4), make_node("n1", gpus=4)],
        [make_queue("a", 4, borrow=0), make_queue("b")],
    )
    cluster = EchoCluster(core)
    for at, workload in (
        (10.0, make_workload("a-run", "a", gpus=3)),
        (20.0, make_workload("b-run", "b", gpus=2)),
        (30.0, make_workload("a-wait", "a", gpus=2)),
        (40.0, make_workload("b-gang", "b", pods=2, gpus=1, cpu=63_500)),
    ):
        cluster.settle(at)  # the core's clock reads ``at`` when the workload arrives
        cluster.submit(workload, now=at)
    return core.view(estimate=True), cluster


def test_the_view_says_what_waits_why_for_what_and_since_when() -> None:
    view, _ = busy_view()
    waiting = {w.key: w for w in view.waiting}
    assert set(waiting) == {"default/a-wait", "default/b-gang"}
    quota, capacity = waiting["default/a-wait"], waiting["default/b-gang"]
    assert (quota.queue, quota.waiting_for, quota.since) == ("a", "quota", 30.0)
    assert quota.requests[GPU] == 2 * G
    assert quota.attempts >= 1
    assert quota.message.startswith("waiting for quota")
    assert (capacity.queue, capacity.waiting_for, capacity.reason) == ("b", "capacity", "capacity")
    assert (capacity.pods, capacity.gang_size) == (2, 2)
    assert capacity.requests[GPU] == 2 * G
    assert capacity.position == 1
    assert view.now == 40.0


def test_the_view_says_what_runs_where() -> None:
    view, cluster = busy_view()
    running = {r.key: r for r in view.running}
    assert set(running) == {"default/a-run", "default/b-run"}
    assert running["default/a-run"].usage[GPU] == 3 * G
    assert running["default/a-run"].nodes == {
        "default/a-run": cluster.running["default/a-run"].node
    }
    assert running["default/a-run"].gpu_milli == {"A100": 3 * G}
    assert running["default/b-run"].started == 20.0
    assert all(r.ready and r.evicted_for is None for r in view.running)
    assert view.evicting == ()


def test_the_view_is_read_only() -> None:
    view, _ = busy_view()
    waiting, running = view.waiting[0], view.running[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        waiting.priority = 99  # type: ignore[misc]
    with pytest.raises(TypeError):
        waiting.requests[GPU] = 0  # type: ignore[index]
    with pytest.raises(TypeError):
        running.usage[GPU] = 0  # type: ignore[index]


def test_the_view_explains_as_explain_pending() -> None:
    core = make_core(
        [make_node("n0", gpus=4), make_node("n1", gpus=4)],
        [make_queue("a", 4), make_queue("b")],
    )
    cluster = EchoCluster(core)
    cluster.submit(*(make_workload(f"w{i}", "ab"[i % 2], gpus=1 + i % 3) for i in range(9)))
    view = core.view(estimate=True)
    assert [w.explanation() for w in view.waiting] == core.explain_pending()


@settings(max_examples=60, deadline=None)
@given(
    loads=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 3), st.integers(0, 8)),
        max_size=12,
    ),
    ends=st.lists(st.integers(0, 11), max_size=4),
)
def test_every_workload_is_seen_once_waiting_running_or_evicting(
    loads: list[tuple[str, int, int]], ends: list[int]
) -> None:
    core = make_core(
        [make_node(f"n{i}", gpus=4) for i in range(3)],
        [make_queue("a", 6), make_queue("b", 2, borrow=6)],
        min_runtime=0.0,
    )
    cluster = EchoCluster(core)
    submitted = []
    for i, (queue, pods, priority) in enumerate(loads):
        workload = make_workload(f"w{i}", queue, pods=pods, gpus=2, priority=priority)
        submitted.append(workload)
        cluster.submit(workload, now=float(i))
    for i in ends:
        if i < len(submitted) and submitted[i].key in core.running:
            cluster.finish_workload(submitted[i], now=100.0)
    view = core.view()
    seen = [w.key for w in view.waiting] + [r.key for r in (*view.running, *view.evicting)]
    assert len(seen) == len(set(seen))
    assert set(seen) == set(core.running) | set(core.evicting) | {
        p.workload.key for p in core.pending.workloads()
    }
    assert sum(r.usage.get(GPU, 0) for r in view.running) == sum(
        r.usage.get(GPU, 0) for r in core.running.values()
    )
