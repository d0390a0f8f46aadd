"""The control loop's count of GPU-hours per budgeted queue: held GPUs between turns, parts of
GPUs by their part, a parent's budget over its subtree, a new period starting from zero and
waking what the spent budget refused, and one notice per threshold per period."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.control.budget_usage import BUDGET_EXHAUSTED, BUDGET_WARNING, BudgetUsage
from gpufleet.model.queues import BudgetAction, BudgetPeriod, QueueBudget
from gpufleet.model.times import wall_clock_time
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

#: The cores here are on the wall clock (Unix seconds, as on Kubernetes and ``serve --local``).
MIDNIGHT = datetime(2026, 11, 25, tzinfo=UTC).timestamp()
HOUR = 3600.0


def turn(usage: BudgetUsage, cluster: EchoCluster, now: float) -> None:
    """What ControlLoop._turn does around the core's cycles."""
    usage.before_cycles(cluster.core, now)
    cluster.settle(now)
    usage.after_cycles(cluster.core, now)


def core_with(budget: QueueBudget) -> SchedulerCore:
    return make_core(
        [make_node("n0", gpus=8, mig={0: ["3g.40gb", "3g.40gb"]})],
        [make_queue("team", gpus=8, budget=budget), make_queue("project", gpus=8, parent="team")],
        time_format=wall_clock_time,
    )


@pytest.mark.parametrize(
    ("pod_options", "gpus_held"),
    [({"gpus": 2}, 2.0), ({"gpus": 1, "milli": 250}, 0.25), ({"mig": "3g.40gb"}, 3 / 7)],
    ids=["whole-gpus", "a-quarter-share", "a-mig-slice"],
)
def test_hours_held_between_turns_count_for_the_parent_budget(
    pod_options: dict[str, int], gpus_held: float
) -> None:
    core = core_with(QueueBudget(100.0, BudgetPeriod.DAY))
    cluster, usage = EchoCluster(core), BudgetUsage()
    core.add(make_workload("job", "project", **pod_options))  # type: ignore[arg-type]
    turn(usage, cluster, MIDNIGHT + HOUR)
    turn(usage, cluster, MIDNIGHT + 4 * HOUR)
    assert usage.used("team") == pytest.approx(3 * gpus_held)


def test_a_new_period_starts_from_zero_and_wakes_what_the_budget_refused() -> None:
    core = core_with(QueueBudget(4.0, BudgetPeriod.DAY, 0.5, BudgetAction.BLOCK))
    cluster, usage = EchoCluster(core), BudgetUsage()
    first = make_workload("first", "team", gpus=2)
    core.add(first)
    turn(usage, cluster, MIDNIGHT + 20 * HOUR)
    turn(usage, cluster, MIDNIGHT + 21 * HOUR)  # 2 of 4: warns
    turn(usage, cluster, MIDNIGHT + 22 * HOUR)  # 4 of 4: spent
    notices = usage.drain()
    assert [n.reason for n in notices] == [BUDGET_WARNING, BUDGET_EXHAUSTED]
    assert notices[1].message == (
        "queue team has used 4.0 of 4 GPU-hours today (budget Block); resets "
        "2026-11-26 00:00:00 UTC: budget spent"
    )
    cluster.finish_workload(first, now=MIDNIGHT + 22 * HOUR)
    second = make_workload("second", "team", gpus=1)
    core.add(second)
    turn(usage, cluster, MIDNIGHT + 23 * HOUR)
    assert second.key not in core.running
    assert usage.next_reset(core, MIDNIGHT + 23 * HOUR) == MIDNIGHT + 24 * HOUR
    turn(usage, cluster, MIDNIGHT + 24 * HOUR)
    assert second.key in core.running
    assert usage.used("team") == 0.0
    turn(usage, cluster, MIDNIGHT + 25 * HOUR)
    assert usage.used("team") == pytest.approx(1.0)
    assert usage.drain() == []  # nothing crossed in the new period yet


def test_without_budgets_nothing_is_counted() -> None:
    core = make_core([make_node("n0", gpus=8)], [make_queue("team", gpus=8)])
    cluster, usage = EchoCluster(core), BudgetUsage()
    core.add(make_workload("job", "team", gpus=2))
    turn(usage, cluster, MIDNIGHT)
    turn(usage, cluster, MIDNIGHT + HOUR)
    assert usage.used("team") == 0.0
    assert usage.next_reset(core, MIDNIGHT + HOUR) == float("inf")
