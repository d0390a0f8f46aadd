"""The admission pipeline: steps 2 to 7 of the cycle for the head of one group, one way for
every queue.

A queue that lists GPU models admits a gang on one of them, tried in the queue's order as
Kueue's flavor assigner tries a ClusterQueue's ResourceFlavors (:mod:`.flavors`); a queue that
lists none has one implicit flavor (Kueue's empty ResourceFlavor: every node, no per-model
quota key). :meth:`AdmissionPipeline.attempt`, in order:

1. the rows freed since it was parked: if none can hold one of its pods, it parks again as it
   was;
2. its queue's policy (namespace, priority class), the profile's admission checks, and the
   workload as the checks admit it (:class:`~.framework.AdmitsAs`);
3. each flavor in turn: quota on its request, placement of the whole gang on a trial of the
   node table (each pod's devices reserved on it), the exact quota on what the placement
   holds, the preemptors' holds. A GPU model (:meth:`AdmissionPipeline._try_model`) fits (its
   trial still open) or refuses it, saying why, whether preemption may help and whether a
   backfill reservation may;
4. the flavor search under the queue's ``flavorFungibility``
   (:meth:`AdmissionPipeline._search`): commit where it fits, keep a model where it only
   borrows for when no other fits, preempt on a refused model at once or once every model was
   looked at;
5. Bind actions for what it admits, evictions for what it preempts, or its group parked and
   told why (:mod:`.parking`), with a backfill reservation when that may help.

The answer is an :data:`Outcome`: :class:`Admitted`, :class:`Preempted` or :class:`Blocked`
with its :class:`~.pending.Parked` reason.

The implicit flavor (:meth:`AdmissionPipeline._implicit`) runs steps 3 to 5 in one place: it
is the only flavor, so it stops at its one answer (fungibility has nothing to choose) and acts
on it where it is found, with no record of the answer made; most attempts are on it, and issue
31 keeps them as cheap as before the pipeline. It also differs from a GPU model's in ways kept
so that no decision changes (each is marked ``implicit flavor:`` where the code does it):

* before its trial, a placement that surely succeeds, whose usage is its request, and that a
  preemptor's hold refuses, is refused without placing (what the trial would end in, sooner);
* refused by the exact quota (its GPUs landed on a model whose quota is full), it is placed
  again on the models with room (:meth:`~.flavors.Flavors.place_within_model_quota`);
* refused by the exact quota or by a hold once placed, it does not preempt: its victim search
  would look for room for its request on every row, which its quota and the nodes already
  give it (a model's search is narrowed to the model's rows and quota key, so it may help);
* refused by quota, it plans a backfill reservation when the GPUs its quota owes it are taken
  (:meth:`~.admission.Quotas.owed_but_taken`);
* what it is told is its one refusal's message; a model's is named after the model, and all
  models' are joined.

What it does not do: order the heads (:mod:`.ordering`), place one pod (:mod:`.engine`),
choose victims (the profile's post-filter) or carry out an eviction (:mod:`.lifecycle`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.model.actions import Action
from gpufleet.model.queues import FungibilityPolicy
from gpufleet.model.resources import GPU
from gpufleet.model.workload import Workload
from gpufleet.scheduling.backfill import Backfill
from gpufleet.scheduling.engine import Unschedulable
from gpufleet.scheduling.flavors import Flavors, ModelChoice, Placed
from gpufleet.scheduling.framework import AdmissionCheck, AdmitsAs, PostFilter
from gpufleet.scheduling.holds import HELD_FOR_PREEMPTOR
from gpufleet.scheduling.lifecycle import Lifecycle
from gpufleet.scheduling.node_table import BoolArray
from gpufleet.scheduling.parking import Parking
from gpufleet.scheduling.pending import Group, Parked
from gpufleet.scheduling.quota import Verdict
from gpufleet.scheduling.state import CoreState
from gpufleet.scheduling.topology import place_workload

__all__ = ["AdmissionPipeline", "Admitted", "Blocked", "Outcome", "Preempted"]

#: The park reasons read on every attempt, looked up once (an enum member's lookup on its
#: class costs several times a module global's on Python 3.11).
_QUOTA, _CAPACITY = Parked.QUOTA, Parked.CAPACITY


# The outcomes are named tuples, not frozen dataclasses: one is made on every attempt, and a
# frozen dataclass's __init__ sets each field through object.__setattr__ (issue 31: the
# cycle's instruction count).
class Admitted(NamedTuple):
    """It starts: ``workload`` (as its admission checks admitted it) placed as ``placed``."""

    workload: Workload
    placed: Placed


class Preempted(NamedTuple):
    """It evicted victims and waits for them to leave, its room held; ``model``: the GPU model
    it preempted on (None for the implicit flavor)."""

    model: str | None


class Blocked(NamedTuple):
    """It waits, its group parked for ``reason`` and told ``message``."""

    reason: Parked
    message: str


#: What one attempt of the pipeline ends in.
Outcome = Admitted | Preempted | Blocked


@dataclass(slots=True)  # not frozen: made once per model tried, and frozen init is slower
class _Fits:
    """A GPU model where the gang fits: placed as ``placed`` on the table's open trial
    ``mark`` (the caller commits or rolls it back), on ``rows``; whether it borrows to fit."""

    placed: Placed
    mark: int
    rows: BoolArray
    borrows: bool


@dataclass(slots=True)  # not frozen: made once per model tried, and frozen init is slower
class _Refusal:
    """A GPU model that refuses it: parks it for ``why``, told ``told`` (named after the
    model); whether a preemption on it may help; whether a backfill reservation may."""

    why: Parked
    preempts: bool
    backfill: bool
    told: str


class AdmissionPipeline:
    """See the module docstring."""

    def __init__(
        self,
        state: CoreState,
        parking: Parking,
        backfill: Backfill,
        lifecycle: Lifecycle,
        post_filter: PostFilter,
        admission_checks: Sequence[AdmissionCheck],
        unfit_message: Callable[[Workload, Unschedulable], str],
    ) -> None:
        self.state = state
        self.parking = parking
        self.backfill = backfill
        self.lifecycle = lifecycle
        self.post_filter = post_filter
        self.admission_checks = list(admission_checks)
        #: Checks that change how a workload they admit starts (a spent budget: preemptible).
        self.admits_as = [c for c in self.admission_checks if isinstance(c, AdmitsAs)]
        self.unfit_message = unfit_message
        self.flavors = Flavors(state)
        #: (time, preemptor, victim) of every preemption, for reports and invariants.
        self.preemptions: list[tuple[float, str, str]] = []

    def attempt(
        self, group: Group, actions: list[Action], allow_preemption: bool, nominated: bool = False
    ) -> Outcome:
        """Admit, preempt for or park the head of ``group`` (see the module docstring).
        ``nominated``: it preempted and its victims are gone; a reservation made since (while
        it waited for them) does not bind it."""
        state = self.state
        pending = group.head
        workload = pending.workload
        pending.attempts += 1
        freed = group.freed_rows
        group.freed_rows = None
        if freed is not None and not state.fits.fits_some_row(workload, freed):
            self.parking.park_unchanged(group)
            return Blocked(_CAPACITY, pending.told)
        refusal = state.quotas.refusal(workload)
        if refusal is not None:
            reason, message = refusal
            self.parking.park(group, actions, Parked.QUEUE_POLICY, message, reason)
            return Blocked(Parked.QUEUE_POLICY, message)
        _, request, amounts = state.requests.entry(workload)
        for admission_check in self.admission_checks:
            refused = admission_check.check(workload, request, state.now)
            if refused is not None:
                message = f"waiting for admission check {admission_check.name}: {refused}"
                why = Parked.ADMISSION_CHECK
                self.parking.park(group, actions, why, message, admission_check.name)
                return Blocked(why, message)
        for adjusting in self.admits_as:
            workload = adjusting.admitted_as(workload)
        models = self.flavors.order(workload)
        if models:
            return self._search(
                group, workload, request, models, actions, allow_preemption, nominated
            )
        return self._implicit(
            group, workload, request, amounts, actions, allow_preemption, nominated
        )

    def _implicit(
        self,
        group: Group,
        workload: Workload,
        request: dict[str, int],
        amounts: tuple[int, ...],
        actions: list[Action],
        allow_preemption: bool,
        nominated: bool,
    ) -> Outcome:
        """Steps 3 to 7 on the implicit flavor, its only one: its one answer stands (there is
        nothing to search), so it is acted on where it is found, with no record of it made
        (most attempts end here: issue 31 keeps them as cheap as before the pipeline).
        Quota on ``request`` (``amounts``: the quota tree's), placement on the rows the holds
        leave it, the exact quota, the holds; preemption where quota or capacity refused it; else
        7., parked here (no call to :meth:`_block` on the hot path)."""
        state = self.state
        quotas, holds, table = state.quotas, state.holds, state.table
        check = quotas.check(workload, request, amounts)
        if not check.admits:
            if allow_preemption:
                preempted = self._preempt(workload, actions, None)
                if preempted is not None:
                    return preempted
            if quotas.owed_but_taken(workload, request, check):
                # implicit flavor: the GPUs its quota owes it are taken (the quota tree's top
                # is the cluster's capacity): a gang waits for them as for room on the nodes.
                self.backfill.plan(workload)
            message = f"waiting for quota: {check.message()}"
            self.parking.park(group, actions, _QUOTA, message)
            return Blocked(_QUOTA, message)
        rows = holds.restrict_for(workload, keep_reservation=not nominated)
        if (
            holds.any
            and state.requests.usage_is_request(workload)
            and not holds.survive(workload, request, amounts)
            and state.fits.surely_places(workload, rows)
        ):
            # implicit flavor: what placing it would end in, without placing it: it fits, its
            # exact usage is its request (so the exact check passes), and a preemptor's hold
            # refuses it.
            self.parking.park(group, actions, _QUOTA, HELD_FOR_PREEMPTOR)
            return Blocked(_QUOTA, HELD_FOR_PREEMPTOR)
        mark = table.begin_trial()
        result = place_workload(state.engine, workload, rows, state.explain_failures)
        if isinstance(result, Unschedulable):
            table.rollback(mark)
            if allow_preemption:
                preempted = self._preempt(workload, actions, None)
                if preempted is not None:
                    return preempted
            self.backfill.plan(workload)
            message = self.unfit_message(workload, result)
            self.parking.park(group, actions, _CAPACITY, message)
            return Blocked(_CAPACITY, message)
        placed = Placed(result, state.requests.usage_of(result))
        exact = quotas.check(workload, placed.usage)
        if not exact.admits:
            # implicit flavor: GPUs of a model its quota lacks; try the models it has room on.
            # Refused, it does not preempt: its victim search would look for room for its
            # request on every row, which its quota and the nodes already give it.
            table.rollback(mark)
            mark = table.begin_trial()
            retry = self.flavors.place_within_model_quota(workload, rows)
            if retry is None:
                table.rollback(mark)
                message = f"waiting for quota: {exact.message()}"
                self.parking.park(group, actions, _QUOTA, message)
                return Blocked(_QUOTA, message)
            placed = retry
        if holds.any and not holds.survive(workload, placed.usage):
            table.rollback(mark)  # implicit flavor: nor does a hold's refusal preempt
            self.parking.park(group, actions, _QUOTA, HELD_FOR_PREEMPTOR)
            return Blocked(_QUOTA, HELD_FOR_PREEMPTOR)
        table.commit(mark)
        return self._admit(group, placed, actions, workload)

    def _search(
        self,
        group: Group,
        workload: Workload,
        request: dict[str, int],
        models: Sequence[ModelChoice],
        actions: list[Action],
        allow_preemption: bool,
        nominated: bool,
    ) -> Outcome:
        """Try the GPU ``models`` in order under the queue's fungibility (Kueue: a flavor
        where it fits within nominal quota wins at once; one where it borrows wins unless
        ``whenCanBorrow`` is TryNextFlavor; one where it needs preemption is preempted on at
        once under ``whenCanPreempt: MayStopSearch``, else after every flavor was looked at,
        and only if none lets it start by borrowing: BorrowingOverPreemption)."""
        state = self.state
        table = state.table
        fungibility = state.quotas.queues[workload.queue].fungibility
        stop_to_borrow = fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
        stop_to_preempt = fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH
        base = state.holds.restrict_for(workload, keep_reservation=not nominated)
        #: The first model where it fits by borrowing, kept while other models are tried.
        borrowing: _Fits | None = None
        to_preempt: list[ModelChoice] = []
        refusals: list[_Refusal] = []
        for model in models:
            tried = self._try_model(workload, request, model, base)
            if isinstance(tried, _Fits):
                if not tried.borrows or stop_to_borrow:
                    table.commit(tried.mark)
                    return self._admit(group, tried.placed, actions, workload)
                table.rollback(tried.mark)
                if borrowing is None:
                    borrowing = tried
                continue
            refusals.append(tried)
            if not tried.preempts:
                continue
            if allow_preemption and stop_to_preempt:
                preempted = self._preempt(workload, actions, model)
                if preempted is not None:
                    return preempted
            else:
                to_preempt.append(model)
        if borrowing is not None:
            placed = place_workload(state.engine, workload, borrowing.rows)
            assert not isinstance(placed, Unschedulable), f"{workload.key} no longer places"
            usage = state.requests.usage_of(placed)
            return self._admit(group, Placed(placed, usage), actions, workload)
        if allow_preemption:
            for model in to_preempt:
                preempted = self._preempt(workload, actions, model)
                if preempted is not None:
                    return preempted
        # Every model refused it: parked for quota if some model's quota did, else for
        # capacity, told why per model; a backfill reservation first if every refusal says
        # one may help.
        why = _QUOTA if any(r.why is _QUOTA for r in refusals) else _CAPACITY
        if all(r.backfill for r in refusals):
            self.backfill.plan(workload)
        message = "; ".join(r.told for r in refusals) or "no node has a GPU model its queue lists"
        return self._block(group, actions, why, message)

    def _try_model(
        self,
        workload: Workload,
        request: dict[str, int],
        model: ModelChoice,
        base: BoolArray | None,
    ) -> _Fits | _Refusal:
        """Quota, placement on a trial, exact quota and holds of ``workload`` (asking
        ``request``) on the GPU ``model``'s rows that ``base`` leaves it (None: all of them)."""
        state = self.state
        quotas, holds, table = state.quotas, state.holds, state.table
        rows = model.rows if base is None else base[: model.rows.size] & model.rows
        usage = dict(request)
        if model.key is not None:
            usage[model.key] = request[GPU]
        check = quotas.check(workload, usage)
        if not check.admits:
            return _Refusal(
                _QUOTA, True, False, f"{model.name}: waiting for quota: {check.message()}"
            )
        mark = table.begin_trial()
        result = place_workload(state.engine, workload, rows, state.explain_failures)
        if isinstance(result, Unschedulable):
            table.rollback(mark)
            told = self.unfit_message(workload, result)
            return _Refusal(_CAPACITY, True, True, f"{model.name}: {told}")
        placed = Placed(result, state.requests.usage_of(result))
        exact = quotas.check(workload, placed.usage)
        if not exact.admits:
            table.rollback(mark)
            return _Refusal(
                _QUOTA, True, False, f"{model.name}: waiting for quota: {exact.message()}"
            )
        if holds.any and not holds.survive(workload, placed.usage):
            table.rollback(mark)
            return _Refusal(_QUOTA, True, False, f"{model.name}: {HELD_FOR_PREEMPTOR}")
        return _Fits(placed, mark, rows, exact.verdict is Verdict.BORROWS)

    def _admit(
        self, group: Group, placed: Placed, actions: list[Action], as_: Workload
    ) -> Admitted:
        """6. The head of ``group`` starts as ``placed`` (its trial committed), as the
        workload ``as_`` (itself, or as an admission check admitted it): Bind actions."""
        self.state.pending.pop_head(group)
        self.lifecycle.start(as_, placed.bound, placed.usage, actions)
        return Admitted(as_, placed)

    def _preempt(
        self, workload: Workload, actions: list[Action], model: ModelChoice | None
    ) -> Preempted | None:
        """4. Evict the victims the post-filter chooses for ``workload`` on the GPU ``model``
        (None: the implicit flavor), and hold what their eviction frees for it; None if it
        finds none."""
        found = self.post_filter.select(workload, model)
        if found is None:
            return None
        state = self.state
        state.holds.hold(workload, found.request, found.rows, {v.key for v in found.victims})
        pending = state.pending.get(workload.key)
        if pending is not None:
            pending.reason = "preempting"
        for victim in found.victims:
            self.preemptions.append((state.now, workload.key, victim.key))
            self.lifecycle.evict(victim, f"preempted by {workload.key}", actions, workload.key)
        return Preempted(None if model is None else model.name)

    def _block(self, group: Group, actions: list[Action], why: Parked, message: str) -> Blocked:
        """7. Park ``group`` for ``why``, told ``message``."""
        self.parking.park(group, actions, why, message)
        return Blocked(why, message)
