"""Cost grouped by workload, namespace, queue, tenant, label or annotation (the seeds'
team, cost-center, project): workloads without the key in __unallocated__, the cluster's idle
in __idle__, and the lines always adding up to the total."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.economics import (
    IDLE,
    UNALLOCATED,
    Allocation,
    CapacityType,
    Holding,
    aggregate,
    allocate,
    group_key,
)
from gpufleet.testing.economics_builders import HOUR, holding, hours, node_gpus, price_list

WINDOW = hours(0, 10)


def seeded_allocation() -> Allocation:
    """Three teams' workloads as the seeds label them, one without labels, idle GPUs."""
    return allocate(
        [
            holding(
                "train",
                gpus=4,
                utilisation=0.9,
                namespace="ml",
                queue="research",
                tenant="acme",
                labels={"team": "vision"},
                annotations={"cost-center": "ml-team", "project": "recommendation-model"},
            ),
            holding(
                "notebook",
                gpus=1,
                utilisation=0.1,
                namespace="ml",
                queue="interactive",
                tenant="acme",
                annotations={"team": "nlp", "cost-center": "ml-team"},
            ),
            holding(
                "serve",
                gpus=2,
                utilisation=0.5,
                namespace="prod",
                queue="serving",
                tenant="beta",
                labels={"team": "vision"},
            ),
            holding("stray", gpus=0, cpu=4, namespace="default"),
        ],
        price_list(),
        WINDOW,
        [node_gpus(gpus=8)],
    )


def names_and_allocated(by: str | list[str]) -> dict[str, float]:
    return {line.name: round(line.allocated, 6) for line in aggregate(seeded_allocation(), by)}


GROUPINGS = {
    "workload": (
        "workload",
        {"ml/train": 400, "prod/serve": 200, "ml/notebook": 100, "default/stray": 2, IDLE: 100},
    ),
    "namespace": ("namespace", {"ml": 500, "prod": 200, "default": 2, IDLE: 100}),
    "queue": (
        "queue",
        {"research": 400, "serving": 200, "interactive": 100, UNALLOCATED: 2, IDLE: 100},
    ),
    "tenant": ("tenant", {"acme": 500, "beta": 200, UNALLOCATED: 2, IDLE: 100}),
    "label-team": ("label:team", {"vision": 600, UNALLOCATED: 102, IDLE: 100}),
    "annotation-cost-center": (
        "annotation:cost-center",
        {"ml-team": 500, UNALLOCATED: 202, IDLE: 100},
    ),
    "bare-team-label-then-annotation": (
        "team",
        {"vision": 600, "nlp": 100, UNALLOCATED: 2, IDLE: 100},
    ),
    "bare-project": ("project", {"recommendation-model": 400, UNALLOCATED: 302, IDLE: 100}),
    "namespace-and-team": (
        ["namespace", "team"],
        {"ml/vision": 400, "prod/vision": 200, "ml/nlp": 100, UNALLOCATED: 2, IDLE: 100},
    ),
}


@pytest.mark.parametrize(("by", "expected"), GROUPINGS.values(), ids=GROUPINGS.keys())
def test_costs_group_by_any_key(by: str | list[str], expected: dict[str, float]) -> None:
    assert names_and_allocated(by) == expected


def test_groups_come_by_cost_then_unallocated_then_idle() -> None:
    names = [line.name for line in aggregate(seeded_allocation(), "team")]
    assert names == ["vision", "nlp", UNALLOCATED, IDLE]


def test_a_group_keeps_the_used_and_idle_split() -> None:
    vision = aggregate(seeded_allocation(), "team")[0]
    assert vision.gpu_hours == pytest.approx(60)
    assert vision.used == pytest.approx(360 + 100)
    assert vision.idle == pytest.approx(40 + 100)
    assert vision.gpu_efficiency == pytest.approx(460 / 600)


@pytest.mark.parametrize(
    "text",
    ["", "  ", "label:", "annotation: ", "label", "annotation"],
    ids=[
        "empty",
        "blank",
        "label-without-key",
        "annotation-without-key",
        "bare-label",
        "bare-annotation",
    ],
)
def test_a_grouping_key_must_name_something(text: str) -> None:
    with pytest.raises(ValueError, match="key"):
        group_key(text)


def test_aggregate_needs_a_key() -> None:
    with pytest.raises(ValueError, match="at least one key"):
        aggregate(seeded_allocation(), [])


# --- invariants -------------------------------------------------------------------------

MODELS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA A10G"]
TEAMS = ["vision", "nlp", "speech"]

holdings = st.builds(
    lambda name, gpus, model, start, length, capacity, util, cpu, mem, team, queue: Holding(
        name,
        "ns",
        start * HOUR,
        (start + length) * HOUR,
        gpus,
        model,
        capacity,
        util,
        cpu,
        mem,
        queue,
        "",
        {"team": team} if team else {},
    ),
    name=st.sampled_from(["a", "b", "c", "d"]),
    gpus=st.sampled_from([0.0, 0.25, 1 / 7, 3 / 7, 1.0, 2.0, 8.0]),
    model=st.sampled_from(MODELS),
    start=st.floats(-20, 20),
    length=st.floats(0, 30),
    capacity=st.sampled_from(list(CapacityType)),
    util=st.floats(0, 1),
    cpu=st.floats(0, 64),
    mem=st.floats(0, 512),
    team=st.sampled_from(["", *TEAMS]),
    queue=st.sampled_from(["", "q1", "q2"]),
)


def allocation_of(items: list[Holding], spare: float) -> Allocation:
    """``items`` with a cluster that offered what they held, and ``spare`` GPUs more of every
    model and capacity type, over the whole window."""
    capacity = [
        node_gpus(
            f"{h.workload}-{i}",
            h.gpus,
            model=h.gpu_model,
            start_h=h.start / HOUR,
            end_h=h.end / HOUR,
            capacity=h.capacity,
        )
        for i, h in enumerate(items)
        if h.gpus > 0
    ]
    capacity += [
        node_gpus(f"spare-{m}-{c}", spare, model=m, capacity=c)
        for m in MODELS
        for c in CapacityType
    ]
    return allocate(items, price_list(estimate_spot=0.5, estimate_reserved=0.7), WINDOW, capacity)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(holdings, max_size=12),
    st.sampled_from([0.0, 1.0, 3.5]),
    st.sampled_from(["workload", "namespace", "queue", "team", ["queue", "team"]]),
)
def test_cost_lines_split_and_add_up(items: list[Holding], spare: float, by: str) -> None:
    allocation = allocation_of(items, spare)
    total = allocation.total
    lines = [item.cost for item in allocation.workloads] + [allocation.idle]
    for line in [*lines, total]:
        # allocated = used + idle, and nothing is negative.
        assert line.allocated == pytest.approx(line.used + line.idle, abs=1e-6)
        for value in (
            line.gpu_hours,
            line.gpu_cost,
            line.gpu_used_cost,
            line.cpu_cost,
            line.memory_cost,
            line.idle,
        ):
            assert value >= -1e-9
        assert line.used <= line.allocated + 1e-6
    groups = aggregate(allocation, by)
    assert len({line.name for line in groups}) == len(groups)
    for field in ("allocated", "used", "idle", "gpu_hours"):
        assert sum(getattr(line, field) for line in groups) == pytest.approx(
            getattr(total, field), rel=1e-9, abs=1e-6
        )
    # The window's GPU-hours offered are all either held or idle.
    offered = sum(h.gpus * WINDOW.overlap_hours(h.start, h.end) for h in items) + spare * 10 * 6
    assert total.gpu_hours == pytest.approx(offered, rel=1e-9, abs=1e-6)
