"""GPU models as Kueue's flavors: admission of a workload whose queue lists GPU models.

A queue may list GPU models in order, each with its own quota key (``nvidia.com/gpu-h100``):
a gang then goes on one model. :meth:`Flavors.attempt` tries them in order under the queue's
``flavorFungibility``: a model where it fits within nominal quota wins at once; one where it
fits by borrowing wins unless ``whenCanBorrow`` is TryNextFlavor; one where it needs
preemption is tried at once under ``whenCanPreempt: MayStopSearch``, else after every model
was looked at, and only if none lets it start by borrowing (Kueue: BorrowingOverPreemption).
The models a queue lists, as rows of the node table, are kept per queue until nodes change.

:meth:`Flavors.place_within_model_quota` serves a queue that lists no models but has
per-model quotas: a gang placed on GPUs of a model whose quota is full is placed again on the
models that still have room.

What it does not do: evict (the preemption callback does), commit an admission or park (the
core does, with the outcome returned).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.model.gpu import model_matches
from gpufleet.model.queues import FungibilityPolicy
from gpufleet.model.resources import GPU
from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import Bound, Unschedulable
from gpufleet.scheduling.holds import HELD_FOR_PREEMPTOR
from gpufleet.scheduling.node_table import BoolArray
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.quota import Verdict
from gpufleet.scheduling.topology import place_workload

if TYPE_CHECKING:
    from gpufleet.scheduling.state import CoreState


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One GPU model a queue lists: its name, the rows it may use (nodes of a matching GPU
    model, and CPU-only nodes for the gang's CPU pods), and its per-model quota key."""

    name: str
    rows: BoolArray
    key: str | None


@dataclass(frozen=True, slots=True)
class Placed:
    """The gang placed (the table's trial committed) and what it will hold."""

    bound: list[Bound]
    usage: dict[str, int]


@dataclass(frozen=True, slots=True)
class Blocked:
    """It cannot start now: ``why`` (a :class:`Parked` value), told ``message``; whether a
    backfill reservation may help (capacity, not quota, kept it out)."""

    why: str
    message: str
    plan_backfill: bool


class Flavors:
    """See the module docstring."""

    def __init__(
        self, state: CoreState, unfit_message: Callable[[Workload, Unschedulable], str]
    ) -> None:
        self.state = state
        self.unfit_message = unfit_message
        #: Per (queue, table size, topology version): the GPU models it lists, as rows.
        self._choices: dict[tuple[str, int, int], list[ModelChoice]] = {}

    def order(self, workload: Workload) -> list[ModelChoice]:
        """The GPU models its queue lists, in order, that some node has (and that the gang's
        pods allow); empty when the queue lists none or the gang asks for no GPU."""
        state = self.state
        queue = state.quotas.queues.get(workload.queue)
        if queue is None or not queue.gpu_models:
            return []
        gang = workload.pods[: workload.gang_size]
        if not any(p.gpu.count or p.gpu.mig_count for p in gang):
            return []
        table = state.table
        memo_key = (queue.name, table.size, table.topology_version)
        choices = self._choices.get(memo_key)
        if choices is None:
            n = table.size
            no_gpu = table.gpu_count[:n] == 0
            choices = []
            for name in queue.gpu_models:
                ids = [i for i, m in enumerate(table.model_names) if model_matches(name, m)]
                if ids:
                    rows = np.isin(table.model_id[:n], ids) | no_gpu
                    rows.flags.writeable = False
                    choices.append(ModelChoice(name, rows, state.requests.model_key(name)))
            self._choices[memo_key] = choices
        allowed = [p.gpu_models for p in gang if p.gpu_models is not None]
        if not allowed:
            return choices
        return [
            c for c in choices
            if all(any(model_matches(a, c.name) or model_matches(c.name, a) for a in pod)
                   for pod in allowed)
        ]  # fmt: skip

    def attempt(
        self,
        workload: Workload,
        models: Sequence[ModelChoice],
        keep_reservation: bool,
        preempt: Callable[[ModelChoice], bool] | None,
    ) -> Placed | Blocked | None:
        """Admission and placement of ``workload`` on ``models`` (see the module docstring);
        ``preempt`` (None: preemption is not allowed) evicts for it on one model. None when
        it preempted."""
        state = self.state
        quotas, table, holds = state.quotas, state.table, state.holds
        fungibility = quotas.queues[workload.queue].fungibility
        stop_to_borrow = fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
        stop_to_preempt = fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH
        _, request, _ = state.requests.entry(workload)
        base = holds.restrict_for(workload, keep_reservation=keep_reservation)
        borrow_on: BoolArray | None = None
        to_preempt: list[ModelChoice] = []
        told: list[str] = []
        quota_short = False
        for choice in models:
            restrict = choice.rows if base is None else base[: choice.rows.size] & choice.rows
            usage = dict(request)
            if choice.key is not None:
                usage[choice.key] = request[GPU]
            check = quotas.check(workload, usage)
            if check.admits:
                mark = table.begin_trial()
                placed = place_workload(state.engine, workload, restrict, state.explain_failures)
                if isinstance(placed, Unschedulable):
                    table.rollback(mark)
                    told.append(f"{choice.name}: {self.unfit_message(workload, placed)}")
                else:
                    usage = state.requests.usage_of(placed)
                    exact = quotas.check(workload, usage)
                    if exact.admits and (not holds.any or holds.survive(workload, usage)):
                        if exact.verdict is not Verdict.BORROWS or stop_to_borrow:
                            table.commit(mark)
                            return Placed(placed, usage)
                        table.rollback(mark)
                        if borrow_on is None:
                            borrow_on = restrict
                        continue
                    table.rollback(mark)
                    quota_short = True
                    why = (
                        f"waiting for quota: {exact.message()}"
                        if not exact.admits
                        else HELD_FOR_PREEMPTOR
                    )
                    told.append(f"{choice.name}: {why}")
            else:
                quota_short = True
                told.append(f"{choice.name}: waiting for quota: {check.message()}")
            if preempt is not None and stop_to_preempt:
                if preempt(choice):
                    return None
            else:
                to_preempt.append(choice)
        if borrow_on is not None:
            placed = place_workload(state.engine, workload, borrow_on)
            assert not isinstance(placed, Unschedulable), f"{workload.key} no longer places"
            return Placed(placed, state.requests.usage_of(placed))
        if preempt is not None:
            for choice in to_preempt:
                if preempt(choice):
                    return None
        if not told:
            told.append("no node has a GPU model its queue lists")
        why = Parked.QUOTA if quota_short else Parked.CAPACITY
        return Blocked(why, "; ".join(told), plan_backfill=not quota_short)

    def place_within_model_quota(self, workload: Workload, base: BoolArray | None) -> Placed | None:
        """Place the gang (on ``base``'s rows) only on GPU models whose quota has room left,
        if it then passes its quota (on a trial the caller keeps or rolls back)."""
        state = self.state
        table = state.table
        n = table.size
        quotas = state.quotas
        tree = quotas.tree
        index = tree.index[workload.queue]
        if workload.preemptible:
            room = tree.available(workload.queue) - tree.usage[index]
        else:  # non-preemptible work must stay within nominal, on every level
            pinned = quotas.pinned_usage
            room = np.min([tree.nominal[i] - pinned[i] for i in tree.paths[index]], axis=0)
        model_key = state.requests.model_key
        ok_models = [
            model_id
            for model_id, model in enumerate(table.model_names)
            if (key := model_key(model)) is None or room[tree.key_index[key]] > 0
        ]
        restrict = np.isin(table.model_id[:n], np.asarray(ok_models, np.int64)) | (
            table.gpu_count[:n] == 0
        )
        if base is not None:
            restrict &= base[:n]
        result = place_workload(state.engine, workload, restrict)
        if isinstance(result, Unschedulable):
            return None
        usage = state.requests.usage_of(result)
        if not quotas.check(workload, usage).admits:
            return None
        return Placed(result, usage)
