"""The ``budget`` check's feeder: GPU-hours each budgeted queue used in its current period,
counted from what ran, turn by turn, for every world.

The check keeps one in its world's :class:`~gpufleet.scheduling.framework.CheckWorld` (so
that the count goes on across the cores a world rebuilds when its queues change) and calls it
from its turn hooks. Between two turns what the core runs does not change, so the GPUs each
queue held after a turn's cycles (its running workloads' placements: a whole GPU 1, a share
its fraction, a MIG slice its compute slices out of seven) were held until the next turn.
:meth:`BudgetUsage.before_cycles` adds them up to the new turn's ``now`` into each budgeted
queue's period (its own and its subtree's queues: a budget covers the queues below it),
restarting at each period's start (calendar day, ISO week or month, UTC), and hands the check
the :class:`~gpufleet.scheduling.plugins.budget.BudgetSnapshot`.
:meth:`BudgetUsage.after_cycles` takes the new holdings, and returns a
:class:`~gpufleet.scheduling.framework.CheckNotice` when a budget first reaches its warning
threshold, and when it is spent, once per period each (the world turns them into Warning
events).

What it does not do: decide admission (the check does), or remember across restarts of the
process (a new loop counts from its first turn: hours used before it are not known to it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpufleet.economics import BudgetState, BudgetStatus, Window, period_window
from gpufleet.model.queues import BudgetAction, Queue
from gpufleet.model.times import TimeFormat
from gpufleet.scheduling.framework import CheckNotice
from gpufleet.scheduling.pending import Parked

if TYPE_CHECKING:  # (the check imports this module)
    from gpufleet.scheduling.plugins.budget import BudgetCheck

#: The reasons of the Warning events a budget's notices become.
BUDGET_WARNING = "BudgetWarning"
BUDGET_EXHAUSTED = "BudgetExhausted"


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """GPU-hours each budgeted queue's subtree used in its budget's current period, up to
    ``at`` (seconds, the core's clock)."""

    at: float
    used: Mapping[str, float] = field(default_factory=dict)


def subtree_budgets(queues: Mapping[str, Queue]) -> dict[str, list[str]]:
    """Queue -> the budgeted queues on its path (itself first, then its ancestors)."""
    out: dict[str, list[str]] = {}
    for name in queues:
        path: list[str] = []
        current: str | None = name
        while current is not None and current in queues and len(path) <= len(queues):
            if queues[current].budget is not None:
                path.append(current)
            current = queues[current].parent
        out[name] = path
    return out


def describe_status(queue: str, status: BudgetStatus, action: BudgetAction, at: TimeFormat) -> str:
    """``queue research has used 100.0 of 100 GPU-hours this week (budget Block); resets
    2026-11-30 00:00:00 UTC``: the reset read by ``at``, the world's format of an instant (a
    date on the wall clock, ``t=...`` in a simulated cluster)."""
    budget = status.budget
    this = {"day": "today", "week": "this week", "month": "this month"}[budget.period.value]
    return (
        f"queue {queue} has used {status.used_gpu_hours:.1f} of {budget.gpu_hours:g} "
        f"GPU-hours {this} (budget {action.value}); resets {at(status.period.end)}"
    )


class BudgetUsage:
    """See the module docstring."""

    def __init__(self) -> None:
        #: Queue -> GPUs its own running workloads held after the last turn (budgeted subtrees').
        self._held: dict[str, float] = {}
        self._since: float | None = None
        #: Budgeted queue -> (its period, GPU-hours its subtree used in it up to ``_since``).
        self._used: dict[str, tuple[Window, float]] = {}
        #: Budgeted queue -> (period start, the worst state noticed in that period).
        self._noticed: dict[str, tuple[float, BudgetState]] = {}
        self._paths: tuple[Mapping[str, Queue], dict[str, list[str]]] | None = None

    def _on_path(self, queues: Mapping[str, Queue]) -> dict[str, list[str]]:
        if self._paths is None or self._paths[0] is not queues:
            self._paths = (queues, subtree_budgets(queues))
        return self._paths[1]

    def used(self, queue: str) -> float:
        """GPU-hours the budgeted ``queue``'s subtree used in its period up to the last turn."""
        return self._used.get(queue, (Window(0, 0), 0.0))[1]

    def before_cycles(self, check: BudgetCheck, now: float) -> None:
        """Count the hours held since the last turn; give ``check`` its snapshot."""
        if not check.budgets:
            self._since = now
            return
        since = self._since if self._since is not None else now
        on_path = self._on_path(check.state.quotas.queues)
        rate: dict[str, float] = {}
        for queue, gpus in self._held.items():
            for owner in on_path.get(queue, ()):
                rate[owner] = rate.get(owner, 0.0) + gpus
        new_period = False
        for queue, budget in check.budgets.items():
            period = period_window(budget.period, now)
            known = self._used.get(queue)
            new_period |= known is not None and known[0] != period
            used = known[1] if known is not None and known[0] == period else 0.0
            used += rate.get(queue, 0.0) * period.overlap_hours(since, now)
            self._used[queue] = (period, used)
        self._since = now
        check.observe(BudgetSnapshot(now, {q: u for q, (_, u) in self._used.items()}))
        if new_period:
            # What a spent budget refused may start now (the check asks quota's wakes for
            # its refusals), and what a spent Preemptible budget demoted, then quota kept
            # out, may start at its own priority.
            check.state.pending.wake_all(Parked.QUOTA)

    def after_cycles(self, check: BudgetCheck, now: float) -> list[CheckNotice]:
        """Take what runs now (the budget check keeps it as workloads come and go: a turn
        pays nothing where no budget is set); the notices of budgets that crossed a
        threshold."""
        self._since = now
        if not check.budgets:
            self._held = {}
            return []
        self._held = dict(check.held)
        return self._notice(check, now)

    def _notice(self, check: BudgetCheck, now: float) -> list[CheckNotice]:
        notices = []
        for queue, status in check.statuses(now).items():
            state = status.state
            if state is BudgetState.OK:
                continue
            start, told = self._noticed.get(queue, (status.period.start, BudgetState.OK))
            if start != status.period.start:
                told = BudgetState.OK
            if told is state or told is BudgetState.EXHAUSTED:
                continue
            self._noticed[queue] = (status.period.start, state)
            notices.append(self._notice_of(check, queue, status, now))
        return notices

    @staticmethod
    def _notice_of(check: BudgetCheck, queue: str, status: BudgetStatus, now: float) -> CheckNotice:
        budget = check.budgets[queue]
        text = describe_status(queue, status, budget.action, check.state.time_format)
        if status.state is BudgetState.EXHAUSTED:
            return CheckNotice(now, queue, BUDGET_EXHAUSTED, f"{text}: budget spent")
        percent = f"{budget.warn_at * 100:g}%"
        return CheckNotice(now, queue, BUDGET_WARNING, f"{text}: past its warning at {percent}")


__all__ = [
    "BUDGET_EXHAUSTED",
    "BUDGET_WARNING",
    "BudgetSnapshot",
    "BudgetUsage",
    "describe_status",
    "subtree_budgets",
]
