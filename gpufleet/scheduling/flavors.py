"""GPU models as Kueue's flavors: which flavors a workload's admission tries, in order.

A queue may list GPU models in order, each with its own quota key (``nvidia.com/gpu-h100``):
a gang then goes on one model, a :class:`ModelChoice`. :meth:`Flavors.order` gives the models
its queue lists that some node has and its pods allow; the models a queue lists, as rows of
the node table, are kept per queue until nodes change. A queue that lists none has one
implicit flavor (Kueue's empty ResourceFlavor: every node, no per-model quota key), which the
admission pipeline (:mod:`.admission_pipeline`) tries on its own; it tries the models under
the queue's ``flavorFungibility``.

:meth:`Flavors.place_within_model_quota` serves the implicit flavor of a queue that has
per-model quotas: a gang placed on GPUs of a model whose quota is full is placed again on the
models that still have room.

What it does not do: check quota on a flavor, evict, commit an admission or park (the
pipeline does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.model.gpu import model_matches
from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import Bound, Unschedulable
from gpufleet.scheduling.node_table import BoolArray
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


class Flavors:
    """See the module docstring."""

    def __init__(self, state: CoreState) -> None:
        self.state = state
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
