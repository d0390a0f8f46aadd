"""The placement engine: filter all nodes at once, score the feasible ones, pick, reserve.

One placement is a handful of numpy operations over node columns, no Python loop over nodes:

1. compile the pod to a :class:`~gpufleet.scheduling.demand.Demand` (cached per pod shape);
2. mask = static mask of the shape & usage filters (free CPU, memory, GPU, extended resources)
   & the pod's inter-pod rules (affinity, anti-affinity, spread; kept per shape while the
   table's state is the same) & running pods' anti-affinity against this pod's labels & the
   filters a profile adds (``extra_filters``: after the built-in ones, which always run);
3. if the pod has preferences (preferred node or pod affinity, soft spread, or running pods'
   terms that match it), only the feasible rows it prefers most stay (:mod:`.preferences`);
4. raw scores of those rows, from a per-(scorer, shape) cache in which only rows whose
   version changed since they were scored are recomputed;
5. the highest combined score wins; ties go to the lowest tie-break rank (a fixed node order);
6. the policy's device chooser picks GPU positions or MIG slices, the table takes them (and
   counts the pod in its pod index under the pod's namespace, labels and terms).

:meth:`PlacementEngine.place_gang` places several pods on a trial of the table and keeps all of
them or none. What this module does not do: queues, quotas, preemption (they sit above it).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpufleet.model import MILLI_PER_GPU, Placement, Pod
from gpufleet.model.capacity import CapacityNeed
from gpufleet.scheduling.capacity import accepts_spot, need_of
from gpufleet.scheduling.demand import Demand, compile_demand
from gpufleet.scheduling.filters import (
    GpuFit,
    NodeResourcesFit,
    default_filters,
    missing_gpu_models,
    pod_rules_mask,
)
from gpufleet.scheduling.framework import (
    DeviceChoice,
    FilterPlugin,
    FloatArray,
    Policy,
    ScorePlugin,
)
from gpufleet.scheduling.interpod import (
    EXISTING_ANTI_AFFINITY_REASON,
    existing_anti_affinity_failures,
)
from gpufleet.scheduling.memo import VersionedMemo
from gpufleet.scheduling.node_table import Allocation, BoolArray, Claim, IntArray, NodeTable
from gpufleet.scheduling.policies.devices import replica_devices, share_milli
from gpufleet.scheduling.preferences import may_prefer, preferred_rows
from gpufleet.scheduling.row_cache import RowTracker

#: Masks of the inter-pod rules kept at most (per pod shape and per pod identity).
_RULE_MEMO_SIZE = 256
#: Pod shapes whose compiled demand is kept (past this, all are compiled again).
_DEMAND_MEMO_SIZE = 1 << 16


@dataclass(frozen=True, slots=True)
class Bound:
    """A pod placed: where (for users and backends) and what it holds (to give it back)."""

    pod: Pod
    placement: Placement
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A pod that fits nowhere now, with the number of nodes failing per reason."""

    pod: Pod
    total_nodes: int
    reasons: Mapping[str, int] = field(default_factory=dict)
    detail: str = ""

    def message(self) -> str:
        """kube-scheduler's wording: '0/40 nodes are available: 32 Insufficient ...'."""
        parts = ", ".join(
            f"{count} {reason}"
            for reason, count in sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        text = f"0/{self.total_nodes} nodes are available"
        text = f"{text}: {parts}." if parts else f"{text}."
        return f"{self.detail} {text}".strip()


@dataclass(slots=True)
class _ScoreCache:
    """Raw scores of one (scorer, pod kind) for every row of the kind's static mask.

    Pods sharing a cache have the same CPU/GPU request and static constraints but may differ in
    memory; :class:`RowTracker` scores every static row when the cache is made (a row one pod
    cannot use may serve another) and afterwards every changed one.
    """

    values: FloatArray
    rows: RowTracker = field(default_factory=RowTracker)


class PlacementEngine:
    """Places pods on a :class:`NodeTable` under a :class:`Policy`."""

    def __init__(
        self,
        table: NodeTable,
        policy: Policy,
        extra_filters: Sequence[FilterPlugin] = (),
        tie_rank: IntArray | None = None,
        score_cache_size: int = 1024,
    ) -> None:
        self.table = table
        self.policy = policy
        #: Filters beyond the built-in ones (compiled into each shape's demand), and all of
        #: them in the order ``explain`` counts a node's first failing one.
        self.extra_filters = tuple(extra_filters)
        self.filters = (*default_filters(), *self.extra_filters)
        self._resources = NodeResourcesFit()
        self._gpus = GpuFit()
        self._tie_rank = tie_rank
        #: Compiled shapes and their capacity-need variants, by the node set (``topology_version``).
        self._demands: VersionedMemo[tuple[object, ...], Demand] = VersionedMemo(_DEMAND_MEMO_SIZE)
        self._needs: VersionedMemo[tuple[object, ...], Demand] = VersionedMemo(_DEMAND_MEMO_SIZE)
        self._scores: OrderedDict[tuple[int, tuple[object, ...], int], _ScoreCache] = OrderedDict()
        self._score_cache_size = score_cache_size
        #: Inter-pod masks by pod shape (and by identity for running pods' anti-affinity),
        #: with the table state they were computed in.
        self._rule_masks: VersionedMemo[tuple[object, ...], BoolArray] = VersionedMemo(
            _RULE_MEMO_SIZE + 1
        )
        self._repelled: VersionedMemo[int, BoolArray | None] = VersionedMemo(_RULE_MEMO_SIZE + 1)

    # ------------------------------------------------------------------------- compile
    def demand(self, pod: Pod) -> Demand:
        """The compiled form of ``pod`` for the current node set (cached per shape)."""
        return self._demands.get(
            pod.signature, self.table.topology_version, lambda: self._compile(pod)
        )

    def _compile(self, pod: Pod) -> Demand:
        demand = compile_demand(self.table, pod)
        demand.spot_ok = accepts_spot(pod)
        return demand

    def demand_for(self, pod: Pod, critical: bool = False, checkpointed: bool = False) -> Demand:
        """:meth:`demand`, for a pod of a workload that is ``critical`` (not preemptible, or
        inference-critical) or ``checkpointed``: what it needs of capacity set
        (:func:`~gpufleet.scheduling.capacity.need_of`), a variant kept per shape and need.
        Scorers read it; filters do not."""
        demand = self.demand(pod)
        need = need_of(critical, checkpointed, demand.spot_ok)
        if need is CapacityNeed.ANY:
            return demand
        return self._needs.get(
            (pod.signature, need), demand.topology_version, lambda: replace(demand, capacity=need)
        )

    def tie_rank(self) -> IntArray:
        """Rank of each row in the tie-break order (lower wins); rows added later rank last."""
        size = self.table.size
        rank = self._tie_rank
        if rank is None or rank.size < size:
            extra = np.arange(0 if rank is None else rank.size, size, dtype=np.int64)
            base = np.empty(0, np.int64) if rank is None else rank
            rank = self._tie_rank = np.concatenate([base, extra])
        return rank

    # ------------------------------------------------------------------------- filter
    def feasible(self, demand: Demand, rows: IntArray | None = None) -> BoolArray:
        """Whether the pod fits now on each of ``rows`` (default: every row).

        This is per pod shape: running pods' anti-affinity, which depends on a pod's labels,
        is applied per pod by :meth:`place` (:meth:`repelled`)."""
        mask = demand.static_mask.copy() if rows is None else demand.static_mask[rows]
        if self._resources.applies(demand):
            mask &= self._resources.mask(self.table, demand, rows)
        if self._gpus.applies(demand):
            mask &= self._gpus.mask(self.table, demand, rows)
        if demand.pod_rules_filter:
            rules = self._rules_mask(demand)
            mask &= rules if rows is None else rules[rows]
        for plugin in self.extra_filters:
            if plugin.applies(demand):
                mask &= plugin.mask(self.table, demand, rows)
        return mask

    def _rules_mask(self, demand: Demand) -> BoolArray:
        """:func:`pod_rules_mask` of the demand, kept while the table's state is the same."""
        table = self.table
        return self._rule_masks.get(
            demand.signature,
            (table.state, table.topology_version),
            lambda: _frozen(pod_rules_mask(table, demand)),
        )

    def repelled(self, pod: Pod, identity: int | None = None) -> BoolArray | None:
        """Rows refused to ``pod`` by running pods' required anti-affinity (None: none are);
        kept per pod identity while the table's state is the same."""
        table = self.table
        index = table.pod_index
        if not index.repelling:
            return None
        if identity is None:
            identity = index.identity(pod)
        found = identity
        return self._repelled.get(
            identity,
            (table.state, table.topology_version),
            lambda: _read_only(existing_anti_affinity_failures(table, found)),
        )

    def fits_row(self, demand: Demand, row: int) -> bool:
        """Whether the pod fits on one row now: :meth:`feasible` for a single row, in scalar
        reads (it runs for every waiting pod kind each time a pod ends, so numpy's per-call cost
        would dominate). A property test keeps the two in agreement."""
        table = self.table
        if row >= demand.static_mask.size or not demand.static_mask[row]:
            return False
        if table.cpu_free[row] < demand.cpu_milli or table.mem_free[row] < demand.memory_mib:
            return False
        for rid, amount in demand.extended:
            if table.ext_free[row, rid] < amount:  # (rid -1: the static mask refused the row)
                return False
        if demand.pod_rules_filter and not self._rules_mask(demand)[row]:
            return False
        for plugin in self.extra_filters:
            if plugin.applies(demand) and not plugin.mask(table, demand, np.array([row]))[0]:
                return False
        if demand.mig_count:
            return bool(
                demand.mig_profile >= 0
                and table.mig_free[row, demand.mig_profile] >= demand.mig_count
            )
        if demand.units and table.replicated and table.units_free[row] < demand.units:
            return False
        if demand.milli_by_row is None:
            if demand.shared:
                return bool(table.max_free[row] >= demand.gpu_milli)
            return bool(table.full_free[row] >= demand.gpu_count)
        need = demand.milli_by_row[row]
        if demand.shared or demand.gpu_count == 1:
            return bool(table.max_free[row] >= need)
        return int(np.count_nonzero(table.gpu_free[row] >= need)) >= demand.gpu_count

    def explain(self, pod: Pod) -> Unschedulable:
        """Why ``pod`` fits nowhere: nodes per reason, the first failing filter of each node."""
        table = self.table
        demand = self.demand(pod)
        remaining = table.alive[: table.size].copy()
        total = int(remaining.sum())
        counts: Counter[str] = Counter()
        for plugin in self.filters:
            if not plugin.applies(demand):
                continue
            failing = remaining & ~plugin.mask(table, demand)
            if not failing.any():
                continue
            for reason, mask in plugin.reasons(table, demand).items():
                count = int(np.count_nonzero(mask & failing))
                if count:
                    counts[reason] += count
            remaining &= ~failing
        repelled = self.repelled(pod)
        if repelled is not None:
            count = int(np.count_nonzero(remaining & repelled))
            if count:
                counts[EXISTING_ANTI_AFFINITY_REASON] += count
        detail = ""
        missing = missing_gpu_models(table, pod) if (pod.gpu.count or pod.gpu.mig_count) else []
        if missing:
            detail = (
                f"{pod.key} can never fit on this cluster: no node has GPU model "
                f"{' or '.join(missing)}."
            )
        elif not self.fits_when_empty(pod):
            detail = f"{pod.key} can never fit on this cluster ({describe_request(pod)})."
        return Unschedulable(pod, total, dict(counts), detail)

    def fits_when_empty(self, pod: Pod) -> bool:
        """Would ``pod`` fit on some node if the cluster were empty?"""
        table = self.table
        n = table.size
        demand = self.demand(pod)
        # Cordons are temporary, so a cordoned node still counts here.
        mask = table.alive[:n] & (table.cpu_cap[:n] >= pod.cpu_milli)
        for static in (
            demand.model_mask,
            demand.affinity_mask,
            demand.taint_mask,
            demand.resource_mask,
        ):
            if static is not None:
                mask &= static
        mask &= table.mem_cap[:n] >= pod.memory_mib
        for rid, amount in demand.extended:
            if rid < 0:
                return False
            mask &= table.ext_cap[:n, rid] >= amount
        if demand.mig_count:
            if demand.mig_profile < 0:
                return False
            mask &= table.mig_cap[:n, demand.mig_profile] >= demand.mig_count
        elif demand.gpu_count:
            milli = demand.milli_by_row if demand.milli_by_row is not None else demand.gpu_milli
            mask &= (table.gpu_count[:n] >= demand.gpu_count) & (milli <= MILLI_PER_GPU)
            if demand.units:
                mask &= table.units_cap[:n] >= demand.units
        return bool(mask.any())

    # ------------------------------------------------------------------------- score
    def _raw_scores(self, scorer: ScorePlugin, demand: Demand, rows: IntArray) -> FloatArray:
        if not scorer.row_local:
            return scorer.score(self.table, demand, rows)
        table = self.table
        # By the node set too: a shape compiled again after nodes changed starts afresh.
        key = (id(scorer), demand.cache_key, demand.topology_version)
        cache = self._scores.get(key)
        if cache is None or cache.values.size != table.capacity:
            cache = _ScoreCache(np.zeros(table.capacity, np.float64))
            self._scores[key] = cache
            if len(self._scores) > self._score_cache_size:
                self._scores.popitem(last=False)
        else:
            self._scores.move_to_end(key)
        stale = cache.rows.stale_rows(table, demand.static_mask)
        if stale.size:
            cache.values[stale] = scorer.score(table, demand, stale)
        result: FloatArray = cache.values[rows]
        return result

    def scores(self, demand: Demand, rows: IntArray) -> FloatArray:
        """Combined, normalised scores of feasible ``rows``."""
        total: FloatArray | None = None
        for scorer, weight in self.policy.scorers:
            values = scorer.normalize(self._raw_scores(scorer, demand, rows))
            if weight != 1.0:
                values = values * weight
            total = values if total is None else total + values
        assert total is not None, "a policy needs at least one scorer"
        return total

    def choose_row(self, demand: Demand, mask: BoolArray, identity: int = -1) -> int | None:
        """The best row of ``mask`` for a pod of ``demand`` (and of ``identity`` in the pod
        index, for running pods' terms that match it; -1: none apply)."""
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return None
        if rows.size == 1:
            return int(rows[0])
        if may_prefer(self.table, demand):
            rows = preferred_rows(self.table, demand, identity, rows)
            if rows.size == 1:
                return int(rows[0])
        scores = self.scores(demand, rows)
        best = rows[scores == scores.max()]
        if best.size == 1:
            return int(best[0])
        return int(best[np.argmin(self.tie_rank()[best])])

    # ------------------------------------------------------------------------- place
    def observe(self, pod: Pod) -> None:
        """Tell stateful policies that ``pod`` arrived (once per pod, not per attempt)."""
        if self.policy.observers:
            demand = self.demand(pod)
            for observer in self.policy.observers:
                observer.observe(demand)

    def place(
        self,
        pod: Pod,
        explain: bool = True,
        restrict: BoolArray | None = None,
        critical: bool = False,
        checkpointed: bool = False,
    ) -> Bound | Unschedulable:
        """Place one pod now (on the rows ``restrict`` allows, if given), or say why not; of a
        ``critical`` or ``checkpointed`` workload (:meth:`demand_for`)."""
        demand = self.demand_for(pod, critical, checkpointed)
        mask = self.feasible(demand)
        if restrict is not None:
            mask &= restrict[: mask.size]
        identity = self.table.pod_index.identity(pod)
        repelled = self.repelled(pod, identity)
        if repelled is not None:
            mask &= ~repelled
        row = self.choose_row(demand, mask, identity)
        if row is None:
            if explain:
                return self.explain(pod)
            return Unschedulable(pod, int(self.table.alive[: self.table.size].sum()))
        return self.reserve(pod, demand, row, identity)

    def reserve(self, pod: Pod, demand: Demand, row: int, identity: int | None = None) -> Bound:
        """Reserve devices for ``pod`` on ``row`` (which must fit) and take them."""
        table = self.table
        if identity is None:
            identity = table.pod_index.identity(pod)
        milli = share_milli(table, row, demand) if demand.gpu_count else 0
        if demand.gpu_count and not demand.shared and milli < MILLI_PER_GPU:
            # Replicas of a time-sliced node: the same rule for every policy.
            choice = DeviceChoice(replica_devices(table, row, milli, demand.gpu_count))
        else:
            choice = self.policy.devices.choose(table, row, demand)
        claim = Claim(
            row,
            demand.cpu_milli,
            demand.memory_mib,
            tuple(choice.positions),
            milli,
            demand.mig_profile if demand.mig_count else -1,
            tuple(choice.mig_slices),
            demand.tag,
            demand.extended,
            identity,
            demand.units,
        )
        allocation = table.allocate(claim)
        node = table.nodes[row]
        placement = Placement(
            node.name,
            allocation.gpu_indices,
            milli,
            tuple((node.gpus[p].index, slot) for p, slot in choice.mig_slices),
        )
        return Bound(pod, placement, allocation)

    def place_gang(
        self,
        pods: Sequence[Pod],
        explain: bool = True,
        restrict: BoolArray | None = None,
        critical: bool = False,
        checkpointed: bool = False,
    ) -> list[Bound] | Unschedulable:
        """Place all of ``pods`` or none of them (on a trial of the table), of a ``critical``
        or ``checkpointed`` workload."""
        mark = self.table.begin_trial()
        bound: list[Bound] = []
        for pod in pods:
            result = self.place(pod, explain, restrict, critical, checkpointed)
            if isinstance(result, Unschedulable):
                self.table.rollback(mark)
                return Unschedulable(
                    result.pod,
                    result.total_nodes,
                    result.reasons,
                    f"gang of {len(pods)}: {len(bound)} placed, then {pod.key} did not fit."
                    + (f" {result.detail}" if result.detail else ""),
                )
            bound.append(result)
        self.table.commit(mark)
        return bound

    def release(self, allocation: Allocation) -> None:
        self.table.release(allocation)


def _frozen(mask: BoolArray) -> BoolArray:
    """``mask``, made read-only (memoised masks are shared)."""
    mask.flags.writeable = False
    return mask


def _read_only(mask: BoolArray | None) -> BoolArray | None:
    """``mask``, made read-only (memoised masks are shared)."""
    return None if mask is None else _frozen(mask)


def describe_request(pod: Pod) -> str:
    """A short human description of what a pod asks for."""
    parts = [f"cpu {pod.cpu_milli}m", f"memory {pod.memory_mib}Mi"]
    gpu = pod.gpu
    if gpu.mig_profile is not None:
        parts.append(f"{gpu.mig_count} x nvidia.com/mig-{gpu.mig_profile}")
    elif gpu.is_shared:
        share = f"{gpu.milli} milli-GPU" if gpu.milli else f"{gpu.memory_mib}Mi GPU memory"
        unit = f", 1 x {gpu.resource}" if gpu.units else ""
        parts.append(f"a share of one GPU ({share}{unit})")
    elif gpu.count:
        parts.append(f"{gpu.count} x {gpu.resource}")
    if pod.gpu_models is not None:
        parts.append("GPU model in {" + ", ".join(sorted(pod.gpu_models)) + "}")
    parts.extend(f"{amount} x {name}" for name, amount in pod.extended)
    return ", ".join(parts)
