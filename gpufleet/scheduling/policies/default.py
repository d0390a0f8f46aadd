"""gpufleet's default policy: place each pod where the cluster is expected to waste least.

In a fill-up (FGD protocol) the GPUs still idle when demand reaches capacity are waste of
three kinds; each pod is scored by how much it adds to each, in milli-GPU, so the terms add
up without tuned weights (scaling the CPU term by 0.5 or 2 moves the benchmark by < 0.05):

1. **Gaps left on shared GPUs.** A share goes to the device where
   ``gap_waste[left - share] - gap_waste[left]`` is least; ``gap_waste[x]`` is the idle milli
   that a device left with x milli still has, on average, when the cluster is full, measured
   by simulated fills of the target workload (:mod:`.default_gaps`). This is best fit with
   foresight: it will not leave 210 milli (only rare small pods use that) when it can leave
   360 (another 320-milli pod fits), and opens a fresh GPU when every used one would keep a
   useless sliver.
2. **GPUs stranded without CPU.** A node can use its idle GPUs only while it has CPU for
   them. With ``cpu_per_milli`` the CPU the target's GPU pods ask per milli-GPU, a node
   strands ``max(0, idle_gpu - cpu_free / cpu_per_milli)``; a GPU pod is charged the change.
   CPU-only pods are not (the linear estimate is too coarse to rank nodes for them, and
   charging it made them worse on CPU-heavy mixes): they go to the node with the fewest idle
   GPUs (CPU there is of no use to GPU pods), then to the tightest CPU fit.
3. **Pods that fit in few places.** Taking a node's k-th free GPU can cost a k-GPU pod its
   only slot, and filling T4 nodes with pods that could go anywhere starves pods that may
   only use T4s. :mod:`.default_reserve` learns such shapes from arrivals, prices their slots
   by supply and expected demand (zero while slots are plentiful), and every pod is charged
   the slots it takes.

Ties (many nodes are often equally good) are broken by consolidation (whole-GPU pods go to
the node with the fewest fully free GPUs left; CPU-only pods as said above), then by node
rarity (prefer node sizes that many nodes match or exceed in CPU, GPUs and memory, keeping
rare big nodes for the pods that only fit there, before any such pod has been seen), then by
the engine's fixed node order, which fills nodes one after another instead of spreading.

**When CPU, not GPU, runs out.** All of the above is about packing GPUs. When the expected
workload asks for clearly more CPU per GPU than the cluster has (:func:`cpu_pressure` above
``CPU_BOUND_PRESSURE``), the cluster runs out of CPU long before GPUs and what matters is where
CPU is left next to idle GPUs; FGD's measure (a node whose CPU no longer fits the expected pods
counts as wasted) does better there, so the policy uses it. The threshold was measured on pod
lists with more and more CPU-only pods (benchmarks/default_policy.py): at pressure 1.07 this
policy wins (6.64 against FGD's 7.11), at 1.12 the two are even (10.03 / 10.13), at 1.20,
1.35 and 1.98 FGD wins (14.56 / 15.44, 21.68 / 23.78, 41.35 / 46.10).

Why not FGD's score otherwise: FGD's fragmentation looks one pod ahead (could a random next pod use
this device?) and sees CPU only as "fits or not", so it leaves 190-milli gaps and CPU-starved
GPUs that no later pod uses; its integer sigmoid plus random tie-breaking consolidates by
accident. Here every term is an expected end-state waste, and consolidation is explicit.

Cost: the row-local terms of each pod shape are cached and recomputed only for rows changed
since (the table's change log); per placement that is a gather over the feasible rows, the
slot prices (a few operations per learned shape), and slot charges for the best rows only.
The slot estimate counts every :meth:`DefaultScore.observe` call as an arrival; the scheduling
core observes each pod once, when it arrives (``PlacementEngine.observe``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model import MILLI_PER_GPU
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.framework import DeviceChoice, FloatArray, Policy, identity
from gpufleet.scheduling.node_table import IntArray, NodeTable
from gpufleet.scheduling.policies.default_gaps import gap_waste
from gpufleet.scheduling.policies.default_reserve import SlotReserve
from gpufleet.scheduling.policies.devices import BestFitDevices, first_free_devices
from gpufleet.scheduling.policies.fgd import fgd_policy
from gpufleet.scheduling.row_cache import RowTracker
from gpufleet.scheduling.target import TargetWorkload

#: Above this :func:`cpu_pressure` the cluster is CPU-bound and FGD's measure is used (see the
#: module docstring for the measurements behind it).
CPU_BOUND_PRESSURE = 1.15
#: Weights that make the tie-breakers lexicographic: consolidation (GPUs, or idle GPUs for
#: CPU-only pods) below any waste difference that matters, rarity below consolidation.
CONSOLIDATION_WEIGHT = 1e-3
RARITY_WEIGHT = 1e-7
_CACHED_SHAPES = 512


@dataclass(slots=True)
class _RowTerms:
    """Row-local terms of one pod shape over all rows of its static mask."""

    waste: FloatArray  # milli-GPU: strand change, plus the best partly used device's gap cost
    fresh_waste: FloatArray  # same when opening a fully free device (inf: none)
    partial_free: IntArray  # milli free on the best partly used device (shares)
    score: FloatArray  # the score before slot prices: -(least waste + tie-breakers)
    rows: RowTracker = field(default_factory=RowTracker)


class DefaultScore:
    """Expected end-state waste of placing a pod on each row (see the module docstring)."""

    name = "DefaultScore"
    row_local = False  # slot prices are cluster-wide; row-local parts are cached here

    def __init__(self, table: NodeTable, target: TargetWorkload) -> None:
        self.table = table
        self.gap_waste = gap_waste(target, int(table.gpu_count[: table.size].sum()))
        self.cpu_per_milli = _cpu_per_gpu_milli(target)
        self.reserve = SlotReserve(table)
        self._terms: OrderedDict[tuple[object, ...], _RowTerms] = OrderedDict()
        self._rarity = np.zeros(0)
        self._rarity_topology = -1

    def observe(self, demand: Demand) -> None:
        self.reserve.observe(demand)

    def normalize(self, scores: FloatArray) -> FloatArray:
        return identity(scores)

    # ------------------------------------------------------------------------- scores
    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        """Minus the expected waste of each row; see :meth:`_charge_slots` for priced slots."""
        terms = self._row_terms(demand)
        result: FloatArray = terms.score[rows]
        if self.reserve.update_prices() and not demand.mig_count:
            self._charge_slots(demand, rows, terms, result)
        return result

    def _charge_slots(
        self, demand: Demand, rows: IntArray, terms: _RowTerms, scores: FloatArray
    ) -> None:
        """Subtract the value of the slots each placement takes, where it can matter.

        Slot losses are never negative, so a score without them is an upper bound. The rows
        at the highest bound are charged first; then every row whose bound reaches the best
        charged score (it could still win or tie) is charged too. Other rows cannot win and
        keep their bound. Two vectorised passes, exact for the choice of the best row.
        """
        first = np.flatnonzero(scores >= scores.max())
        self._charge(demand, rows, terms, scores, first)
        best = scores[first].max()
        uncharged = np.ones(rows.size, np.bool_)
        uncharged[first] = False
        rest = np.flatnonzero(uncharged & (scores >= best))
        if rest.size:
            self._charge(demand, rows, terms, scores, rest)

    def _charge(
        self,
        demand: Demand,
        rows: IntArray,
        terms: _RowTerms,
        scores: FloatArray,
        candidates: IntArray,
    ) -> None:
        """Subtract the slot losses of placing on ``rows[candidates]`` from their scores."""
        table = self.table
        chosen = rows[candidates]
        if demand.shared:
            used = np.stack(
                [terms.partial_free[chosen], np.full(chosen.size, MILLI_PER_GPU)], axis=1
            )
            lost = self._share_slot_loss(demand, chosen, used)
            least = np.minimum(terms.waste[chosen], terms.fresh_waste[chosen])
            waste = np.minimum(
                terms.waste[chosen] + lost[:, 0], terms.fresh_waste[chosen] + lost[:, 1]
            )
            scores[candidates] -= waste - least
        else:
            scores[candidates] -= self.reserve.loss(
                chosen,
                None,
                np.zeros(0, np.int64),
                demand.gpu_count,
                table.cpu_free[chosen] - demand.cpu_milli,
                table.mem_free[chosen] - demand.memory_mib,
            )

    def share_device(self, row: int, demand: Demand) -> int:
        """The device a share takes on ``row``: the cheapest by the same terms as the score."""
        rows = np.array([row], np.int64)
        cost = self._device_costs(demand, rows)
        if self.reserve.update_prices():
            cost = cost + self._share_slot_loss(demand, rows, self.table.gpu_free[rows])
        return int(np.argmin(cost[0]))

    def _share_slot_loss(self, demand: Demand, rows: IntArray, device_free: IntArray) -> FloatArray:
        """(rows, options): slot value lost taking the share from devices with that much free."""
        table = self.table
        return self.reserve.loss(
            rows,
            device_free,
            demand.milli_on(rows)[:, None],
            0,
            (table.cpu_free[rows] - demand.cpu_milli)[:, None],
            (table.mem_free[rows] - demand.memory_mib)[:, None],
        )

    # ------------------------------------------------------------------------- row terms
    def _row_terms(self, demand: Demand) -> _RowTerms:
        """The shape's cached terms, recomputed for the rows changed since they were made."""
        table = self.table
        key = (demand.signature, table.topology_version)
        terms = self._terms.get(key)
        if terms is None or terms.score.size != table.capacity:
            capacity = table.capacity
            terms = _RowTerms(
                np.zeros(capacity),
                np.zeros(capacity),
                np.zeros(capacity, np.int64),
                np.full(capacity, -np.inf),
            )
            self._terms[key] = terms
            if len(self._terms) > _CACHED_SHAPES:
                self._terms.popitem(last=False)
        else:
            self._terms.move_to_end(key)
        stale = terms.rows.stale_rows(table, demand.static_mask)
        if stale.size:
            self._compute_terms(demand, stale, terms)
        return terms

    def _compute_terms(self, demand: Demand, rows: IntArray, terms: _RowTerms) -> None:
        table = self.table
        free = table.gpu_free[rows]
        idle = free.sum(axis=1)
        cpu = table.cpu_free[rows]
        cpu_after = cpu - demand.cpu_milli
        tie: FloatArray | float = 0.0
        if demand.mig_count:
            terms.waste[rows] = 0.0
            terms.fresh_waste[rows] = np.inf
        elif demand.shared:
            share = demand.milli_on(rows)
            strand = self._strand(idle - share, cpu_after) - self._strand(idle, cpu)
            cost = self._device_costs(demand, rows)
            fresh = free == MILLI_PER_GPU
            partial_cost = np.where(fresh, np.inf, cost)
            best = partial_cost.argmin(axis=1)
            terms.waste[rows] = strand + partial_cost[np.arange(rows.size), best]
            terms.partial_free[rows] = free[np.arange(rows.size), best]
            terms.fresh_waste[rows] = strand + np.where(fresh, cost, np.inf).min(axis=1)
        elif demand.gpu_count:
            taken = demand.gpu_count * MILLI_PER_GPU
            terms.waste[rows] = self._strand(idle - taken, cpu_after) - self._strand(idle, cpu)
            terms.fresh_waste[rows] = np.inf
            tie = (table.full_free[rows] - demand.gpu_count).astype(np.float64)
        else:  # CPU-only: fewest idle GPUs, then the tightest CPU fit
            terms.waste[rows] = 0.0
            terms.fresh_waste[rows] = np.inf
            largest = max(int(table.cpu_cap[: table.size].max()), 1)
            tie = idle / MILLI_PER_GPU + 0.01 * cpu_after / largest
        least = np.minimum(terms.waste[rows], terms.fresh_waste[rows])
        rarity = self.rarity()[rows]
        terms.score[rows] = -(least + tie * CONSOLIDATION_WEIGHT + rarity * RARITY_WEIGHT)

    def _device_costs(self, demand: Demand, rows: IntArray) -> FloatArray:
        """(rows, devices): gap-waste change of putting the share there; inf if it misses."""
        free = self.table.gpu_free[rows]
        share = demand.milli_on(rows)[:, None]
        fits = (free >= share) & (share > 0)
        left = np.where(fits, free - share, 0)
        waste = self.gap_waste
        return np.where(fits, waste[left] - waste[np.clip(free, 0, MILLI_PER_GPU)], np.inf)

    def _strand(self, idle: IntArray, cpu_free: IntArray) -> FloatArray:
        """Idle milli-GPU a node cannot use for lack of CPU (0 without a CPU estimate)."""
        if self.cpu_per_milli <= 0:
            return np.zeros(np.shape(idle))
        usable = np.maximum(cpu_free, 0) / self.cpu_per_milli
        result: FloatArray = np.maximum(0.0, idle - usable)
        return result

    def rarity(self) -> FloatArray:
        """Per row: 1 / (nodes with at least its CPU, GPUs and memory); 1 for a unique node."""
        table = self.table
        if self._rarity_topology != table.topology_version or self._rarity.size != table.capacity:
            n = table.size
            kinds = np.stack([table.cpu_cap[:n], table.gpu_count[:n], table.mem_cap[:n]], axis=1)
            alive = table.alive[:n]
            unique, inverse, counts = np.unique(
                kinds[alive], axis=0, return_inverse=True, return_counts=True
            )
            covers = np.all(unique[None, :, :] >= unique[:, None, :], axis=2)  # [i, j]
            larger = covers.astype(np.int64) @ counts
            rarity = np.ones(table.capacity)
            rarity[np.flatnonzero(alive)] = 1.0 / larger[inverse.reshape(-1)]
            self._rarity = rarity
            self._rarity_topology = table.topology_version
        return self._rarity


class DefaultDevices:
    """Shares: the device the score chose; whole GPUs: the first free ones; MIG: best fit."""

    def __init__(self, scorer: DefaultScore) -> None:
        self.scorer = scorer
        self.fallback = BestFitDevices()

    def choose(self, table: NodeTable, row: int, demand: Demand) -> DeviceChoice:
        if demand.shared and not demand.mig_count:
            return DeviceChoice((self.scorer.share_device(row, demand),))
        if demand.gpu_count and not demand.mig_count:
            return DeviceChoice(first_free_devices(table, row, demand.gpu_count))
        return self.fallback.choose(table, row, demand)


def _cpu_per_gpu_milli(target: TargetWorkload) -> float:
    """Mean CPU (milli) that the target's GPU pods ask per milli-GPU; 0 if it has none."""
    cpu = 0.0
    gpu = 0.0
    for shape, p in zip(target.shapes, target.probabilities, strict=True):
        if shape.gpu_count:
            cpu += p * shape.cpu_milli
            gpu += p * shape.gpu_count * shape.gpu_milli
    return cpu / gpu if gpu > 0 else 0.0


def cpu_pressure(table: NodeTable, target: TargetWorkload) -> float:
    """CPU per milli-GPU the expected workload asks, over what the cluster has (0: no GPUs)."""
    n = table.size
    alive = table.alive[:n]
    gpu = int(table.gpu_count[:n][alive].sum()) * MILLI_PER_GPU
    wanted_gpu = sum(
        p * s.gpu_count * s.gpu_milli
        for s, p in zip(target.shapes, target.probabilities, strict=True)
    )
    if gpu == 0 or wanted_gpu <= 0:
        return 0.0
    wanted_cpu = sum(
        p * s.cpu_milli for s, p in zip(target.shapes, target.probabilities, strict=True)
    )
    have = int(table.cpu_cap[:n][alive].sum()) / gpu
    return (wanted_cpu / wanted_gpu) / have if have > 0 else float("inf")


def default_policy(table: NodeTable, target: TargetWorkload) -> Policy:
    if cpu_pressure(table, target) > CPU_BOUND_PRESSURE:
        policy = fgd_policy(FragmentationModel(table, target))
        policy.name = "default"
        policy.description = "CPU-bound workload: fragmentation gradient descent"
        return policy
    scorer = DefaultScore(table, target)
    return Policy(
        "default",
        [(scorer, 1.0)],
        DefaultDevices(scorer),
        "least expected end-state waste: gap values, CPU stranding, multi-GPU slot prices",
        observers=(scorer,),
    )
