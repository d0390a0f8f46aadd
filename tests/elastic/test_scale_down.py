"""The scale-down decision: unneeded nodes after a cool-down, whose pods fit elsewhere; never a
node holding a gang's pod, a non-preemptible pod or a pod that must not be disrupted; pools
down to their minimum."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.elastic.scale_down import (
    DO_NOT_DISRUPT,
    SAFE_TO_EVICT,
    RunningPod,
    ScaleDownConfig,
    ScaleDownDecision,
    decide_scale_down,
)
from gpufleet.model import Node, Placement
from gpufleet.model.nodepools import NodePool
from gpufleet.scheduling.engine import PlacementEngine, Unschedulable
from gpufleet.scheduling.node_table import Claim, NodeTable
from gpufleet.scheduling.policies.bestfit import bestfit_policy
from gpufleet.testing.builders import (
    GPU_TAINT,
    GPU_TOLERATION,
    make_node,
    make_node_pool,
    make_workload,
)

POOL = make_node_pool("p", gpus=8, taints=[GPU_TAINT], max_nodes=10)


def nodes(count: int, pool: NodePool = POOL) -> list[Node]:
    return [pool.node(f"n{i}") for i in range(count)]


def on(node: str, first_gpu: int, gpus: int, name: str, **options: object) -> list[RunningPod]:
    """A one-pod workload of ``gpus`` whole GPUs on ``node`` (``pods=2``: the first pod of a
    gang of two; ``annotations``: the pod's)."""
    annotations = dict(options.pop("annotations", {}))  # type: ignore[call-overload]
    workload = make_workload(name, gpus=gpus, tolerations=[GPU_TOLERATION], **options)  # type: ignore[arg-type]
    pod = replace(workload.pods[0], annotations=annotations)
    placement = Placement(node, tuple(range(first_gpu, first_gpu + gpus)))
    return [RunningPod(pod, placement, workload)]


def twice(
    cluster: list[Node],
    running: list[RunningPod],
    pools: list[NodePool] | None = None,
    **kw: object,
) -> ScaleDownDecision:
    """Two turns, the cool-down apart: the second one's decision."""
    pools = pools or [POOL]
    first = decide_scale_down(cluster, running, pools, 0.0, **kw)  # type: ignore[arg-type]
    return decide_scale_down(
        cluster,
        running,
        pools,
        600.0,
        unneeded_since=first.unneeded_since,
        **kw,  # type: ignore[arg-type]
    )


def test_an_empty_node_goes_after_the_cool_down_and_not_before() -> None:
    cluster = nodes(2)
    running = on("n0", 0, 6, "busy")
    first = decide_scale_down(cluster, running, [POOL], 0.0)
    assert first.actions == ()
    assert first.unneeded_since == {"n1": 0.0}
    assert first.kept["n1"] == "unneeded for 0 s of the 600 s before removal"
    second = decide_scale_down(cluster, running, [POOL], 600.0, first.unneeded_since)
    assert [(a.node, a.reason) for a in second.actions] == [("n1", "empty for 600 s")]


def test_an_underused_node_is_drained_when_its_pods_fit_elsewhere() -> None:
    cluster = nodes(2)
    running = [*on("n0", 0, 5, "big"), *on("n1", 0, 2, "small")]
    decision = twice(cluster, running)
    (action,) = decision.actions
    assert action.node == "n1"
    assert action.moves == {"default/small": "n0"}
    assert action.reason == "25% of its GPUs requested for 600 s; its 1 pod(s) fit on n0"
    assert decision.kept["n0"].startswith("88% of its GPUs requested")


@pytest.mark.parametrize(
    "listed_gpus",
    [
        pytest.param(8, id="all-devices-listed"),
        pytest.param(7, id="a-held-device-withdrawn"),
    ],
)
def test_a_pod_on_a_device_its_node_no_longer_lists_is_counted_as_the_core_counts_it(
    listed_gpus: int,
) -> None:
    """The snapshot puts running pods back as the core does (devices the device plugin
    withdrew stay held), instead of failing on the missing device."""
    n0, n1 = nodes(2)
    cluster = [replace(n0, gpus=n0.gpus[:listed_gpus]), n1]
    running = [*on("n0", 4, 4, "big"), *on("n1", 0, 2, "small")]
    decision = twice(cluster, running)
    (action,) = decision.actions
    assert (action.node, action.moves) == ("n1", {"default/small": "n0"})


@pytest.mark.parametrize(
    ("running", "why"),
    [
        (on("n1", 0, 1, "g", pods=2), "it holds pod default/g-0 of gang default/g"),
        (on("n1", 0, 1, "np", preemptible=False),
         "it holds pod default/np of non-preemptible workload default/np"),
        (on("n1", 0, 1, "keep", annotations={SAFE_TO_EVICT: "false"}),
         f'pod default/keep is annotated {SAFE_TO_EVICT}: "false"'),
        (on("n1", 0, 1, "keep", annotations={DO_NOT_DISRUPT: "true"}),
         f'pod default/keep is annotated {DO_NOT_DISRUPT}: "true"'),
        (on("n1", 0, 4, "half"), "50% of its GPUs requested (at or above 50%)"),
        (on("n1", 0, 3, "big"), "its pod default/big fits on no other node"),
    ],
    ids=["gang", "non-preemptible", "safe-to-evict-false", "do-not-disrupt", "busy",
         "no-room-elsewhere"],
)  # fmt: skip
def test_a_node_stays_and_says_why(running: list[RunningPod], why: str) -> None:
    cluster = nodes(2)
    full = on("n0", 0, 6, "full")
    decision = twice(cluster, [*full, *running])
    assert decision.actions == ()
    assert decision.kept["n1"] == why
    assert "n1" not in decision.unneeded_since


def test_a_pool_never_goes_below_its_minimum_and_may_go_to_zero() -> None:
    keep_two = make_node_pool("p", gpus=8, taints=[GPU_TAINT], min_nodes=2, max_nodes=4)
    decision = twice(nodes(3, keep_two), [], [keep_two])
    assert len(decision.actions) == 1
    assert set(decision.kept.values()) == {"its pool p is at its minimum of 2 node(s)"}
    to_zero = twice(nodes(3), [])
    assert len(to_zero.actions) == 3


def test_nodes_of_no_known_pool_are_never_removed_and_a_scale_up_delays_scale_down() -> None:
    cluster = [*nodes(1), make_node("static", gpus=8)]
    decision = twice(cluster, [])
    assert [a.node for a in decision.actions] == ["n0"]
    assert "static" not in decision.kept
    waiting = twice(cluster, [], last_scale_up=300.0)
    assert waiting.actions == ()
    assert waiting.kept["n0"] == (
        "unneeded since 0 s; scale-down waits until 900 s (600 s after the last scale-up)"
    )


def test_at_most_one_node_is_drained_a_turn_and_pods_moved_in_count() -> None:
    cluster = nodes(3)
    running = [*on("n0", 0, 2, "a"), *on("n1", 0, 2, "b"), *on("n2", 0, 2, "c")]
    decision = twice(cluster, running, config=ScaleDownConfig(max_drain=5))
    # Two drain onto the third; the third then holds 6 GPUs and stays.
    assert len(decision.actions) == 2
    (stays,) = set(decision.kept)
    assert decision.kept[stays].startswith("75% of its GPUs requested")
    one = twice(cluster, running)
    assert len(one.actions) == 1


# ------------------------------------------------------------------------------ invariants
@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[RunningPod]]:
    count = draw(st.integers(1, 6))
    cluster = nodes(count)
    running: list[RunningPod] = []
    for index in range(count):
        used = 0
        for job in range(draw(st.integers(0, 3))):
            gpus = draw(st.integers(1, 4))
            if used + gpus > 8:
                break
            kind = draw(st.sampled_from(["plain", "plain", "gang", "non-preemptible", "nodisrupt"]))
            by_kind: dict[str, dict[str, object]] = {
                "gang": {"pods": 2},
                "non-preemptible": {"preemptible": False},
                "nodisrupt": {"annotations": {DO_NOT_DISRUPT: "true"}},
            }
            options = by_kind.get(kind, {})
            runs = on(f"n{index}", used, gpus, f"w{index}-{job}", **options)
            running.extend(runs)
            used += gpus
    return cluster, running


def protected(run: RunningPod) -> bool:
    return (
        run.workload.gang_size > 1
        or not run.workload.preemptible
        or run.pod.annotations.get(DO_NOT_DISRUPT) == "true"
    )


@settings(max_examples=200, deadline=None)
@given(scenario=clusters())
def test_scale_down_removes_only_nodes_whose_pods_fit_elsewhere_and_may_move(
    scenario: tuple[list[Node], list[RunningPod]],
) -> None:
    cluster, running = scenario
    decision = twice(cluster, running, config=ScaleDownConfig(max_drain=10))
    removed = {a.node for a in decision.actions}
    for run in running:
        if run.placement.node in removed:
            assert not protected(run)
    # Where the decision moves each pod of a removed node (a pod moved twice: its last stop),
    # the core places it, with every pod that stays where it is.
    final: dict[str, str] = {}
    for action in decision.actions:
        final.update(action.moves)
    staying = [n for n in cluster if n.name not in removed]
    engine = PlacementEngine(NodeTable(staying), bestfit_policy())
    table = engine.table
    for run in running:
        if run.placement.node in removed:
            continue
        row = table.row_of[run.placement.node]
        positions = table.position_of(row)
        devices = tuple(positions[i] for i in run.placement.gpu_indices)
        table.allocate(Claim(row, run.pod.cpu_milli, run.pod.memory_mib, devices, 1000))
    for run in running:
        if run.placement.node in removed:
            target = np.zeros(table.size, np.bool_)
            target[table.row_of[final[run.pod.key]]] = True
            assert not isinstance(engine.place(run.pod, restrict=target), Unschedulable)
    assert len(staying) >= POOL.min_nodes


def lent(cluster: list[Node], running: list[RunningPod]) -> PlacementEngine:
    """A placement engine holding ``running`` on ``cluster``, as the scheduler's is."""
    engine = PlacementEngine(NodeTable(cluster), bestfit_policy())
    table = engine.table
    for run in running:
        row = table.row_of[run.placement.node]
        positions = table.position_of(row)
        devices = tuple(positions[i] for i in run.placement.gpu_indices)
        table.allocate(Claim(row, run.pod.cpu_milli, run.pod.memory_mib, devices, 1000))
    return engine


@settings(max_examples=100, deadline=None)
@given(scenario=clusters())
def test_a_lent_snapshot_decides_alike_and_is_given_back_as_it_was(
    scenario: tuple[list[Node], list[RunningPod]],
) -> None:
    cluster, running = scenario
    config = ScaleDownConfig(max_drain=10)
    built = twice(cluster, running, config=config)
    engine = lent(cluster, running)
    table = engine.table
    before = (table.gpu_free.copy(), table.cpu_free.copy(), table.mem_free.copy(), table.state)
    first = decide_scale_down(cluster, running, [POOL], 0.0, config=config, snapshot=engine)
    second = decide_scale_down(
        cluster, running, [POOL], 600.0, first.unneeded_since, config=config, snapshot=engine
    )
    assert second == built
    after = (table.gpu_free, table.cpu_free, table.mem_free, table.state)
    assert all(np.array_equal(b, a) for b, a in zip(before[:3], after[:3], strict=True))
    assert before[3] == after[3]
