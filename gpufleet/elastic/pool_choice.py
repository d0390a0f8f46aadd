"""Which pools grow, and by how much, for the pending work left once upcoming nodes took theirs.

Owns the rule between pools (:func:`choose`). Each pool packs the whole pending set on its own
new nodes (:mod:`.packing`); then:

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

Why not "the pool that fits the most" for step 2 (CA's ``most-pods``): it hands a pending set of
spot-tolerant gangs and a few pods that do not tolerate spot to the on-demand pool, the only one
that fits them all, at several times the cost of spot nodes for the gangs and one on-demand node
for the rest; fault-tolerant work is meant to prefer spot.

What it does not do: pack (:mod:`.packing`) or report why work waits (:mod:`.nodepools`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpufleet.elastic.packing import Item, PoolPacker
from gpufleet.model.nodepools import NodePool

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
    left = [(i, item) for i, item in enumerate(items) if served[i] < item.count]
    pending = sum((item.count - served[i]) * item.pods_per_unit for i, item in left)
    if not left or not packers:
        return []
    first = [_trial(p, left, served, eligible) for p in packers]
    whole = [t for t in first if t.pods == pending]
    single = min(whole, key=_cheapest, default=None)
    mix = _greedy(list(packers), first, items, list(served), eligible)
    mix_cost = sum(step.cost for step in mix)
    mix_pods = sum(step.pods for step in mix)
    if single is not None and (mix_pods < pending or single.cost <= mix_cost):
        others = sorted((t for t in whole if t is not single), key=_cheapest)
        single.reason = _single_reason(single, pending, others[0] if others else None)
        return [single]
    for step in mix:
        step.reason = _mix_reason(step, pending, mix_pods, mix_cost, single)
    return mix


def _trial(
    base: PoolPacker,
    left: Sequence[tuple[int, Item]],
    served: Sequence[int],
    eligible: Eligible,
) -> Step:
    packer = base.copy()
    pool = packer.node_pool
    placed: dict[int, int] = {}
    pods = 0
    for i, item in left:
        if not eligible(item, pool):
            continue
        count = packer.place(item, item.count - served[i])
        if count:
            placed[i] = count
            pods += count * item.pods_per_unit
    cost = packer.added_count() * pool.hourly_price
    return Step(packer, placed, pods, cost, packer.waste())


def _cheapest(step: Step) -> tuple[float, int, int, int]:
    return (step.cost, *step.waste, step.packer.pool)


def _per_pod(step: Step) -> tuple[float, float, int, int, int]:
    return (step.cost / step.pods, step.cost, *step.waste, step.packer.pool)


def _greedy(
    packers: list[PoolPacker],
    first: Sequence[Step],
    items: Sequence[Item],
    served: list[int],
    eligible: Eligible,
) -> list[Step]:
    steps: list[Step] = []
    trials = list(first)
    while True:
        useful = [t for t in trials if t.pods]
        if not useful:
            return steps
        best = min(useful, key=_per_pod)
        steps.append(best)
        for i, count in best.placed.items():
            served[i] += count
        packers = [p for p in packers if p.pool != best.packer.pool]
        left = [(i, item) for i, item in enumerate(items) if served[i] < item.count]
        if not left:
            return steps
        trials = [_trial(p, left, served, eligible) for p in packers]


def _price(step: Step) -> str:
    nodes = step.packer.added_count()
    return f"${step.cost:,.2f}/h for {nodes} node(s) ({step.pool.price_source})"


def _single_reason(step: Step, pending: int, runner_up: Step | None) -> str:
    text = (
        f"for {step.pods} pending pod(s) of {sum(step.placed.values())} workload(s): the "
        f"cheapest pool that fits them all: {_price(step)}"
    )
    if runner_up is not None:
        text += f"; next {runner_up.pool.name} at ${runner_up.cost:,.2f}/h"
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
