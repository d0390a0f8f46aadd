"""Lower bounds on what a pool's new nodes would cost for the pending work, without packing.

Owns :class:`PoolBound`: for one pool and the pending items it may take (eligible, and whose
units fit its nodes), grouped by the unit they make there (in packing order), how many pods
those are and the fewest new nodes that could hold them: the larger of the fluid bound (their
CPU, memory and milli-GPU over one node's, as if pods could be cut) and, per kind of unit, its
count over how many fit on one empty node; less the nodes already being provisioned. A pool's
cost is at least its price times that, so :mod:`.pool_choice` packs exactly (:mod:`.packing`)
only the pools that could still beat the best found. And, for a pool that runs into its
maximum, an estimate of the pods its headroom holds, kinds taken in packing order
(:meth:`PoolBound.pods_in_order`). A handful of numpy operations per pool and round.

What it does not do: pack, or choose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.elastic.node_columns import ShapeOnPool
from gpufleet.elastic.packing import Item, Kept, PoolPacker, UnitBook
from gpufleet.model.nodepools import NodePool
from gpufleet.scheduling.node_table import IntArray

FloatArray = npt.NDArray[np.float64]


class PoolBound:
    """See the module docstring. ``packer``: the pool's state before it adds nodes."""

    def __init__(
        self,
        packer: PoolPacker,
        items: Sequence[Item],
        eligible: Callable[[Item, NodePool], bool],
        kinds: IntArray | None = None,
        lone_shapes: IntArray | None = None,
    ) -> None:
        self.packer = packer
        pool = packer.node_pool
        empty = packer.columns.empty
        self.capacity = np.array([empty.cpu, empty.memory, int(empty.devices.sum())], np.float64)
        self.upcoming = packer.first_new
        if kinds is None or lone_shapes is None:
            kinds, lone_shapes = item_keys(items)
        ids = packer.unit_ids(items, kinds, lone_shapes)
        book = packer.cache.book
        allowed = np.fromiter((eligible(item, pool) for item in items), np.bool_, len(items))
        ids[~allowed] = -1
        # Kinds of unit numbered in the order of the items that make them (packing order).
        mine = np.flatnonzero(ids >= 0)
        distinct, first = np.unique(ids[mine], return_index=True)
        chosen = distinct[np.argsort(first, kind="stable")]
        renumber = np.empty(len(book.distinct), np.int64)
        renumber[chosen] = np.arange(chosen.size)
        group_of = np.full(len(items), -1, np.int64)
        group_of[mine] = renumber[ids[mine]]
        self.group_of = group_of
        #: Per kind of unit on this pool, in the order of the items: the unit and its items.
        self.units = [book.distinct[u] for u in chosen.tolist()]
        #: Their numbers in the book.
        self.unit_numbers = chosen
        by_kind = mine[np.argsort(group_of[mine], kind="stable")].tolist()
        ends = np.cumsum(np.bincount(group_of[mine], minlength=chosen.size)).tolist()
        self.members = [by_kind[start:end] for start, end in zip([0, *ends], ends, strict=False)]
        numbers = _numbers(book)[chosen]
        self.demand = numbers[:, :3]
        self.per_node = numbers[:, 3]
        self.pods = numbers[:, 4].astype(np.int64)

    def bound(self, left: IntArray) -> tuple[int, int]:
        """For ``left`` units of each item: the pods this pool may take, and the fewest new
        nodes that could hold them all."""
        if not self.pods.size:
            return 0, 0
        counts = self.counts(left)
        pods = int(counts @ self.pods)
        if not pods:
            return 0, 0
        with np.errstate(divide="ignore", invalid="ignore"):
            fluid = np.where(self.capacity > 0, (counts @ self.demand) / self.capacity, 0.0)
            kinds = np.where(self.per_node > 0, counts / self.per_node, 0.0)
        nodes = int(np.ceil(max(float(fluid.max()), float(kinds.max(initial=0.0))) - 1e-9))
        return pods, max(0, nodes - self.upcoming)

    def pods_in_order(self, left: IntArray, nodes: int) -> int:
        """About how many pods of ``left`` units ``nodes`` nodes hold when packed in the
        order of the kinds (largest first, as :mod:`.packing` packs them): kinds are taken in
        order while their fluid need (the most of CPU, memory and GPU over a node's) fits. An
        estimate, not a bound: packing may fit some smaller pods after the first that does
        not fit."""
        counts = self.counts(left)
        if not counts.any():
            return 0
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.where(
                self.capacity > 0,
                np.cumsum(counts[:, None] * self.demand, axis=0) / self.capacity,
                0.0,
            ).max(axis=1)
        pods = counts * self.pods
        full = int(np.searchsorted(need, nodes, side="right"))
        taken = int(pods[:full].sum())
        if full < counts.size:
            before = float(need[full - 1]) if full else 0.0
            share = (nodes - before) / max(float(need[full]) - before, 1e-9)
            taken += int(pods[full] * min(1.0, max(0.0, share)))
        return taken

    def counts(self, left: IntArray) -> IntArray:
        """Units left per kind of unit, from units left per item."""
        mine = self.group_of >= 0
        counts: IntArray = np.bincount(
            self.group_of[mine], weights=left[mine], minlength=self.pods.size
        ).astype(np.int64)
        return counts


def item_keys(items: Sequence[Item]) -> tuple[IntArray, IntArray]:
    """The :attr:`~.packing.Item.kind` and :attr:`~.packing.Item.lone_shape` of each item."""
    kinds = np.fromiter((item.kind for item in items), np.int64, len(items))
    lone_shapes = np.fromiter((item.lone_shape for item in items), np.int64, len(items))
    return kinds, lone_shapes


def _numbers(book: UnitBook) -> FloatArray:
    """Per distinct unit of the book: its CPU, memory and milli-GPU, how many fit on one empty
    node (0: not known cheaply) and its pods (worked out once per unit and kept)."""
    known = book.number_table.shape[0]
    if known < len(book.distinct):
        new = [
            _lone_numbers(unit.shapes[0][0])
            if unit.lone_pod and unit.way is Kept.ANYWHERE
            else (
                float(sum(s.cpu * n for s, n in unit.shapes)),
                float(sum(s.memory * n for s, n in unit.shapes)),
                float(sum(s.devices * s.milli * n for s, n in unit.shapes)),
                _units_per_node(unit.shapes, unit.way),
                float(sum(n for _, n in unit.shapes)),
            )
            for unit in book.distinct[known:]
        ]
        book.number_table = np.concatenate([book.number_table, np.array(new, np.float64)])
    return book.number_table


def _lone_numbers(shape: ShapeOnPool) -> tuple[float, float, float, float, float]:
    """:func:`_numbers` of a lone pod's unit."""
    return (
        float(shape.cpu), float(shape.memory), float(shape.devices * shape.milli),
        float(shape.per_empty_node), 1.0,
    )  # fmt: skip


def _units_per_node(shapes: Sequence[tuple[object, int]], way: Kept) -> float:
    """How many units fit on one empty node at most (0: not known cheaply)."""
    if len(shapes) != 1:
        return 0.0
    shape, pods = shapes[0]
    per_empty = getattr(shape, "per_empty_node", 0)
    if way is Kept.ONE_NODE:
        return float(per_empty // pods)
    return per_empty / pods


__all__ = ["PoolBound", "item_keys"]
