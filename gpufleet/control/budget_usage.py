"""GPU-hours each budgeted queue used in its current period, counted from what ran, turn by
turn, for every world (the control loop owns one).

Between two turns what the core runs does not change, so the GPUs each queue held after a
turn's cycles (its running workloads' placements: a whole GPU 1, a share its fraction, a MIG
slice its compute slices out of seven) were held until the next turn. :meth:`BudgetUsage.
before_cycles` adds them up to the new turn's ``now`` into each budgeted queue's period (its
own and its subtree's queues: a budget covers the queues below it), restarting at each
period's start (calendar day, ISO week or month, UTC), and hands the core's ``budget``
admission check the :class:`~gpufleet.scheduling.plugins.budget.BudgetSnapshot`.
:meth:`BudgetUsage.after_cycles` takes the new holdings, and notes a :class:`BudgetNotice`
when a budget first reaches its warning threshold, and when it is spent, once per period
each; the world turns the notices into Warning events (:meth:`BudgetUsage.drain`).

What it does not do: decide admission (the check does), or remember across restarts of the
process (a new loop counts from its first turn: hours used before it are not known to it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.economics import BudgetState, BudgetStatus, Window, period_window
from gpufleet.model.queues import Queue
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.plugins.budget import (
    BudgetCheck,
    BudgetSnapshot,
    budget_check_of,
    describe_status,
    subtree_budgets,
)

#: The reasons of the Warning events a budget's notices become.
BUDGET_WARNING = "BudgetWarning"
BUDGET_EXHAUSTED = "BudgetExhausted"


@dataclass(frozen=True, slots=True)
class BudgetNotice:
    """A budget that reached its warning threshold, or was spent, at ``at``."""

    at: float
    queue: str
    reason: str
    message: str


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
        self._notices: list[BudgetNotice] = []
        self._paths: tuple[Mapping[str, Queue], dict[str, list[str]]] | None = None

    def _on_path(self, queues: Mapping[str, Queue]) -> dict[str, list[str]]:
        if self._paths is None or self._paths[0] is not queues:
            self._paths = (queues, subtree_budgets(queues))
        return self._paths[1]

    def used(self, queue: str) -> float:
        """GPU-hours the budgeted ``queue``'s subtree used in its period up to the last turn."""
        return self._used.get(queue, (Window(0, 0), 0.0))[1]

    def before_cycles(self, core: SchedulerCore, now: float) -> None:
        """Count the hours held since the last turn; give the core's budget check its
        snapshot."""
        check = budget_check_of(core.admission_checks)
        if check is None or not check.budgets:
            self._since = now
            return
        since = self._since if self._since is not None else now
        on_path = self._on_path(core.quotas.queues)
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
        if new_period:  # what a spent budget refused may start now
            core.state.pending.wake_all(Parked.QUOTA)

    @staticmethod
    def next_reset(core: SchedulerCore, now: float) -> float:
        """When a budget that refused work starts its next period (``inf``: none)."""
        check = budget_check_of(core.admission_checks)
        reset = check.next_reset(now) if check is not None else None
        return math.inf if reset is None else reset

    def after_cycles(self, core: SchedulerCore, now: float) -> None:
        """Take what runs now (the budget check keeps it as workloads come and go: a turn
        pays nothing where no budget is set), and note budgets that crossed a threshold."""
        self._since = now
        check = budget_check_of(core.admission_checks)
        if check is None or not check.budgets:
            self._held = {}
            return
        self._held = dict(check.held)
        self._notice(check, now)

    def _notice(self, check: BudgetCheck, now: float) -> None:
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
            self._notices.append(self._notice_of(check, queue, status, now))

    @staticmethod
    def _notice_of(
        check: BudgetCheck, queue: str, status: BudgetStatus, now: float
    ) -> BudgetNotice:
        budget = check.budgets[queue]
        text = describe_status(queue, status, budget.action, check.state.time_format)
        if status.state is BudgetState.EXHAUSTED:
            return BudgetNotice(now, queue, BUDGET_EXHAUSTED, f"{text}: budget spent")
        percent = f"{budget.warn_at * 100:g}%"
        return BudgetNotice(now, queue, BUDGET_WARNING, f"{text}: past its warning at {percent}")

    def drain(self) -> list[BudgetNotice]:
        """The notices since the last drain (for the world's events)."""
        out, self._notices = self._notices, []
        return out


__all__ = ["BUDGET_EXHAUSTED", "BUDGET_WARNING", "BudgetNotice", "BudgetUsage"]
