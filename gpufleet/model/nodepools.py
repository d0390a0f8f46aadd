"""Node pools: groups of identical nodes an autoscaler may add and remove (``kind: NodePool``).

Owns :class:`NodePool`, plain data: the shape of its nodes (a template :class:`Node`: CPU,
memory, GPUs with their model, memory and MIG layout, how the device plugin shares them,
extended resources, the pool's own labels and taints), how they are bought (on-demand, spot,
reserved) and what one costs an hour, how many the pool may have (``min_nodes`` to
``max_nodes``; 0 is allowed for both ends of an idle pool), the zones its nodes spread over and
how long one takes to join after it is asked for. And how a pool makes a node
(:meth:`NodePool.node`): the template under a name, with the labels every node of a pool
carries: hostname, zone (``topology.kubernetes.io/zone``), its own NVLink domain, the pool
(``gpufleet.dev/node-pool``, as Karpenter labels ``karpenter.sh/nodepool``), its capacity type
(``gpufleet.dev/capacity-type``), and on a spot pool the spot taint
(:data:`~gpufleet.model.capacity.SPOT_TAINT`) unless the pool says otherwise.

Capacity outages (:class:`CapacityOutage`): windows of the run's clock in which the cloud has
no capacity for the pool (spot capacity gone from a region, as happens for hours at a time): a
request for its nodes then fails at once, as a cloud's ``InsufficientInstanceCapacity`` (ICE)
error does (:meth:`NodePool.outage_at`). Nodes already there stay (losing them is a spot
interruption, :mod:`~gpufleet.model.node_faults`).

Zones: a new node goes to the zone with the fewest of the pool's nodes, ties to the first
listed (:meth:`NodePool.zones_for`), as Cluster Autoscaler's balancing of similar node groups
and Karpenter's zone spread keep zones even.

What it does not do: read files (:mod:`gpufleet.io.fleet.nodepools`), look prices up in a price
list (the reader does, through :mod:`gpufleet.economics.node_prices`), or decide when to add
or remove nodes (:mod:`gpufleet.elastic.nodepools`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from gpufleet.model.capacity import CAPACITY_TYPE_LABEL, SPOT_TAINT, CapacityType
from gpufleet.model.node import GFD_LABELS, Node, well_known_labels

#: The label that names a node's pool (Karpenter's is ``karpenter.sh/nodepool``).
NODE_POOL_LABEL = "gpufleet.dev/node-pool"


@dataclass(frozen=True, slots=True)
class CapacityOutage:
    """From ``start`` for ``duration`` seconds (the run's clock) the cloud has no capacity
    for the pool: a request for its nodes fails at once."""

    start: float
    duration: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and self.start >= 0):
            raise ValueError(f"a capacity outage starts at finite seconds of at least 0, got "
                             f"{self.start}")  # fmt: skip
        if not (math.isfinite(self.duration) and self.duration > 0):
            raise ValueError(f"a capacity outage lasts finite seconds above 0, got "
                             f"{self.duration}")  # fmt: skip

    @property
    def end(self) -> float:
        return self.start + self.duration

    def covers(self, now: float) -> bool:
        return self.start <= now < self.end


@dataclass(frozen=True, slots=True)
class NodePool:
    """See the module docstring. ``hourly_price`` is per node; ``price_source`` says where it
    came from (the pool itself, or a price list), for the reasons an autoscaler gives."""

    name: str
    template: Node
    capacity: CapacityType
    hourly_price: float
    max_nodes: int
    min_nodes: int = 0
    zones: tuple[str, ...] = ()
    #: Seconds from asking for a node to its joining the cluster.
    provisioning_delay: float = 0.0
    #: Whether a spot pool taints its nodes with the spot taint (ignored on other pools).
    spot_taint: bool = True
    price_source: str = ""
    #: Windows in which the cloud has no capacity for the pool, in order, not overlapping.
    outages: tuple[CapacityOutage, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a node pool needs a name")
        if self.min_nodes < 0 or self.max_nodes < 0:
            raise ValueError(
                f"node pool {self.name}: node counts must not be negative "
                f"(min {self.min_nodes}, max {self.max_nodes})"
            )
        if self.max_nodes < self.min_nodes:
            raise ValueError(
                f"node pool {self.name}: max nodes {self.max_nodes} is less than min nodes "
                f"{self.min_nodes}"
            )
        if not (math.isfinite(self.hourly_price) and self.hourly_price >= 0):
            raise ValueError(
                f"node pool {self.name}: the hourly price must be a finite number of at least "
                f"0, got {self.hourly_price}"
            )
        if not (math.isfinite(self.provisioning_delay) and self.provisioning_delay >= 0):
            raise ValueError(
                f"node pool {self.name}: the provisioning delay must be finite seconds of at "
                f"least 0, got {self.provisioning_delay}"
            )
        repeated = sorted({z for z in self.zones if self.zones.count(z) > 1})
        if repeated or any(not z for z in self.zones):
            raise ValueError(f"node pool {self.name}: zones must be distinct, non-empty names")
        for before, after in zip(self.outages, self.outages[1:], strict=False):
            if after.start < before.end:
                raise ValueError(
                    f"node pool {self.name}: capacity outages must be in order and not overlap "
                    f"(one at {after.start:g} s starts before the one before it ends, "
                    f"{before.end:g} s)"
                )

    def outage_at(self, now: float) -> CapacityOutage | None:
        """The capacity outage the pool is in at ``now`` (None: the cloud has capacity)."""
        for outage in self.outages:
            if outage.covers(now):
                return outage
        return None

    @property
    def gpu_model(self) -> str | None:
        """The model of the pool's GPUs (None: a CPU pool)."""
        return self.template.gpu_model

    @property
    def gpus_per_node(self) -> int:
        return self.template.gpu_count

    def node_name(self, index: int) -> str:
        """The name of the pool's ``index``-th node, as :meth:`node` would be asked for it (a
        world may name its nodes otherwise)."""
        return f"{self.name}-{index:05d}"

    def node(self, name: str, zone: str | None = None) -> Node:
        """A node of this pool named ``name``, in ``zone`` (None: the pool has no zones)."""
        if zone is not None and zone not in self.zones:
            known = ", ".join(self.zones) or "none"
            raise ValueError(f"node pool {self.name} has no zone {zone!r} (zones: {known})")
        if zone is None and self.zones:
            raise ValueError(f"node pool {self.name} spreads over zones: name one")
        labels = dict(self.template.labels)
        labels = {**well_known_labels(name, zone), **labels, GFD_LABELS.HOSTNAME: name}
        if zone is not None:
            labels[GFD_LABELS.ZONE] = zone
        labels[NODE_POOL_LABEL] = self.name
        labels[CAPACITY_TYPE_LABEL] = self.capacity.value
        if self.template.gpus:
            # Each node is its own NVLink domain, as a cluster spec's pool is by default.
            labels[GFD_LABELS.NVLINK_DOMAIN] = f"{name}-nvl"
        taints = self.template.taints
        if self.capacity is CapacityType.SPOT and self.spot_taint and SPOT_TAINT not in taints:
            taints = (*taints, SPOT_TAINT)
        return replace(self.template, name=name, labels=labels, taints=taints)

    def zones_for(
        self,
        count: int,
        existing: Mapping[str, int] | None = None,
        only: Collection[str] | None = None,
    ) -> list[str | None]:
        """The zones of ``count`` new nodes, given the pool's nodes per zone now (joined and
        asked for): each to the zone with the fewest, ties to the first listed; only to the
        zones ``only`` names, if given (work that may run in some zones only)."""
        if not self.zones:
            return [None] * count
        allowed = [z for z in self.zones if only is None or z in only]
        if not allowed and count:
            raise ValueError(f"node pool {self.name}: no zone of {sorted(only or ())} is its")
        have = {zone: (existing or {}).get(zone, 0) for zone in self.zones}
        chosen: list[str | None] = []
        for _ in range(count):
            zone = min(allowed, key=lambda z: have[z])
            have[zone] += 1
            chosen.append(zone)
        return chosen


__all__ = ["NODE_POOL_LABEL", "CapacityOutage", "NodePool"]
