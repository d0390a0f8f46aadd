"""The ``budget`` admission check: GPU-hour budgets of queues (``spec.budget``) per period.

A queue's budget covers the queue and the queues below it (a team's budget caps its
projects). An ordinary admission check with its own feeder: around each turn of its world's
loop (its turn hooks) the check's :class:`~.budget_usage.BudgetUsage`, kept in the world's
:class:`~gpufleet.scheduling.framework.CheckWorld`, counts what ran and hands it a
:class:`BudgetSnapshot`: for each budgeted queue, the GPU-hours its subtree used in the
budget's current period up to a moment; after the turn's cycles it leaves the world a notice
when a budget passes its warning threshold or is spent. The check adds what the queue's
running workloads hold from that moment to ``now``, and what they will still hold in the
period by their expected run time (committed GPU-hours: so that workloads admitted in one
turn, when no time passes, count against the budget at once). A workload without an expected
run time commits nothing ahead: its hours count as they are used. Its refusals wait for a new
period (its timer: the loop wakes then, and the feeder wakes them) or for quota given back (a
workload that ends takes its committed hours with it: its ``requeue_on``).

At 100% the budget's action applies to new workloads of the subtree (running ones go on):

* ``Block``: refused until the next period;
* ``NominalOnly``: refused unless the queue stays within its nominal quota on every level;
* ``Preemptible``: admitted as preemptible at :data:`BUDGET_PRIORITY`, the lowest priority,
  so that the existing preemption takes it for anyone (:meth:`BudgetCheck.admitted_as`). A
  demoted workload that is preempted waits demoted, and gets its own priority back when it is
  next tried with budget left.

What it does not do: count usage from records or pods (its feeder counts what the core ran),
read a clock (``now`` is the core's), or emit events (the world turns its notices into them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from gpufleet.economics import (
    BudgetState,
    BudgetStatus,
    GpuHourBudget,
    Window,
    mig_fraction,
    milli_fraction,
    period_window,
    used_status,
)
from gpufleet.model.priorities import LOWEST_PRIORITY
from gpufleet.model.queues import BudgetAction, QueueBudget
from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import Bound
from gpufleet.scheduling.framework import CheckWorld
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.plugins.budget_usage import (
    BudgetSnapshot,
    BudgetUsage,
    describe_status,
    subtree_budgets,
)
from gpufleet.scheduling.running import RunningWorkload

if TYPE_CHECKING:
    from gpufleet.scheduling.state import CoreState

#: The priority a workload is admitted at under a spent ``Preemptible`` budget: the lowest
#: a Kubernetes PriorityClass can have, so that any workload may preempt it (the one an idle
#: policy's ``Preemptible`` lowers a running workload to, too).
BUDGET_PRIORITY = LOWEST_PRIORITY
SECONDS_PER_HOUR = 3600.0


def held_gpus(bound: Iterable[Bound]) -> float:
    """The GPUs placed pods hold, parts by their part: a share by its fraction, a MIG slice by
    its compute slices out of seven."""
    total = 0.0
    for placed in bound:
        slices = placed.placement.mig_slices
        profile = placed.pod.gpu.mig_profile
        if slices and profile:
            total += mig_fraction(profile) * len(slices)
        else:
            total += milli_fraction(placed.placement.gpu_milli)
    return total


class BudgetCheck:
    """See the module docstring."""

    name = "budget"
    #: A running workload that ends gives its committed hours back with its quota.
    requeue_on = frozenset({Parked.QUOTA})

    def __init__(self, state: CoreState) -> None:
        self.state = state
        queues = state.quotas.queues
        self.budgets: dict[str, QueueBudget] = {
            name: q.budget for name, q in queues.items() if q.budget is not None
        }
        self._on_path = subtree_budgets(queues)
        self._snapshot = BudgetSnapshot(0.0)
        #: Workload key -> (priority, preemptible) it had before a budget demoted it.
        self._demoted: dict[str, tuple[int, bool]] = {}
        #: Budgeted queue -> when its period ends, for the budgets that refused a workload
        #: (what they refused waits for that moment: :meth:`next_reset`).
        self.refusing: dict[str, float] = {}
        #: Queue -> the GPUs its running workloads hold now, for the queues of budgeted
        #: subtrees only (kept as workloads start, shrink and stop: the world counts hours
        #: from it every turn), and what each of those workloads holds.
        self.held: dict[str, float] = {}
        self._holding: dict[str, tuple[str, float]] = {}

    # ------------------------------------------------------------------------- the world's
    def before_cycles(self, world: CheckWorld, now: float) -> None:
        """Its feeder counts the hours held since the last turn and hands them over."""
        world.kept(self.name, BudgetUsage).before_cycles(self, now)

    def after_cycles(self, world: CheckWorld, now: float) -> None:
        """Its feeder takes what runs now; the notices of budgets past a threshold."""
        for notice in world.kept(self.name, BudgetUsage).after_cycles(self, now):
            world.notice(notice)

    def next_timer(self, now: float) -> float | None:
        """When a budget that refused a workload starts its next period."""
        return self.next_reset(now)

    def observe(self, snapshot: BudgetSnapshot) -> None:
        """The world's count of what each budgeted queue used, for this turn."""
        self._snapshot = snapshot

    def status(self, queue: str, now: float | None = None) -> BudgetStatus | None:
        """The budget of ``queue`` (None if it has none) against what its subtree used,
        holds until ``now`` (the core's by default) and will hold in the period by its
        running workloads' expected run times."""
        budget = self.budgets.get(queue)
        if budget is None:
            return None
        when = self.state.now if now is None else now
        period = period_window(budget.period, when)
        snapshot = self._snapshot
        used = snapshot.used.get(queue, 0.0) if period.start <= snapshot.at else 0.0
        since = Window(period.start, period.end)
        for running in self._running_under(queue):
            gpus = held_gpus(running.bound.values())
            if not gpus:
                continue
            counted_to = max(snapshot.at, running.started, period.start)
            used += gpus * since.overlap_hours(counted_to, when)
            runtime = running.workload.expected_runtime
            if runtime is not None:
                used += gpus * since.overlap_hours(when, running.started + runtime)
        return used_status(GpuHourBudget.of(budget), max(0.0, used), period)

    def statuses(self, now: float | None = None) -> dict[str, BudgetStatus]:
        """Every budgeted queue's :meth:`status`."""
        out = {}
        for queue in self.budgets:
            status = self.status(queue, now)
            if status is not None:
                out[queue] = status
        return out

    def _running_under(self, queue: str) -> Iterable[RunningWorkload]:
        for name, running in self.state.running.by_queue.items():
            if queue in self._on_path.get(name, ()):
                yield from running.values()

    def _spent(self, queue: str) -> tuple[str, BudgetStatus] | None:
        """The first budgeted queue on ``queue``'s path that is used up, with its status."""
        for owner in self._on_path.get(queue, ()):
            status = self.status(owner)
            if status is not None and status.state is BudgetState.EXHAUSTED:
                return owner, status
        return None

    # ------------------------------------------------------------------------ admission
    def check(self, workload: Workload, request: Mapping[str, int], now: float) -> str | None:
        if not self._on_path.get(workload.queue):
            return None
        spent = self._spent(workload.queue)
        if spent is None:
            return None
        owner, status = spent
        action = self.budgets[owner].action
        if action is BudgetAction.PREEMPTIBLE:
            return None
        if action is BudgetAction.NOMINAL_ONLY and self.state.quotas.within_nominal(
            workload.queue, request
        ):
            return None
        self.refusing[owner] = status.period.end
        why = describe_status(owner, status, action, self.state.time_format)
        return f"{why}; only within nominal quota" if action is BudgetAction.NOMINAL_ONLY else why

    def next_reset(self, now: float) -> float | None:
        """When the first budget that refused a workload starts a new period (None: none
        refused); the budgets whose period ended by ``now`` are forgotten."""
        for owner, end in list(self.refusing.items()):
            if end <= now:
                del self.refusing[owner]
        return min(self.refusing.values(), default=None)

    def admitted_as(self, workload: Workload) -> Workload:
        """``workload`` as it starts: demoted (preemptible, :data:`BUDGET_PRIORITY`) under a
        spent ``Preemptible`` budget; given its own priority back once no budget demotes it."""
        key = workload.key
        spent = self._spent(workload.queue) if self._on_path.get(workload.queue) else None
        demote = spent is not None and self.budgets[spent[0]].action is BudgetAction.PREEMPTIBLE
        if demote:
            if workload.priority == BUDGET_PRIORITY and workload.preemptible:
                return workload
            self._demoted.setdefault(key, (workload.priority, workload.preemptible))
            return replace(workload, priority=BUDGET_PRIORITY, preemptible=True)
        original = self._demoted.get(key)
        if original is None or workload.priority != BUDGET_PRIORITY:
            return workload
        return replace(workload, priority=original[0], preemptible=original[1])

    # ---------------------------------------------------------------------- running set
    def started(self, running: RunningWorkload) -> None:
        """Started with its own priority: what it had before a demotion need not be kept."""
        if running.workload.priority != BUDGET_PRIORITY:
            self._demoted.pop(running.key, None)
        self._hold(running)

    def shrunk(self, running: RunningWorkload, freed: Mapping[str, int]) -> None:
        self._hold(running)

    def stopped(self, running: RunningWorkload) -> None:
        if running.evicted_for is None:  # finished: it will not be tried again
            self._demoted.pop(running.key, None)
        self._let_go(running.key)

    def _hold(self, running: RunningWorkload) -> None:
        """What ``running`` holds now, counted in :attr:`held` if a budget covers its queue."""
        queue = running.workload.queue
        if not self._on_path.get(queue):
            return
        self._let_go(running.key)
        gpus = held_gpus(running.bound.values())
        if gpus:
            self._holding[running.key] = (queue, gpus)
            self.held[queue] = self.held.get(queue, 0.0) + gpus

    def _let_go(self, key: str) -> None:
        found = self._holding.pop(key, None)
        if found is None:
            return
        queue, gpus = found
        left = self.held[queue] - gpus
        if left > 1e-9:
            self.held[queue] = left
        else:
            del self.held[queue]

    def retagged(self, running: RunningWorkload, before: Workload) -> None:
        """(Its hours are read from the running set when asked.)"""


def budget_check_of(checks: Iterable[object]) -> BudgetCheck | None:
    """The budget check among a core's admission checks (None if its profile has none)."""
    return next((c for c in checks if isinstance(c, BudgetCheck)), None)


__all__ = [
    "BUDGET_PRIORITY",
    "BudgetCheck",
    "BudgetSnapshot",
    "budget_check_of",
    "describe_status",
    "held_gpus",
    "subtree_budgets",
]
