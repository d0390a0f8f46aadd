"""Fair share over time: the decay arithmetic, and the order it gives queues."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.model.queues import TENANT_LABEL, Queue
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.profile import FairSharing, Profile
from gpufleet.scheduling.usage_history import (
    UsageHistory,
    UsageSnapshot,
    accrued,
    decayed,
    factor,
    user_of,
)
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

HOUR = 3600.0
DAY = 24 * HOUR
GPU_HOUR = 1000 * HOUR  # milli-GPU-seconds


# ------------------------------------------------------------------------------ arithmetic
@pytest.mark.parametrize("half_life", [60.0, HOUR, 7 * DAY], ids=["1m", "1h", "7d"])
def test_a_half_life_halves_usage(half_life: float) -> None:
    assert decayed(100.0, half_life, half_life) == pytest.approx(50.0)
    assert decayed(100.0, 3 * half_life, half_life) == pytest.approx(12.5)
    assert accrued(100.0, 0, half_life, half_life) == pytest.approx(50.0)


def test_usage_held_for_long_approaches_rate_times_mean_life() -> None:
    # Holding r for ever converges to r * H / ln 2 (the integral of the decay kernel).
    assert accrued(0.0, 1000, 100 * HOUR, HOUR) == pytest.approx(1000 * HOUR / math.log(2))
    # ... and for a short while it is nearly r * t (little decay yet).
    assert accrued(0.0, 1000, 1.0, 7 * DAY) == pytest.approx(1000.0, rel=1e-5)


def test_time_going_backwards_neither_grows_nor_decays_usage() -> None:
    assert decayed(7.0, -10.0, HOUR) == 7.0
    assert accrued(7.0, 1000, -10.0, HOUR) == 7.0


@given(
    usage=st.floats(0, 1e12),
    rate=st.integers(0, 10**6),
    first=st.floats(0, 30 * DAY),
    second=st.floats(0, 30 * DAY),
    half_life=st.floats(1.0, 30 * DAY),
)
def test_accruing_over_a_split_interval_is_accruing_over_it_whole(
    usage: float, rate: int, first: float, second: float, half_life: float
) -> None:
    split = accrued(accrued(usage, rate, first, half_life), rate, second, half_life)
    whole = accrued(usage, rate, first + second, half_life)
    assert split == pytest.approx(whole, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize(
    ("ratio", "expected"), [(0.0, 1.0), (1.0, 0.5), (2.0, 0.25)], ids=["unused", "share", "twice"]
)
def test_factor_is_slurms(ratio: float, expected: float) -> None:
    assert factor(ratio) == expected


@pytest.mark.parametrize(
    ("labels", "namespace", "user"),
    [({TENANT_LABEL: "alice"}, "team-a", "alice"), ({}, "team-a", "team-a")],
    ids=["tenant", "namespace"],
)
def test_the_user_is_the_tenant_else_the_namespace(
    labels: dict[str, str], namespace: str, user: str
) -> None:
    workload = make_workload("w", namespace=namespace)
    assert user_of(replace(workload, labels=labels)) == user


# --------------------------------------------------------------------------------- worlds
def fair_core(queues: list[Queue], half_life: float | None, gpus: int = 8) -> SchedulerCore:
    profile = Profile(fair_sharing=FairSharing(half_life)) if half_life else Profile()
    return make_core([make_node("n", gpus=gpus)], queues, min_runtime=0.0, profile=profile)


@dataclass(frozen=True, slots=True)
class Ran:
    """``queue`` held ``gpus`` GPUs from ``start`` to ``end``."""

    queue: str
    gpus: int
    start: float
    end: float


def replay(cluster: EchoCluster, history: list[Ran]) -> None:
    for i, ran in enumerate(history):
        workload = make_workload(f"past-{i}", ran.queue, gpus=ran.gpus)
        cluster.submit(workload, now=ran.start)
        assert workload.key in cluster.core.running
        cluster.settle(now=ran.end)
        cluster.finish_workload(workload, now=ran.end)


def first_to_start(
    queues: list[Queue], history: list[Ran], at: float, half_life: float | None = HOUR
) -> str:
    """Both queues ask for the whole node at ``at``: whose workload starts?"""
    core = fair_core(queues, half_life)
    cluster = EchoCluster(core)
    replay(cluster, history)
    asks = [make_workload(f"now-{q.name}", q.name, gpus=8) for q in queues if q.parent]
    asks = asks or [make_workload(f"now-{q.name}", q.name, gpus=8) for q in queues]
    cluster.submit(*asks, now=at)
    (started,) = [w.queue for w in asks if w.key in core.running]
    return started


# The queue expected to start is always second by name: without fair sharing over time, the
# tie between two queues that hold nothing now goes to the first, so every case fails.
ORDER_CASES = [
    pytest.param(
        [make_queue("a-heavy"), make_queue("b-fresh")],
        [Ran("a-heavy", 8, 0.0, DAY)],
        DAY + 1,
        "b-fresh",
        id="no quota, equal weights: what used much yesterday waits",
    ),
    pytest.param(
        [make_queue("a-heavy", 4), make_queue("b-fresh", 4)],
        [Ran("a-heavy", 8, 0.0, DAY)],
        2 * DAY,
        "b-fresh",
        id="equal nominal quotas, both borrow: what used much yesterday waits",
    ),
    pytest.param(
        [make_queue("a-light", weight=1), make_queue("b-heavy", weight=3)],
        [Ran("b-heavy", 4, 0.0, HOUR), Ran("a-light", 2, HOUR, 2 * HOUR)],
        2 * HOUR,
        "b-heavy",
        id="weights: three times the weight, twice the usage goes first",
    ),
    pytest.param(
        [make_queue("a-heavy", weight=1), make_queue("b-light", weight=1)],
        [Ran("b-light", 2, 0.0, HOUR), Ran("a-heavy", 4, HOUR, 2 * HOUR)],
        2 * HOUR,
        "b-light",
        id="equal weights: twice the usage waits",
    ),
    pytest.param(
        [make_queue("a-light", 2), make_queue("b-heavy", 6)],
        [Ran("b-heavy", 4, 0.0, HOUR), Ran("a-light", 2, HOUR, 2 * HOUR)],
        2 * HOUR,
        "b-heavy",
        id="nominal quotas are the shares: three times the quota, twice the usage goes first",
    ),
    pytest.param(
        [make_queue("a-recent"), make_queue("b-heavy")],
        [Ran("b-heavy", 8, 0.0, DAY), Ran("a-recent", 1, 10 * DAY, 10 * DAY + HOUR)],
        10 * DAY + 2 * HOUR,
        "b-heavy",
        id="decay: much used ten half-lives ago counts less than a little used lately",
    ),
    pytest.param(
        [
            make_queue("org-a"),
            make_queue("org-b"),
            make_queue("a-heavy", parent="org-a"),
            make_queue("b-fresh", parent="org-b"),
        ],
        [Ran("a-heavy", 8, 0.0, DAY)],
        DAY + 1,
        "b-fresh",
        id="a tree: the parents' usage orders their subtrees",
    ),
]


@pytest.mark.parametrize(("queues", "history", "at", "first"), ORDER_CASES)
def test_decayed_usage_orders_queues_that_compete(
    queues: list[Queue], history: list[Ran], at: float, first: str
) -> None:
    assert first_to_start(queues, history, at, half_life=DAY) == first


def test_with_fair_sharing_off_the_tie_goes_by_name() -> None:
    """What the cases above change: off, the heavy user (first by name) starts first."""
    queues = [make_queue("a-heavy"), make_queue("b-fresh")]
    history = [Ran("a-heavy", 8, 0.0, DAY)]
    assert first_to_start(queues, history, DAY + 1, half_life=None) == "a-heavy"


def test_within_its_nominal_quota_a_queue_goes_before_one_that_borrows() -> None:
    """Usage over time orders queues only within the same borrowing level."""
    core = fair_core([make_queue("a-heavy", 4), make_queue("b-fresh", 4)], DAY)
    cluster = EchoCluster(core)
    replay(cluster, [Ran("a-heavy", 8, 0.0, DAY)])
    within = make_workload("within", "a-heavy", gpus=4)
    borrows = make_workload("borrows", "b-fresh", gpus=8)
    cluster.submit(borrows, within, now=DAY + 1)
    assert within.key in core.running
    assert borrows.key not in core.running


def test_usage_and_factor_read_back_per_queue_and_user() -> None:
    core = fair_core([make_queue("a"), make_queue("b")], HOUR)
    cluster = EchoCluster(core)
    replay(cluster, [Ran("a", 2, 0.0, HOUR)])
    history = core.state.usage_history
    assert history is not None
    a = history.describe("a", now=HOUR)
    b = history.describe("b", now=HOUR)
    assert a is not None
    assert b is not None
    expected = accrued(0.0, 2000, HOUR, HOUR) / GPU_HOUR  # 2 GPUs for one half-life
    assert a.gpu_hours == pytest.approx(expected)
    assert a.users == {"default": pytest.approx(expected)}
    # Its siblings: b and the implicit default queue, of equal weights.
    assert a.share == pytest.approx(1 / 3)
    assert a.ratio == pytest.approx(3.0)
    assert a.factor == pytest.approx(0.125)
    assert (b.gpu_hours, b.ratio, b.factor) == (0.0, 0.0, 1.0)
    # An hour later, half of it is left.
    later = history.describe("a", now=2 * HOUR)
    assert later is not None
    assert later.gpu_hours == pytest.approx(expected / 2)


def test_a_restored_snapshot_is_decayed_to_now_and_added() -> None:
    first = fair_core([make_queue("a"), make_queue("b")], HOUR)
    cluster = EchoCluster(first)
    replay(cluster, [Ran("a", 2, 0.0, HOUR)])
    history = first.state.usage_history
    assert history is not None
    snapshot = history.snapshot()
    assert snapshot.at == HOUR
    assert set(snapshot.queues) == {"a"}

    # A new core (a restart) takes it while a works again: both add up.
    second = fair_core([make_queue("a"), make_queue("b")], HOUR)
    restored = second.state.usage_history
    assert restored is not None
    again = EchoCluster(second)
    again.submit(make_workload("again", "a", gpus=1), now=2 * HOUR)
    restored.restore(snapshot)
    restored.restore(UsageSnapshot(HOUR, {"b": 8.0}))
    usage = restored.usage(2 * HOUR)
    assert usage["a"] == pytest.approx(snapshot.queues["a"] / 2)
    assert usage["b"] == pytest.approx(4.0)
    later = restored.usage(3 * HOUR)
    assert later["a"] == pytest.approx(snapshot.queues["a"] / 4 + accrued(0.0, 1000, HOUR, HOUR))
    described = restored.describe("a", now=2 * HOUR)
    assert described is not None
    assert described.users["default"] == pytest.approx(
        snapshot.users["a"]["default"] / 2 / GPU_HOUR
    )


def test_usage_counts_from_when_the_events_were_seen() -> None:
    """The core's ``now`` is its last cycle's; the world says when the events it hands over
    happened, so that an end seen an hour later counts an hour more."""
    core = fair_core([make_queue("a"), make_queue("b")], DAY)
    cluster = EchoCluster(core)
    workload = make_workload("w", "a", gpus=1)
    cluster.submit(workload, now=0.0)
    history = core.state.usage_history
    assert history is not None
    history.events_at(HOUR)
    cluster.finish_workload(workload, now=HOUR)
    assert history.usage(HOUR)["a"] == pytest.approx(accrued(0.0, 1000, HOUR, DAY))


def test_a_half_life_must_be_positive() -> None:
    core = fair_core([make_queue("a")], None)
    with pytest.raises(ValueError, match="positive"):
        UsageHistory(0.0, core.quotas.tree, lambda: 0.0)
    assert UsageSnapshot(0.0).queues == {}
