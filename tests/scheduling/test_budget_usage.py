"""The budget check's feeder, through the check's turn hooks as the control loop calls them:
GPU-hours per budgeted queue held between turns, parts of GPUs by their part, a parent's
budget over its subtree, a new period starting from zero and waking what the spent budget
refused (at the check's timer), and one notice per threshold per period."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.model.queues import BudgetAction, BudgetPeriod, QueueBudget
from gpufleet.model.times import wall_clock_time
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.framework import CheckWorld
from gpufleet.scheduling.plugins.budget_usage import BUDGET_EXHAUSTED, BUDGET_WARNING, BudgetUsage
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

#: The cores here are on the wall clock (Unix seconds, as on Kubernetes and ``serve --local``).
MIDNIGHT = datetime(2026, 11, 25, tzinfo=UTC).timestamp()
HOUR = 3600.0


def turn(world: CheckWorld, cluster: EchoCluster, now: float) -> None:
    """What ControlLoop._turn does around the core's cycles."""
    for check in cluster.core.turn_hooked:
        check.before_cycles(world, now)
    cluster.settle(now)
    for check in cluster.core.turn_hooked:
        check.after_cycles(world, now)


def used(world: CheckWorld, queue: str) -> float:
    return world.kept("budget", BudgetUsage).used(queue)


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
    cluster, world = EchoCluster(core), CheckWorld()
    core.add(make_workload("job", "project", **pod_options))  # type: ignore[arg-type]
    turn(world, cluster, MIDNIGHT + HOUR)
    turn(world, cluster, MIDNIGHT + 4 * HOUR)
    assert used(world, "team") == pytest.approx(3 * gpus_held)


def test_a_new_period_starts_from_zero_and_wakes_what_the_budget_refused() -> None:
    core = core_with(QueueBudget(4.0, BudgetPeriod.DAY, 0.5, BudgetAction.BLOCK))
    cluster, world = EchoCluster(core), CheckWorld()
    first = make_workload("first", "team", gpus=2)
    core.add(first)
    turn(world, cluster, MIDNIGHT + 20 * HOUR)
    turn(world, cluster, MIDNIGHT + 21 * HOUR)  # 2 of 4: warns
    turn(world, cluster, MIDNIGHT + 22 * HOUR)  # 4 of 4: spent
    notices = world.drain()
    assert [n.reason for n in notices] == [BUDGET_WARNING, BUDGET_EXHAUSTED]
    assert notices[1].message == (
        "queue team has used 4.0 of 4 GPU-hours today (budget Block); resets "
        "2026-11-26 00:00:00 UTC: budget spent"
    )
    cluster.finish_workload(first, now=MIDNIGHT + 22 * HOUR)
    second = make_workload("second", "team", gpus=1)
    core.add(second)
    turn(world, cluster, MIDNIGHT + 23 * HOUR)
    assert second.key not in core.running
    assert core.check_timer(MIDNIGHT + 23 * HOUR) == MIDNIGHT + 24 * HOUR
    turn(world, cluster, MIDNIGHT + 24 * HOUR)
    assert second.key in core.running
    assert used(world, "team") == 0.0
    turn(world, cluster, MIDNIGHT + 25 * HOUR)
    assert used(world, "team") == pytest.approx(1.0)
    assert world.drain() == []  # nothing crossed in the new period yet


def test_without_budgets_nothing_is_counted() -> None:
    core = make_core([make_node("n0", gpus=8)], [make_queue("team", gpus=8)])
    cluster, world = EchoCluster(core), CheckWorld()
    core.add(make_workload("job", "team", gpus=2))
    turn(world, cluster, MIDNIGHT)
    turn(world, cluster, MIDNIGHT + HOUR)
    assert used(world, "team") == 0.0
    assert core.check_timer(MIDNIGHT + HOUR) == float("inf")
