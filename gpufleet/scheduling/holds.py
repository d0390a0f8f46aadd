"""Room held for others: preemptors whose victims are leaving, and the backfill reservation.

A preemptor is *nominated* once its victims are chosen: until they are gone, its request is
charged to its queue and the rows its placement would take are held for it (kube-scheduler's
nominated pods count on their nominated node the same way), so that nothing else takes what
the preemption freed; the rows its victims still hold are refused to others too. A workload
that would leave some preemptor short of quota once its victims are gone is refused (a
preemptor within nominal must not lose the quota its preemption freed to work that borrows it
back): :meth:`Holds.survive` answers that on views of the usage, memoised while the usage and
the holds are the same. The backfill reservation (:mod:`.backfill` plans it) keeps rows for a
blocked gang from work expected to end after it would start.

:meth:`Holds.restrict_for` gives the rows a workload may use under all of that, the same mask
for every workload alike in what it reads, kept until something here changes
(:meth:`Holds.changed`).

What it does not do: choose victims (:mod:`.preemption`) or plan the reservation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.model.workload import Workload
from gpufleet.scheduling.backfill import Reservation
from gpufleet.scheduling.memo import VersionedMemo
from gpufleet.scheduling.node_table import BoolArray, IntArray
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.quota import UsageView
from gpufleet.scheduling.running import RunningWorkload

if TYPE_CHECKING:
    from gpufleet.scheduling.state import CoreState

HELD_FOR_PREEMPTOR = "waiting for quota: held for a preemptor"
#: restrict_for's answers kept at most (past this, all are forgotten).
_RESTRICTIONS_MEMO_SIZE = 4096

#: A preemptor's hold: the workload, its request (charged to its queue), the rows planned.
Hold = tuple[Workload, dict[str, int], IntArray]


class Holds:
    """See the module docstring."""

    def __init__(self, state: CoreState) -> None:
        self.state = state
        #: Preemptor -> victims not yet gone.
        self.nominated: dict[str, set[str]] = {}
        self.reservation: Reservation | None = None
        self._holds: dict[str, Hold] = {}
        #: Bumped by changed(); with the cycle's number it keys restrict_for's answers, and
        #: with the usage's version too survive's memos (what changed between cycles, the
        #: running set, the clock, is named by the cycle).
        self._epoch = 0
        #: restrict_for's answers.
        self._restrictions: VersionedMemo[tuple[object, ...], BoolArray | None] = VersionedMemo(
            _RESTRICTIONS_MEMO_SIZE
        )
        self._memo_at: tuple[int, int, int] = (-1, -1, -1)
        self._memo: dict[tuple[object, ...], list[tuple[tuple[int, ...], bool]]] = {}
        #: The same answers by the exact question (most questions repeat one asked before).
        self._exact: dict[tuple[tuple[object, ...], tuple[int, ...]], bool] = {}
        #: Per preemptor, made when first asked in the state above: its request as amounts,
        #: and the usage (and non-preemptible usage) as it will be when its victims are gone.
        self._views: dict[str, tuple[tuple[int, ...], UsageView, UsageView | None]] = {}
        #: The usage and non-preemptible usage the views start from (None: not read yet).
        self._usage: tuple[list[list[int]], list[list[int]]] | None = None

    # ----------------------------------------------------------------------------- changes
    def changed(self) -> None:
        """The reservation, the preemptors, their holds or their victims (or what those hold)
        changed: what was derived from them is dropped."""
        self._epoch += 1

    @property
    def any(self) -> bool:
        """Is some preemptor holding room?"""
        return bool(self._holds)

    def hold(
        self, workload: Workload, request: dict[str, int], rows: IntArray, victims: set[str]
    ) -> None:
        """``workload`` preempts ``victims``: charge its request and hold ``rows`` for it."""
        self.changed()
        self.nominated[workload.key] = victims
        self.state.quotas.charge(workload, request)
        self._holds[workload.key] = (workload, request, rows)

    def release(self, key: str) -> None:
        """Give a preemptor's held quota back (it was admitted, or it left)."""
        self.changed()
        hold = self._holds.pop(key, None)
        if hold is not None:
            self.state.quotas.refund(hold[0], hold[1])
            self.state.pending.wake_all(Parked.QUOTA)

    def victims_gone(self) -> list[str]:
        """Preemptors none of whose victims is left."""
        return [key for key, victims in self.nominated.items() if not victims]

    def end_nomination(self, key: str) -> None:
        """A preemptor whose victims are gone is tried again on its own: its hold ends."""
        self.changed()
        del self.nominated[key]
        self.release(key)

    def forget(self, key: str) -> None:
        """A waiting workload left: whatever it preempted for or held goes."""
        self.nominated.pop(key, None)
        self.release(key)

    def victim_left(self, key: str) -> None:
        for victims in self.nominated.values():
            victims.discard(key)

    def reserve(self, reservation: Reservation | None) -> None:
        self.reservation = reservation
        self.changed()

    def drop_reservation(self) -> None:
        self.reservation = None
        self.changed()
        self.state.pending.wake_all(Parked.CAPACITY)

    def drop_reservation_of(self, key: str) -> None:
        if self.reservation is not None and self.reservation.owner == key:
            self.drop_reservation()

    # ----------------------------------------------------------------------------- rows
    def restrict_for(self, workload: Workload, keep_reservation: bool = True) -> BoolArray | None:
        """Rows ``workload`` may use: all but those held for a preemptor whose victims are
        leaving, and those reserved for a blocked gang (unless it is expected to end first).
        The same for every workload alike in what it reads; read-only, kept until the
        reservation, the preemptors, their holds or their victims change."""
        state = self.state
        reservation = self.reservation
        keeps = (
            keep_reservation
            and reservation is not None
            and reservation.owner != workload.key
            and state.now + (workload.expected_runtime or state.config.default_expected_runtime)
            > reservation.start
        )
        nominated = workload.key in self.nominated
        memo_key = (
            state.table.size,
            state.now,
            keeps,
            nominated,
            workload.key if not nominated and workload.key in self._holds else None,
        )
        return self._restrictions.get(
            memo_key, (self._epoch, state.cycle), lambda: self._read_only_restrict(workload, keeps)
        )

    def _read_only_restrict(self, workload: Workload, keeps: bool) -> BoolArray | None:
        allowed = self._compute_restrict(workload, keeps)
        if allowed is not None:
            allowed.flags.writeable = False
        return allowed

    def _compute_restrict(self, workload: Workload, keeps: bool) -> BoolArray | None:
        n = self.state.table.size
        allowed: BoolArray | None = None
        reservation = self.reservation
        if keeps and reservation is not None:
            allowed = np.ones(n, np.bool_)
            allowed[: min(n, reservation.rows.size)] &= ~reservation.rows[:n]
        if self.nominated and workload.key not in self.nominated:
            evicting = self.state.running.evicting
            for victim_key in set().union(*self.nominated.values()):
                victim = evicting.get(victim_key)
                if victim is None:
                    continue
                if allowed is None:
                    allowed = np.ones(n, np.bool_)
                for bound in victim.bound.values():
                    allowed[bound.allocation.row] = False
            for owner, (_, _, rows) in self._holds.items():
                if owner != workload.key:
                    if allowed is None:
                        allowed = np.ones(n, np.bool_)
                    allowed[rows[rows < n]] = False
        return allowed

    # ----------------------------------------------------------------------------- quota
    def survive(
        self,
        workload: Workload,
        usage: Mapping[str, int],
        limited: tuple[int, ...] | None = None,
    ) -> bool:
        """Would every preemptor whose victims are leaving still pass its quota check with
        ``workload`` admitted too (holding ``usage``; ``limited``: the same as the tree's
        amounts, if known)?"""
        # The answer depends on the usage (named by its version), the holds and their victims
        # still leaving, and the workload's queue, namespace, kind and usage.
        self._fresh_memo()
        quotas = self.state.quotas
        skipped = workload.key if workload.key in self._holds else None
        if quotas.namespace_caps:
            memo_key: tuple[object, ...] = (
                skipped, workload.queue, workload.namespace, workload.preemptible,
                *sorted(usage.items()),
            )  # fmt: skip
            amounts: tuple[int, ...] = ()
        else:
            # Only the keys quotas limit count. More usage charged to the queue only takes
            # more room from the preemptors: a usage below one that passed passes, and one
            # above one that failed fails.
            memo_key = (skipped, workload.queue, workload.preemptible)
            amounts = quotas.tree.limited(usage) if limited is None else limited
        exact = self._exact.get((memo_key, amounts))
        if exact is not None:
            return exact
        known = self._memo.setdefault(memo_key, [])
        for seen, survives in known:
            if survives and all(a <= b for a, b in zip(amounts, seen, strict=True)):
                break
            if not survives and all(a >= b for a, b in zip(amounts, seen, strict=True)):
                break
        else:
            survives = self.survive_now(workload, usage, limited)
            known.append((amounts, survives))
        self._exact[(memo_key, amounts)] = survives
        return survives

    def _fresh_memo(self) -> None:
        """Drop what was derived for the holds if the usage or the holds changed."""
        state = (self.state.quotas.tree.version, self._epoch, self.state.cycle)
        if state != self._memo_at:
            self._memo_at = state
            self._memo.clear()
            self._exact.clear()
            self._views.clear()
            self._usage = None

    def survive_now(
        self,
        workload: Workload,
        usage: Mapping[str, int],
        limited: tuple[int, ...] | None = None,
    ) -> bool:
        """:meth:`survive` without its memos: on views of the usage as each preemptor will see
        it (by trial where namespaces have caps)."""
        if self.state.quotas.namespace_caps:
            return self.survive_by_trial(workload, usage)
        self._fresh_memo()
        # Each preemptor as it will be when its victims are gone, seen once for this state
        # (the memo was reset with it), asked with the workload's usage added; made only
        # when reached (the first that refuses ends the question).
        tree = self.state.quotas.tree
        amounts = tree.limited(usage) if limited is None else limited
        pinned = amounts if not workload.preemptible else (0,) * len(amounts)
        views = self._views
        for owner, (holder, held, _) in self._holds.items():
            if owner == workload.key:
                continue
            known = views.get(owner)
            if known is None:
                known = views[owner] = self._holder_view(owner, holder, held)
            request, view, pinned_view = known
            if not view.admits(holder.queue, request, workload.queue, amounts):
                return False
            if pinned_view is not None and not pinned_view.within_nominal(
                holder.queue, request, workload.queue, pinned
            ):
                return False
        return True

    def _holder_view(
        self, owner: str, holder: Workload, request: Mapping[str, int]
    ) -> tuple[tuple[int, ...], UsageView, UsageView | None]:
        """For one preemptor: its request as amounts, and the usage with its request and its
        leaving victims refunded (and the non-preemptible usage, if it is non-preemptible: it
        must stay within nominal), as Quotas.refund would leave them."""
        quotas = self.state.quotas
        tree = quotas.tree
        if self._usage is None:
            self._usage = (tree.usage.tolist(), quotas.pinned_usage.tolist())
        usage, pinned = self._usage

        def refund(rows: list[list[int]], queue: str, amounts: tuple[int, ...]) -> None:
            for i in tree.paths[tree.index[queue]]:
                row = rows[i]
                for j, amount in enumerate(amounts):
                    row[j] -= amount

        gone = [(w.workload, tree.limited(w.usage)) for w in self._leaving(owner)]
        amounts = tree.limited(request)
        rows = [row[:] for row in usage]
        refund(rows, holder.queue, amounts)
        for victim, taken in gone:
            refund(rows, victim.queue, taken)
        pinned_view = None
        if not holder.preemptible:
            pinned_rows = [row[:] for row in pinned]
            refund(pinned_rows, holder.queue, amounts)
            for victim, taken in gone:
                if not victim.preemptible:
                    refund(pinned_rows, victim.queue, taken)
            pinned_view = UsageView(tree, pinned_rows)
        return amounts, UsageView(tree, rows), pinned_view

    def survive_by_trial(self, workload: Workload, usage: Mapping[str, int]) -> bool:
        """:meth:`survive` by charging and refunding the quotas (namespace caps need it)."""
        quotas = self.state.quotas
        # Restored as a snapshot, so that the usage keeps its version (and what was memoised).
        before = quotas.snapshot()
        quotas.charge(workload, usage)
        try:
            for owner, (holder, request, _) in self._holds.items():
                if owner == workload.key:
                    continue
                # As it will be when its victims are gone (they are charged until then).
                leaving = self._leaving(owner)
                quotas.refund(holder, request)
                for victim in leaving:
                    quotas.refund(victim.workload, victim.usage)
                try:
                    if not quotas.check(holder, request).admits:
                        return False
                finally:
                    quotas.charge(holder, request)
                    for victim in leaving:
                        quotas.charge(victim.workload, victim.usage)
            return True
        finally:
            quotas.restore(before)

    def _leaving(self, owner: str) -> list[RunningWorkload]:
        evicting = self.state.running.evicting
        return [evicting[v] for v in self.nominated.get(owner, ()) if v in evicting]
