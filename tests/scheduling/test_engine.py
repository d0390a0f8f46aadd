"""The placement engine: filters, explanations, device-level placement, gangs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Node, NodeSelectorRequirement, Pod, Taint, TaintEffect, Toleration
from gpufleet.scheduling.engine import Bound, PlacementEngine, Unschedulable
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import GPU_TAINT, GPU_TOLERATION, make_cluster, make_node, make_pod


def engine_for(nodes: list[Node], policy: str = "bestfit") -> PlacementEngine:
    table = NodeTable(nodes)
    return PlacementEngine(table, make_policy(policy, table, PolicyContext(TargetWorkload((), ()))))


def placed_on(engine: PlacementEngine, pod: Pod) -> str | None:
    result = engine.place(pod)
    return result.placement.node if isinstance(result, Bound) else None


MIXED = [
    make_node("a100", model="A100", labels={"zone": "z1", "tier": "3"}),
    make_node("t4", model="T4", gpus=2, labels={"zone": "z2", "tier": "1"}),
    make_node("cpu", gpus=0, labels={"zone": "z1"}),
    make_node("tainted", model="H100", taints=[GPU_TAINT], labels={"zone": "z2"}),
]


@pytest.mark.parametrize(
    ("pod", "allowed"),
    [
        pytest.param(make_pod(gpus=1, models=["T4"]), {"t4"}, id="gpu-model-list"),
        pytest.param(
            make_pod(gpus=1, selector={"nvidia.com/gpu.product": "A100"}),
            {"a100"},
            id="node-selector-on-gfd-label",
        ),
        pytest.param(
            make_pod(affinity=[NodeSelectorRequirement("zone", "In", ("z1",))]),
            {"a100", "cpu"},
            id="affinity-in",
        ),
        pytest.param(
            make_pod(affinity=[NodeSelectorRequirement("zone", "NotIn", ("z1",))]),
            {"t4"},
            id="affinity-notin",
        ),
        pytest.param(
            make_pod(affinity=[NodeSelectorRequirement("tier", "Exists")]),
            {"a100", "t4"},
            id="affinity-exists",
        ),
        pytest.param(
            make_pod(affinity=[NodeSelectorRequirement("tier", "DoesNotExist")]),
            {"cpu"},
            id="affinity-does-not-exist",
        ),
        pytest.param(
            make_pod(affinity=[NodeSelectorRequirement("tier", "Gt", ("2",))]),
            {"a100"},
            id="affinity-gt",
        ),
        pytest.param(
            make_pod(affinity=[NodeSelectorRequirement("tier", "Lt", ("2",))]),
            {"t4"},
            id="affinity-lt",
        ),
        pytest.param(
            make_pod(gpus=1, tolerations=[GPU_TOLERATION], models=["H100"]),
            {"tainted"},
            id="toleration-admits-tainted-node",
        ),
        pytest.param(
            make_pod(tolerations=[Toleration(operator="Exists")]),
            {"a100", "t4", "cpu", "tainted"},
            id="tolerate-everything",
        ),
        pytest.param(make_pod(gpus=1), {"a100", "t4"}, id="gpu-pod-no-toleration"),
    ],
)
def test_filters_allow_exactly(pod: Pod, allowed: set[str]) -> None:
    engine = engine_for(MIXED)
    mask = engine.feasible(engine.demand(pod))
    assert {engine.table.nodes[i].name for i in range(len(MIXED)) if mask[i]} == allowed


def test_taint_with_other_effect_is_not_tolerated() -> None:
    engine = engine_for([make_node("n", taints=[Taint("k", "v", TaintEffect.NO_EXECUTE)])])
    wrong = make_pod(tolerations=[Toleration("k", "Equal", "v", TaintEffect.NO_SCHEDULE)])
    right = make_pod(tolerations=[Toleration("k", "Equal", "v", TaintEffect.NO_EXECUTE)])
    assert placed_on(engine, wrong) is None
    assert placed_on(engine, right) == "n"


def test_prefer_no_schedule_taints_do_not_filter() -> None:
    engine = engine_for([make_node("n", taints=[Taint("k", "", TaintEffect.PREFER_NO_SCHEDULE)])])
    assert placed_on(engine, make_pod()) == "n"


def test_cordoned_node_takes_no_pods() -> None:
    engine = engine_for([make_node("n", unschedulable=True)])
    result = engine.place(make_pod())
    assert isinstance(result, Unschedulable)
    assert result.message() == "0/1 nodes are available: 1 node(s) were unschedulable."


def test_explain_counts_nodes_per_reason_like_kube_scheduler() -> None:
    nodes = (
        [make_node(f"full-{i}", gpus=1) for i in range(3)]
        + [make_node(f"t4-{i}", model="T4", gpus=4) for i in range(2)]
        + [make_node("tainted", taints=[GPU_TAINT])]
    )
    engine = engine_for(nodes)
    filled = [placed_on(engine, make_pod(gpus=1, models=["A100"])) for _ in range(3)]
    assert filled == ["full-0", "full-1", "full-2"], "the A100 nodes fill first"
    result = engine.place(make_pod(gpus=1, models=["A100"]))
    assert isinstance(result, Unschedulable)
    assert result.reasons == {
        "Insufficient nvidia.com/gpu": 3,
        "GPU model not allowed": 2,
        "node(s) had untolerated taint": 1,
    }
    assert result.message() == (
        "0/6 nodes are available: 3 Insufficient nvidia.com/gpu, 2 GPU model not allowed, "
        "1 node(s) had untolerated taint."
    )


PRODUCT = "nvidia.com/gpu.product"


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        pytest.param(
            make_pod("x", gpus=1, models=["B200"]),
            "default/x can never fit on this cluster: no node has GPU model B200. "
            "0/3 nodes are available: 2 GPU model not allowed, 1 Insufficient nvidia.com/gpu.",
            id="gpu-models-annotation",
        ),
        pytest.param(
            make_pod("x", gpus=1, selector={PRODUCT: "NVIDIA-B200"}),
            "default/x can never fit on this cluster: no node has GPU model NVIDIA-B200. "
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            id="node-selector-on-the-product-label",
        ),
        pytest.param(
            make_pod(
                "x", gpus=1, affinity=[NodeSelectorRequirement(PRODUCT, "In", ("B200", "GB2"))]
            ),
            "default/x can never fit on this cluster: no node has GPU model B200 or GB2. "
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            id="required-affinity-on-the-product-label",
        ),
        pytest.param(
            make_pod("x", gpus=2, models=["B200", "A100"]),
            "default/x can never fit on this cluster (cpu 1000m, memory 1024Mi, 2 x "
            "nvidia.com/gpu, GPU model in {A100, B200}). "
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            id="a-model-some-node-has-is-not-named",
        ),
    ],
)
def test_a_gpu_model_no_node_has_is_named(pod: Pod, message: str) -> None:
    engine = engine_for([make_node("a", gpus=1), make_node("b", gpus=1), make_node("c", gpus=0)])
    result = engine.place(pod)
    assert isinstance(result, Unschedulable)
    assert result.message() == message


def test_explain_tells_fragmented_shares_apart_from_full_nodes() -> None:
    engine = engine_for([make_node("n", gpus=2)])
    engine.place(make_pod(milli=600))
    engine.place(make_pod(milli=600))
    result = engine.place(make_pod(milli=500))
    assert isinstance(result, Unschedulable)
    assert result.reasons == {"GPU share fragmented (no single device has enough left)": 1}


def test_impossible_pod_is_reported_as_never_fitting() -> None:
    engine = engine_for(make_cluster(2, gpus=8))
    result = engine.place(make_pod(name="huge", gpus=16))
    assert isinstance(result, Unschedulable)
    assert (
        "default/huge can never fit on this cluster (cpu 1000m, memory 1024Mi, "
        "16 x nvidia.com/gpu)" in result.message()
    )
    assert not engine.fits_when_empty(make_pod(gpus=16))
    assert engine.fits_when_empty(make_pod(gpus=8))


def test_gpu_memory_share_converts_per_node() -> None:
    # 10 GiB of a 40 GiB device is 250 milli; of a 16 GiB device, 625 milli.
    engine = engine_for(
        [
            make_node("big", gpus=1, gpu_memory=40 * 1024),
            make_node("small", gpus=1, gpu_memory=16 * 1024),
        ]
    )
    first = engine.place(make_pod(gpu_memory=10 * 1024))
    assert isinstance(first, Bound)
    expected = {"big": 250, "small": 625}
    assert first.placement.gpu_milli_per_device == expected[first.placement.node]
    engine_small = engine_for([make_node("small", gpus=1, gpu_memory=16 * 1024)])
    placed = [engine_small.place(make_pod(gpu_memory=6 * 1024)) for _ in range(3)]
    assert [isinstance(p, Bound) for p in placed] == [True, True, False]


def test_mig_slices_are_placed_down_to_the_slot() -> None:
    node = make_node("mig", gpus=2, mig={1: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]})
    engine = engine_for([node])
    slices: list[tuple[int, int]] = []
    for _ in range(2):
        result = engine.place(make_pod(mig="1g.10gb"))
        assert isinstance(result, Bound)
        slices.extend(result.placement.mig_slices)
    assert sorted(slices) == [(1, 2), (1, 3)]
    third = engine.place(make_pod(mig="1g.10gb"))
    assert isinstance(third, Unschedulable)
    assert third.reasons == {"Insufficient nvidia.com/mig-1g.10gb": 1}
    # The partitioned device is not offered whole; the other one is.
    whole = engine.place(make_pod(gpus=1))
    assert isinstance(whole, Bound)
    assert whole.placement.gpu_indices == (0,)
    assert isinstance(engine.place(make_pod(gpus=1)), Unschedulable)


def test_unknown_mig_profile_fits_nowhere() -> None:
    engine = engine_for([make_node("n", mig={0: ["7g.80gb"]})])
    result = engine.place(make_pod(mig="1g.10gb"))
    assert isinstance(result, Unschedulable)
    assert "can never fit" in result.message()


def test_gang_is_all_or_nothing() -> None:
    engine = engine_for(make_cluster(2, gpus=4))
    before = engine.table.gpu_free[:2].copy()
    too_big = [make_pod(name=f"w{i}", gpus=2) for i in range(5)]
    result = engine.place_gang(too_big)
    assert isinstance(result, Unschedulable)
    assert "gang of 5: 4 placed, then default/w4 did not fit" in result.message()
    assert (engine.table.gpu_free[:2] == before).all()
    fits = engine.place_gang([make_pod(gpus=2) for _ in range(4)])
    assert isinstance(fits, list)
    assert len(fits) == 4
    assert int(engine.table.gpu_free[:2].sum()) == 0


def test_ties_go_to_the_lowest_tie_break_rank() -> None:
    import numpy as np

    table = NodeTable(make_cluster(4, gpus=1))
    engine = PlacementEngine(
        table,
        make_policy("gpu-packing", table, PolicyContext(TargetWorkload((), ()))),
        tie_rank=np.array([3, 1, 0, 2]),
    )
    assert placed_on(engine, make_pod(gpus=1)) == "node-2"
    assert placed_on(engine, make_pod(gpus=1)) == "node-1"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 999)), min_size=1, max_size=30))
def test_score_cache_gives_the_same_choices_as_a_cold_engine(ops: list[tuple[int, int]]) -> None:
    """The per-row score cache must never change a decision."""
    pods = [make_pod(milli=m) if kind == 0 else make_pod(gpus=kind) for kind, m in ops]
    warm = engine_for(make_cluster(4, gpus=4), "fgd")
    cold_table = NodeTable(make_cluster(4, gpus=4))
    for pod in pods:
        expected = warm.place(pod, explain=False)
        cold = PlacementEngine(
            cold_table, make_policy("fgd", cold_table, PolicyContext(TargetWorkload((), ())))
        )
        got = cold.place(pod, explain=False)
        assert type(expected) is type(got)
        if isinstance(expected, Bound) and isinstance(got, Bound):
            assert expected.placement == got.placement


def test_pods_differing_only_in_memory_never_read_stale_scores() -> None:
    """Regression: they share a score cache, but a row one of them cannot use (too little
    memory) was skipped on refresh and later served stale to the other."""
    nodes = [
        make_node("roomy", memory=64 * 1024, gpus=4),
        make_node("tight", memory=8 * 1024, gpus=4),
    ]
    warm = engine_for(nodes, "bestfit")
    big = make_pod(cpu=1000, memory=16 * 1024, gpus=1)
    small = make_pod(cpu=1000, memory=1024, gpus=1)
    # Both fit; bestfit packs GPUs, equal here, so the first row wins (and the cache is warm).
    assert placed_on(warm, small) == "roomy"
    for pod in (big, big, small, small, small):
        warm.place(pod)
        demand = warm.demand(small)
        mask = warm.feasible(demand)
        rows = np.flatnonzero(mask)
        if rows.size > 1:
            cold = warm.policy.scorers[0][0].score(warm.table, demand, rows)
            np.testing.assert_array_equal(
                warm.scores(demand, rows), warm.policy.scorers[0][0].normalize(cold)
            )


@settings(max_examples=60, deadline=None)
@given(
    placed=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 999)), max_size=25),
    probe=st.tuples(st.integers(0, 4), st.integers(1, 999), st.integers(0, 30_000)),
)
def test_fits_row_agrees_with_the_vectorised_filters(
    placed: list[tuple[int, int]], probe: tuple[int, int, int]
) -> None:
    nodes = [
        make_node("a", cpu=32_000, gpus=4, gpu_memory=16 * 1024),
        make_node("b", cpu=16_000, gpus=2, model="T4", taints=[GPU_TAINT]),
        make_node("c", cpu=8_000, gpus=0),
        make_node("m", cpu=32_000, gpus=2, mig={1: ["3g.40gb", "1g.10gb", "1g.10gb"]}),
    ]
    engine = engine_for(nodes)

    def pod_of(kind: int, milli: int, cpu: int = 1000) -> Pod:
        if kind == 0:
            return make_pod(cpu=cpu, milli=milli)
        if kind == 4:
            return make_pod(cpu=cpu, mig="1g.10gb")
        if kind == 3:
            return make_pod(cpu=cpu, gpu_memory=milli * 10, tolerations=[GPU_TOLERATION])
        return make_pod(cpu=cpu, gpus=kind)

    for kind, milli in placed:
        engine.place(pod_of(kind, milli))
    demand = engine.demand(pod_of(probe[0], probe[1], probe[2]))
    mask = engine.feasible(demand)
    assert [engine.fits_row(demand, r) for r in range(len(nodes))] == mask.tolist()
