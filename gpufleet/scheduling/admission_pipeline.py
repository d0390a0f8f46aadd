"""The admission pipeline: steps 2 to 7 of the cycle for the head of one group, one way for
every queue.

A queue that lists GPU models admits a gang on one of them, tried in the queue's order as
Kueue's flavor assigner tries a ClusterQueue's ResourceFlavors (:mod:`.flavors`); a queue that
lists none has one implicit flavor (:data:`~.flavors.IMPLICIT`, Kueue's empty ResourceFlavor:
every node, no per-model quota key). :meth:`AdmissionPipeline.attempt`, in order:

1. the rows freed since it was parked: if none can hold one of its pods, it parks again as it
   was;
2. its queue's policy (namespace, priority class), the profile's admission checks, and the
   workload as the checks admit it (:class:`~.framework.AdmitsAs`);
3. each flavor in turn (:meth:`AdmissionPipeline._try_flavor`): quota on its request,
   placement of the whole gang on a trial of the node table (each pod's devices reserved on
   it), the exact quota on what the placement holds, the preemptors' holds. The flavor fits
   (its trial still open) or refuses it, saying why, whether preemption may help and whether
   a backfill reservation may;
4. the flavor search under the queue's ``flavorFungibility`` (:mod:`.flavors`): commit where
   it fits, keep a flavor where it only borrows for when no other fits, preempt on a refused
   flavor at once or once every flavor was looked at;
5. Bind actions for what it admits, evictions for what it preempts, or its group parked and
   told why (:mod:`.parking`), with a backfill reservation when that may help.

The answer is an :data:`Outcome`: :class:`Admitted`, :class:`Preempted` or :class:`Blocked`
with its :class:`~.pending.Parked` reason.

The implicit flavor differs from a GPU model's in ways kept so that no decision changes (each
is marked ``implicit flavor:`` where the code does it):

* it is the only flavor, so it stops at its one answer (fungibility has nothing to choose);
* before its trial, a placement that surely succeeds, whose usage is its request, and that a
  preemptor's hold refuses, is refused without placing (what the trial would end in, sooner);
* refused by the exact quota (its GPUs landed on a model whose quota is full), it is placed
  again on the models with room (:meth:`~.flavors.Flavors.place_within_model_quota`);
* refused by the exact quota or by a hold once placed, it does not preempt: its victim search
  would look for room for its request on every row, which its quota and the nodes already
  give it (a model's search is narrowed to the model's rows and quota key, so it may help);
* refused by quota, it plans a backfill reservation when the GPUs its quota owes it are taken
  (:meth:`~.admission.Quotas.owed_but_taken`);
* what it is told is made only when it parks, and is its one refusal's message; a model's is
  made when the model refuses it, named after the model, and all models' are joined.

What it does not do: order the heads (:mod:`.ordering`), place one pod (:mod:`.engine`),
choose victims (the profile's post-filter) or carry out an eviction (:mod:`.lifecycle`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpufleet.model.actions import Action
from gpufleet.model.queues import FungibilityPolicy
from gpufleet.model.resources import GPU
from gpufleet.model.workload import Workload
from gpufleet.scheduling.backfill import Backfill
from gpufleet.scheduling.engine import Unschedulable
from gpufleet.scheduling.flavors import IMPLICIT, Flavor, Flavors, ModelChoice, Placed
from gpufleet.scheduling.framework import AdmissionCheck, AdmitsAs, PostFilter
from gpufleet.scheduling.holds import HELD_FOR_PREEMPTOR
from gpufleet.scheduling.lifecycle import Lifecycle
from gpufleet.scheduling.node_table import BoolArray
from gpufleet.scheduling.parking import Parking
from gpufleet.scheduling.pending import Group, Parked
from gpufleet.scheduling.quota import QuotaCheck, Verdict
from gpufleet.scheduling.state import CoreState
from gpufleet.scheduling.topology import place_workload

__all__ = ["AdmissionPipeline", "Admitted", "Blocked", "Outcome", "Preempted"]

#: The flavors of a queue that lists no GPU models.
IMPLICIT_ONLY: tuple[Flavor, ...] = (IMPLICIT,)
#: The park reasons read on every attempt, looked up once (an enum member's lookup on its
#: class costs several times a module global's on Python 3.11).
_QUOTA, _CAPACITY = Parked.QUOTA, Parked.CAPACITY


@dataclass(frozen=True, slots=True)
class Admitted:
    """It starts: ``workload`` (as its admission checks admitted it) placed as ``placed``."""

    workload: Workload
    placed: Placed


@dataclass(frozen=True, slots=True)
class Preempted:
    """It evicted victims and waits for them to leave, its room held; ``model``: the GPU model
    it preempted on (None for the implicit flavor)."""

    model: str | None


@dataclass(frozen=True, slots=True)
class Blocked:
    """It waits, its group parked for ``reason`` and told ``message``."""

    reason: Parked
    message: str


#: What one attempt of the pipeline ends in.
Outcome = Admitted | Preempted | Blocked
#: What a workload asks, as resources and as the quota tree's amounts.
_Request = tuple[dict[str, int], tuple[int, ...]]


@dataclass(slots=True)  # not frozen: made once per flavor tried, and frozen init is slower
class _Fits:
    """A flavor where the gang fits: placed as ``placed`` on the table's open trial ``mark``
    (the caller commits or rolls it back), on ``rows``; whether it borrows to fit."""

    placed: Placed
    mark: int
    rows: BoolArray | None
    borrows: bool


@dataclass(slots=True)  # not frozen: made once per flavor tried, and frozen init is slower
class _Refusal:
    """A flavor that refuses it: parks it for ``why``; whether a preemption on it may help;
    whether a backfill reservation may (None: if the GPUs its quota owes it are taken, asked
    when it parks, after any preemption was tried: the implicit flavor's quota refusal).
    What it is told: ``told``, or made when it parks from the quota check or the failed
    placement that refused it (the implicit flavor's)."""

    why: Parked
    preempts: bool
    backfill: bool | None
    told: str | QuotaCheck | Unschedulable


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
        flavors: Sequence[Flavor] = self.flavors.order(workload) or IMPLICIT_ONLY
        wants = (request, amounts)
        return self._search(group, workload, wants, flavors, actions, allow_preemption, nominated)

    def _search(
        self,
        group: Group,
        workload: Workload,
        wants: _Request,
        flavors: Sequence[Flavor],
        actions: list[Action],
        allow_preemption: bool,
        nominated: bool,
    ) -> Outcome:
        """Try ``flavors`` in order under the queue's fungibility (Kueue: a flavor where it
        fits within nominal quota wins at once; one where it borrows wins unless
        ``whenCanBorrow`` is TryNextFlavor; one where it needs preemption is preempted on at
        once under ``whenCanPreempt: MayStopSearch``, else after every flavor was looked at,
        and only if none lets it start by borrowing: BorrowingOverPreemption)."""
        state = self.state
        table = state.table
        keep_reservation = not nominated
        base: BoolArray | None = None
        if flavors is IMPLICIT_ONLY:
            # implicit flavor: the only one, so the first answer stands whatever it is; the
            # rows the holds leave it are read once its quota admits it.
            stop_to_borrow = stop_to_preempt = True
        else:
            fungibility = state.quotas.queues[workload.queue].fungibility
            stop_to_borrow = fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
            stop_to_preempt = fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH
            base = state.holds.restrict_for(workload, keep_reservation=keep_reservation)
        #: The first flavor where it fits by borrowing, kept while other flavors are tried.
        borrowing: _Fits | None = None
        to_preempt: list[Flavor] = []
        refusals: list[tuple[Flavor, _Refusal]] = []
        for flavor in flavors:
            tried = self._try_flavor(workload, wants, flavor, base, keep_reservation)
            if isinstance(tried, _Fits):
                if not tried.borrows or stop_to_borrow:
                    table.commit(tried.mark)
                    return self._admit(group, tried.placed, actions, workload)
                table.rollback(tried.mark)
                if borrowing is None:
                    borrowing = tried
                continue
            refusals.append((flavor, tried))
            if not tried.preempts:
                continue
            if allow_preemption and stop_to_preempt:
                preempted = self._preempt(workload, actions, flavor)
                if preempted is not None:
                    return preempted
            else:
                to_preempt.append(flavor)
        if borrowing is not None:
            placed = place_workload(state.engine, workload, borrowing.rows)
            assert not isinstance(placed, Unschedulable), f"{workload.key} no longer places"
            usage = state.requests.usage_of(placed)
            return self._admit(group, Placed(placed, usage), actions, workload)
        if allow_preemption:
            for flavor in to_preempt:
                preempted = self._preempt(workload, actions, flavor)
                if preempted is not None:
                    return preempted
        return self._park(group, workload, wants, refusals, actions)

    def _try_flavor(
        self,
        workload: Workload,
        wants: _Request,
        flavor: Flavor,
        base: BoolArray | None,
        keep_reservation: bool,
    ) -> _Fits | _Refusal:
        """Quota, placement on a trial, exact quota and holds of ``workload`` (asking
        ``wants``) on ``flavor``: on a model, on the rows ``base`` leaves it (None: every
        row); on the implicit flavor, on those :meth:`~.holds.Holds.restrict_for` leaves it
        (``keep_reservation``: bound by the backfill reservation)."""
        state = self.state
        quotas, holds, table = state.quotas, state.holds, state.table
        request, amounts = wants
        rows: BoolArray | None
        implicit = True
        if isinstance(flavor, ModelChoice):
            implicit = False
            rows = flavor.rows if base is None else base[: flavor.rows.size] & flavor.rows
            usage = dict(request)
            if flavor.key is not None:
                usage[flavor.key] = request[GPU]
            check = quotas.check(workload, usage)
            if not check.admits:
                return _Refusal(_QUOTA, True, False, f"waiting for quota: {check.message()}")
        else:
            check = quotas.check(workload, request, amounts)
            if not check.admits:
                return _Refusal(_QUOTA, True, None, check)
            rows = holds.restrict_for(workload, keep_reservation=keep_reservation)
            if (
                holds.any
                and state.requests.usage_is_request(workload)
                and not holds.survive(workload, request, amounts)
                and state.fits.surely_places(workload, rows)
            ):
                # implicit flavor: what placing it would end in, without placing it: it fits,
                # its exact usage is its request (so the exact check passes), and a
                # preemptor's hold refuses it.
                return _Refusal(_QUOTA, False, False, HELD_FOR_PREEMPTOR)
        mark = table.begin_trial()
        result = place_workload(state.engine, workload, rows, state.explain_failures)
        if isinstance(result, Unschedulable):
            table.rollback(mark)
            if implicit:
                return _Refusal(_CAPACITY, True, True, result)
            told = self.unfit_message(workload, result)
            return _Refusal(_CAPACITY, True, True, told)
        placed = Placed(result, state.requests.usage_of(result))
        exact = quotas.check(workload, placed.usage)
        if not exact.admits:
            table.rollback(mark)
            if not implicit:
                return _Refusal(_QUOTA, True, False, f"waiting for quota: {exact.message()}")
            # implicit flavor: GPUs of a model its quota lacks; try the models it has room on.
            mark = table.begin_trial()
            retry = self.flavors.place_within_model_quota(workload, rows)
            if retry is None:
                table.rollback(mark)
                return _Refusal(_QUOTA, False, False, exact)
            placed = retry
        if holds.any and not holds.survive(workload, placed.usage):
            table.rollback(mark)
            return _Refusal(_QUOTA, not implicit, False, HELD_FOR_PREEMPTOR)
        # implicit flavor: whether it borrows is never read (it stops at its one answer).
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
        self, workload: Workload, actions: list[Action], flavor: Flavor
    ) -> Preempted | None:
        """4. Evict the victims the post-filter chooses for ``workload`` on ``flavor``, and
        hold what their eviction frees for it; None if it finds none."""
        model = flavor if isinstance(flavor, ModelChoice) else None
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

    def _park(
        self,
        group: Group,
        workload: Workload,
        wants: _Request,
        refusals: Sequence[tuple[Flavor, _Refusal]],
        actions: list[Action],
    ) -> Blocked:
        """7. Every flavor refused it: park its group for quota if some flavor's quota did,
        else for capacity, told why per flavor; a backfill reservation first if every refusal
        says one may help."""
        quotas = self.state.quotas
        why = _CAPACITY
        plan_backfill = True
        for _, refused in refusals:
            if refused.why is _QUOTA:
                why = _QUOTA
            backfill = refused.backfill
            if backfill is None:
                refusal = refused.told
                assert isinstance(refusal, QuotaCheck)
                backfill = quotas.owed_but_taken(workload, wants[0], refusal)
            plan_backfill = plan_backfill and backfill
        if plan_backfill:
            self.backfill.plan(workload)
        if len(refusals) == 1:  # the implicit flavor's one refusal, most often
            message = self._told(workload, *refusals[0])
        else:
            told = [self._told(workload, flavor, refused) for flavor, refused in refusals]
            message = "; ".join(told) or "no node has a GPU model its queue lists"
        self.parking.park(group, actions, why, message)
        return Blocked(why, message)

    def _told(self, workload: Workload, flavor: Flavor, refused: _Refusal) -> str:
        """What ``refused`` tells it: named after the GPU model on a model's flavor."""
        told = refused.told
        if isinstance(told, Unschedulable):
            text = self.unfit_message(workload, told)
        elif isinstance(told, QuotaCheck):
            text = f"waiting for quota: {told.message()}"
        else:
            text = told
        return f"{flavor.name}: {text}" if isinstance(flavor, ModelChoice) else text
