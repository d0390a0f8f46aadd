"""GPU-hour budgets per queue or tenant per period: what is left, and whether to warn or stop.

Owns the arithmetic of a budget: the period a moment falls in (a UTC day, an ISO week from
Monday, a calendar month), the GPU-hours a queue's or tenant's holdings used within it, and the
budget's state: ``ok``, ``warn`` once the used fraction reaches the warning threshold,
``exhausted`` at 100%. It decides nothing about admission (what happens at 100%: blocking,
nominal quota only, preemptible only, belongs to the admission that reads this state), and it
reads no clock: callers pass the moment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from gpufleet.economics.allocation import Holding, Window
from gpufleet.model.queues import DEFAULT_WARN_AT, BudgetPeriod, QueueBudget

__all__ = [
    "DEFAULT_WARN_AT",
    "BudgetPeriod",
    "BudgetState",
    "BudgetStatus",
    "GpuHourBudget",
    "budget_status",
    "gpu_hours_used",
    "period_window",
    "used_status",
]


class BudgetState(StrEnum):
    OK = "ok"
    WARN = "warn"
    EXHAUSTED = "exhausted"


@dataclass(frozen=True, slots=True)
class GpuHourBudget:
    """``gpu_hours`` per ``period``; warns once ``warn_at`` of it is used."""

    gpu_hours: float
    period: BudgetPeriod = BudgetPeriod.MONTH
    warn_at: float = DEFAULT_WARN_AT

    def __post_init__(self) -> None:
        if not 0.0 <= self.gpu_hours < float("inf"):
            raise ValueError(f"a budget is a finite number of GPU-hours, got {self.gpu_hours}")
        if not 0.0 < self.warn_at <= 1.0:
            raise ValueError(
                f"warn at a fraction of the budget above 0 and at most 1, got {self.warn_at}"
            )

    @classmethod
    def of(cls, budget: QueueBudget) -> GpuHourBudget:
        """The arithmetic of a queue's budget (its action is admission's)."""
        return cls(budget.gpu_hours, budget.period, budget.warn_at)


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A budget against what was used of it in one period."""

    budget: GpuHourBudget
    used_gpu_hours: float
    period: Window

    @property
    def remaining_gpu_hours(self) -> float:
        return max(0.0, self.budget.gpu_hours - self.used_gpu_hours)

    @property
    def used_fraction(self) -> float:
        """Used over budgeted (1.0 for a zero budget: nothing may be used)."""
        if self.budget.gpu_hours == 0:
            return 1.0
        return self.used_gpu_hours / self.budget.gpu_hours

    @property
    def state(self) -> BudgetState:
        fraction = self.used_fraction
        if fraction >= 1.0:
            return BudgetState.EXHAUSTED
        if fraction >= self.budget.warn_at:
            return BudgetState.WARN
        return BudgetState.OK


def period_window(period: BudgetPeriod, at: float) -> Window:
    """The period (UTC) that the moment ``at`` (seconds since the Unix epoch) falls in."""
    moment = datetime.fromtimestamp(at, UTC)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period is BudgetPeriod.DAY:
        start, end = day, day + timedelta(days=1)
    elif period is BudgetPeriod.WEEK:
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(weeks=1)
    else:
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
    return Window(start.timestamp(), end.timestamp())


def gpu_hours_used(holdings: Iterable[Holding], window: Window) -> float:
    """The GPU-hours the holdings held within ``window`` (parts of GPUs by their part)."""
    return sum(h.gpus * window.overlap_hours(h.start, h.end) for h in holdings)


def budget_status(
    budget: GpuHourBudget,
    holdings: Iterable[Holding],
    at: float,
    owner: Callable[[Holding], bool] = lambda _: True,
) -> BudgetStatus:
    """``budget`` in the period that ``at`` falls in, against the GPU-hours used so far of the
    ``holdings`` that ``owner`` says are the budget's (a queue's: ``lambda h: h.queue == q``).
    Only what was held up to ``at`` counts."""
    period = period_window(budget.period, at)
    so_far = Window(period.start, min(max(at, period.start), period.end))
    used = gpu_hours_used((h for h in holdings if owner(h)), so_far)
    return BudgetStatus(budget, used, period)


def used_status(budget: GpuHourBudget, used_gpu_hours: float, period: Window) -> BudgetStatus:
    """``budget`` against ``used_gpu_hours`` already counted (by Prometheus, or a store)."""
    if not 0.0 <= used_gpu_hours < float("inf"):
        raise ValueError(f"used GPU-hours must be at least 0, got {used_gpu_hours}")
    return BudgetStatus(budget, used_gpu_hours, period)
