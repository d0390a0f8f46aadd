"""Which pools grow, and by how much, for the pending work left once upcoming nodes took theirs.

Owns the rule between pools (:func:`choose`). A pool's offer is what it packs of the pending set
on its own new nodes (:mod:`.packing`); then:

1. the cheapest pool that fits the whole pending set (price per hour of the nodes it adds;
   ties to the one that leaves the least GPU, then CPU, unused: Cluster Autoscaler's
   ``least-waste``) is the answer, as the issue asks and as Karpenter launches the cheapest
   instance type that fits;
2. unless a mix of pools holds the whole set for less, or no single pool holds it all: then
   pools are taken one after the other by the lowest price per pending pod placed (Cluster
   Autoscaler's ``price`` expander ranks by node price over the price of the pods placed; a
   pod counts one here), each packing what it can of what is left, until nothing more can be
   placed (a pool is left only once nothing that is left fits it; when pools run into their
   maximum, which pool took what first can matter, and the greedy order is not searched
   further). When a single pool fits all, the mix is taken only when it costs strictly less.

Packing every pool for every step would cost pools x steps packings; instead each pool has a
lower bound on its cost (:class:`~.pool_bounds.PoolBound`, a few numpy operations). Step 1
packs pools in the order of their least possible cost and stops once that exceeds the best
cost found: exactly the cheapest. Step 2 is lazy: a pool is packed when it comes first by its
key and taken when, packed against what is left now, it still comes first. A key is the least
price per pod the bound allows when the pool may take all it fits, else (it runs into its
maximum) an estimate of the pods its headroom holds in packing order; once packed, its price
per pod then, until it comes first again. Keys that are estimates, or from before other pools
took work, make the order of step 2 approximate: on the benchmark's 20 pools it packs about
one pool and a half per step, where packing every pool every step would pack 20, 19, ...

Why not "the pool that fits the most" for step 2 (CA's ``most-pods``): it hands a pending set of
spot-tolerant gangs and a few pods that do not tolerate spot to the on-demand pool, the only one
that fits them all, at several times the cost of spot nodes for the gangs and one on-demand node
for the rest; fault-tolerant work is meant to prefer spot.

What it does not do: pack (:mod:`.packing`) or report why work waits (:mod:`.nodepools`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.elastic.packing import Item, Kept, PoolPacker
from gpufleet.elastic.pool_bounds import PoolBound, item_keys
from gpufleet.model.nodepools import NodePool
from gpufleet.scheduling.node_table import IntArray

#: May ``pool`` take ``item`` (critical work is kept off spot pools)?
Eligible = Callable[[Item, NodePool], bool]


@dataclass(slots=True)
class Step:
    """A pool that grows: its packer after packing, what it placed (item index -> units) and
    why, in words."""

    packer: PoolPacker
    placed: dict[int, int]
    pods: int
    cost: float
    waste: tuple[int, int]
    reason: str = ""
    #: Per kind of unit of the pool's bound: units wanted, and placed.
    wanted: list[int] = field(default_factory=list)
    took: list[int] = field(default_factory=list)

    @property
    def pool(self) -> NodePool:
        return self.packer.node_pool


def choose(
    packers: Sequence[PoolPacker],
    items: Sequence[Item],
    served: Sequence[int],
    eligible: Eligible,
) -> list[Step]:
    """The pools that grow (see the module docstring), from ``packers`` (each pool's state
    with what upcoming nodes hold), for the units of ``items`` beyond ``served``."""
    left = np.array([item.count - served[i] for i, item in enumerate(items)], np.int64)
    pods_per_unit = np.array([item.pods_per_unit for item in items], np.int64)
    pending = int(left @ pods_per_unit) if items else 0
    if not pending or not packers:
        return []
    kinds, lone_shapes = item_keys(items)
    bounds = [PoolBound(packer, items, eligible, kinds, lone_shapes) for packer in packers]
    first: dict[int, Step] = {}

    def exact(k: int) -> Step:
        if k not in first:
            first[k] = _trial(bounds[k], items, left)
        return first[k]

    # The cheapest pool that fits it all: packed in the order of their least possible cost,
    # until that least cost is above the best exact one found.
    whole: list[Step] = []
    candidates = []
    for k, bound in enumerate(bounds):
        pods, nodes = bound.bound(left)
        if pods == pending and nodes <= packers[k].headroom:
            candidates.append((nodes * packers[k].node_pool.hourly_price, k))
    for least, k in sorted(candidates):
        if whole and least > min(t.cost for t in whole):
            break
        trial = exact(k)
        if trial.pods == pending:
            whole.append(trial)
    single = min(whole, key=_cheapest, default=None)
    mix = _greedy(packers, bounds, first, items, list(served))
    mix_cost = sum(step.cost for step in mix)
    mix_pods = sum(step.pods for step in mix)
    if single is not None and (mix_pods < pending or single.cost <= mix_cost):
        # The next cheapest: packed if it was, else what its bound says it costs at least.
        # ``k`` is a position among the growing pools (``packers``); a packer's ``pool`` is
        # the pool's index among all pools: the two are compared as pools, never as numbers.
        others = [
            (first[k].cost if k in first else least, k in first, packers[k].node_pool.name)
            for least, k in candidates
            if packers[k].pool != single.packer.pool
            and (k not in first or first[k].pods == pending)
        ]
        single.reason = _single_reason(single, min(others, default=None))
        return [single]
    for step in mix:
        step.reason = _mix_reason(step, pending, mix_pods, mix_cost, single)
    return mix


def _trial(bound: PoolBound, items: Sequence[Item], left: IntArray) -> Step:
    """The pool of ``bound`` packing the ``left`` units of each item: items whose units take
    the same there pack as one (what differs between them, such as a spot toleration, does
    not matter once the pool is eligible), the units placed going to the items in order."""
    packer = bound.packer.copy()
    wanted = bound.counts(left).tolist()
    took = [0] * len(wanted)
    for k, count in enumerate(wanted):
        if not count:
            continue
        if not packer.headroom:
            # No node can be added any more: the kinds left that fit on none of the planned
            # nodes would place nothing, so only the others are tried (in order, as before).
            maybe = np.flatnonzero(packer.might_take(bound.unit_numbers[k:])) + k
            for j in maybe.tolist():
                if wanted[j]:
                    took[j] = packer.place_unit(bound.units[j], wanted[j])
            break
        took[k] = packer.place_unit(bound.units[k], count)
    cost = packer.added_count() * packer.node_pool.hourly_price
    step = Step(packer, {}, 0, cost, packer.waste(), wanted=wanted, took=took)
    _share(step, bound, items, left)
    return step


def _share(step: Step, bound: PoolBound, items: Sequence[Item], left: IntArray) -> None:
    """Give the units each kind placed to its items, in order."""
    placed: dict[int, int] = {}
    pods = 0
    for members, count in zip(bound.members, step.took, strict=True):
        for i in members:
            if count <= 0:
                break
            share = min(count, int(left[i]))
            if share:
                placed[i] = share
                pods += share * items[i].pods_per_unit
                count -= share
    step.placed, step.pods = placed, pods


def _still(step: Step, bound: PoolBound, items: Sequence[Item], left: IntArray) -> Step | None:
    """``step`` as it stands against ``left`` when packing that would end the same: every
    kind still wants what it did, or placed fewer than it wanted (it ran out of room) and
    still wants at least as many as it placed (so it places them again, the same way).
    None when packing again could differ."""
    wanted = bound.counts(left).tolist()
    for unit, old, new, took in zip(bound.units, step.wanted, wanted, step.took, strict=True):
        if new == old:
            continue
        if took < old and new >= took and (unit.way is not Kept.ONE_NODE or len(unit.shapes) == 1):
            continue
        return None
    again = Step(step.packer, {}, 0, step.cost, step.waste, wanted=wanted, took=step.took)
    _share(again, bound, items, left)
    return again if again.pods else None


def _cheapest(step: Step) -> tuple[float, int, int, int]:
    return (step.cost, *step.waste, step.packer.pool)


def _per_pod(step: Step) -> tuple[float, ...]:
    return (step.cost / step.pods, step.cost, *step.waste, step.packer.pool)


def _greedy(
    packers: Sequence[PoolPacker],
    bounds: Sequence[PoolBound],
    first: dict[int, Step],
    items: Sequence[Item],
    served: list[int],
) -> list[Step]:
    """Pools by the lowest price per pod, each packing what it can of what is left, lazily
    (see the module docstring); a pool's offer from before others took work is used again
    when packing again would end the same (:func:`_still`)."""
    left = np.array([item.count - served[i] for i, item in enumerate(items)], np.int64)
    version = 0
    trials: dict[int, tuple[int, Step]] = {k: (0, step) for k, step in first.items()}
    heap: list[tuple[tuple[float, ...], int, int]] = []
    for k, bound in enumerate(bounds):
        if k in first:
            if first[k].pods:
                heapq.heappush(heap, (_per_pod(first[k]), k, 0))
            continue
        pods, nodes = bound.bound(left)
        headroom = packers[k].headroom
        if pods and (headroom or bound.upcoming):
            if nodes > headroom:  # it fills its headroom: about this many pods, in order
                pods = min(pods, bound.pods_in_order(left, headroom + bound.upcoming))
            least = min(nodes, headroom) * packers[k].node_pool.hourly_price / max(pods, 1)
            heapq.heappush(heap, ((least, 0.0, 0, 0, k), k, -1))
    steps: list[Step] = []
    while heap:
        _, k, seen = heapq.heappop(heap)
        if seen == version:
            step = trials[k][1]
            steps.append(step)
            for i, count in step.placed.items():
                served[i] += count
                left[i] -= count
            version += 1
            if not left.any():
                break
            continue
        kept = _still(trials[k][1], bounds[k], items, left) if k in trials else None
        step = kept if kept is not None else _trial(bounds[k], items, left)
        trials[k] = (version, step)
        if step.pods:
            heapq.heappush(heap, (_per_pod(step), k, version))
    return steps


def _price(step: Step) -> str:
    nodes = step.packer.added_count()
    return f"${step.cost:,.2f}/h for {nodes} node(s) ({step.pool.price_source})"


def _single_reason(step: Step, runner_up: tuple[float, bool, str] | None) -> str:
    text = (
        f"for {step.pods} pending pod(s) of {sum(step.placed.values())} workload(s): the "
        f"cheapest pool that fits them all: {_price(step)}"
    )
    if runner_up is not None:
        cost, packed, name = runner_up
        text += f"; next {name} at ${cost:,.2f}/h" + ("" if packed else " or more")
    return text


def _mix_reason(
    step: Step, pending: int, mix_pods: int, mix_cost: float, single: Step | None
) -> str:
    if single is not None:
        why = (
            f"pools together hold all {pending} pending pods for ${mix_cost:,.2f}/h, less "
            f"than the cheapest single pool that fits them all ({single.pool.name}, "
            f"${single.cost:,.2f}/h)"
        )
    elif mix_pods == pending:
        why = f"no single pool fits all {pending} pending pods; pools together hold them"
    else:
        why = (
            f"no pool fits {pending - mix_pods} of the {pending} pending pods now; pools "
            f"together hold {mix_pods}"
        )
    per_pod = step.cost / step.pods
    return (
        f"for {step.pods} pending pod(s) of {sum(step.placed.values())} workload(s): {why}; "
        f"this pool at the lowest price per pod (${per_pod:,.2f}): {_price(step)}"
    )


__all__ = ["Eligible", "Step", "choose"]
