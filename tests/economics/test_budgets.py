"""GPU-hour budgets per queue or tenant per period: remaining hours, and the state (ok, warn
at the threshold, exhausted at 100%), over UTC days, ISO weeks and calendar months."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.economics import (
    BudgetPeriod,
    BudgetState,
    GpuHourBudget,
    Window,
    budget_status,
    mig_fraction,
    period_window,
    used_status,
)
from gpufleet.testing.economics_builders import HOUR, holding


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


PERIOD = Window(0.0, 24 * HOUR)

STATES = {
    "nothing-used": (100, 0.8, 0, BudgetState.OK, 100),
    "below-warning": (100, 0.8, 79.9, BudgetState.OK, 20.1),
    "at-warning": (100, 0.8, 80, BudgetState.WARN, 20),
    "custom-warning": (100, 0.5, 60, BudgetState.WARN, 40),
    "exactly-spent": (100, 0.8, 100, BudgetState.EXHAUSTED, 0),
    "overspent": (100, 0.8, 130, BudgetState.EXHAUSTED, 0),
    "zero-budget": (0, 0.8, 0, BudgetState.EXHAUSTED, 0),
}


@pytest.mark.parametrize(
    ("limit", "warn_at", "used", "state", "remaining"), STATES.values(), ids=STATES.keys()
)
def test_budget_state_and_remaining(
    limit: float, warn_at: float, used: float, state: BudgetState, remaining: float
) -> None:
    status = used_status(GpuHourBudget(limit, BudgetPeriod.DAY, warn_at), used, PERIOD)
    assert status.state is state
    assert status.remaining_gpu_hours == pytest.approx(remaining)


PERIODS = {
    "day": (BudgetPeriod.DAY, "2026-11-25T13:30:00", "2026-11-25T00:00:00", "2026-11-26T00:00:00"),
    "week-from-monday": (
        BudgetPeriod.WEEK,
        "2026-11-25T13:30:00",
        "2026-11-23T00:00:00",
        "2026-11-30T00:00:00",
    ),
    "month": (
        BudgetPeriod.MONTH,
        "2026-11-25T13:30:00",
        "2026-11-01T00:00:00",
        "2026-12-01T00:00:00",
    ),
    "month-over-new-year": (
        BudgetPeriod.MONTH,
        "2026-12-31T23:59:59",
        "2026-12-01T00:00:00",
        "2027-01-01T00:00:00",
    ),
    "february-leap-year": (
        BudgetPeriod.MONTH,
        "2028-02-29T12:00:00",
        "2028-02-01T00:00:00",
        "2028-03-01T00:00:00",
    ),
}


@pytest.mark.parametrize(("period", "moment", "start", "end"), PERIODS.values(), ids=PERIODS.keys())
def test_the_period_a_moment_falls_in(
    period: BudgetPeriod, moment: str, start: str, end: str
) -> None:
    assert period_window(period, at(moment)) == Window(at(start), at(end))


def test_a_queue_budget_counts_its_gpu_hours_so_far_in_the_period() -> None:
    day = at("2026-11-25T00:00:00") / HOUR
    holdings = [
        # 2 GPUs from 22:00 the day before to 04:00: 4 h of it today.
        holding("a", gpus=2, start_h=day - 2, end_h=day + 4, queue="research"),
        # A 3g MIG slice from 06:00 to 20:00, counted up to noon: 6 h x 3/7.
        holding(
            "b", gpus=mig_fraction("3g.40gb"), start_h=day + 6, end_h=day + 20, queue="research"
        ),
        holding("c", gpus=8, start_h=day, end_h=day + 12, queue="other"),
    ]
    budget = GpuHourBudget(16, BudgetPeriod.DAY, warn_at=0.5)
    status = budget_status(
        budget, holdings, at("2026-11-25T12:00:00"), lambda h: h.queue == "research"
    )
    assert status.used_gpu_hours == pytest.approx(8 + 18 / 7)
    assert status.state is BudgetState.WARN
    assert status.period == period_window(BudgetPeriod.DAY, at("2026-11-25T12:00:00"))
    everyone = budget_status(budget, holdings, at("2026-11-25T12:00:00"))
    assert everyone.used_gpu_hours == pytest.approx(8 + 18 / 7 + 96)
    assert everyone.state is BudgetState.EXHAUSTED


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"gpu_hours": -1.0}, "finite number of GPU-hours"),
        ({"gpu_hours": float("inf")}, "finite number of GPU-hours"),
        ({"gpu_hours": 10.0, "warn_at": 0.0}, "warn at a fraction"),
        ({"gpu_hours": 10.0, "warn_at": 1.5}, "warn at a fraction"),
    ],
    ids=["negative", "infinite", "warn-at-zero", "warn-above-one"],
)
def test_a_bad_budget_is_refused(fields: dict[str, float], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        GpuHourBudget(**fields)  # type: ignore[arg-type]


def test_negative_usage_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        used_status(GpuHourBudget(10), -1, PERIOD)
