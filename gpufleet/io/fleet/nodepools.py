"""``kind: NodePool`` objects read into :class:`~gpufleet.model.nodepools.NodePool`.

Owns the format (pydantic, ``extra="forbid"``)::

    apiVersion: gpufleet.dev/v1alpha1
    kind: NodePool
    metadata: {name: h100-spot}
    spec:
      capacityType: spot            # on-demand (the default), spot or reserved
      minNodes: 0                   # the default; 0 lets the pool scale to zero
      maxNodes: 16
      zones: [us-east-1a, us-east-1b]   # nodes spread over them (none: no zone label)
      provisioningDelay: 4m         # from asking for a node to its joining (default 0)
      price: {perNodeHour: 40.0}    # or {perGpuHour: 5.0}; absent: from the price list
      spotTaint: true               # a spot pool taints its nodes (the default)
      capacityOutages:              # when the cloud has no capacity for the pool
      - {start: 2h, duration: 30m}  # from the run's start; in order, not overlapping
      node:                         # the shape of every node: a ClusterSpec pool's fields
        cpu: 192
        memory: 2048Gi
        gpu: {model: NVIDIA-H100-80GB-HBM3, count: 8, memory: 80Gi}
        labels: {team: research}
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]

``spec.node`` takes what a pool of a ``ClusterSpec`` takes for its nodes (``cpu``, ``memory``,
``gpu``, ``mig``, ``devicePlugin``, ``hami``, ``extendedResources``, ``labels``, ``taints``)
and is read by :mod:`gpufleet.io.fleet.cluster_spec` itself, so a node of a pool is what the same
lines make in a cluster spec; the fields that place nodes (``count``, ``namePrefix``,
``topology``, ``unschedulable``) belong to the pool, not here.

Price: a pool's own price, per node-hour or per GPU-hour (a GPU-hour price is taken as the
whole node's price divided by its GPUs, as instance prices are quoted), or else the price
list's (:func:`~gpufleet.economics.node_prices.node_rate`: its GPUs, vCPUs and memory on the
pool's capacity type). A pool that names no price of its own and whose GPU model the list does
not price is an error naming ``spec.node.gpu.model``; one whose model the list prices but not
on its capacity type (with no estimate) is an error naming ``spec.price``.

Capacity outages: in each window (``start`` from the run's start, for ``duration``; both
durations, the duration above 0) a request for the pool's nodes fails at once for want of
capacity, as a cloud's insufficient-capacity error (what the simulated autoscaler does then:
:mod:`gpufleet.backends.sim.node_pools`). Windows are listed in order and do not overlap.

Errors name the file, the document, the pool and the field (``spec.maxNodes``,
``spec.node.gpu.count``); two pools of one name are an error naming the second
(:class:`NodePoolSet`, which a scenario's reader uses too: a scenario's pools are these).
It decides nothing about scaling.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpufleet.economics.node_prices import node_rate
from gpufleet.economics.prices import MissingPriceError, PriceList
from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fields import check_object_fields, unknown_field
from gpufleet.io.fleet.cluster_spec import cluster_spec_from_dict
from gpufleet.io.fleet.prices import Price, default_prices
from gpufleet.io.manifests import Context, manifests_of_kind, named_object
from gpufleet.io.names import label_value_problem
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.io.validation import validation_error
from gpufleet.model.capacity import CapacityType
from gpufleet.model.node import Node
from gpufleet.model.nodepools import CapacityOutage, NodePool

KIND = "NodePool"
API_VERSIONS = ("gpufleet.dev/v1alpha1",)
SPEC_FIELDS = (
    "capacityType", "minNodes", "maxNodes", "zones", "provisioningDelay", "price", "spotTaint",
    "capacityOutages", "node",
)  # fmt: skip
#: What an entry of ``spec.capacityOutages`` takes.
OUTAGE_FIELDS = ("start", "duration")
#: What ``spec.node`` takes: a ClusterSpec pool's fields that shape its nodes.
NODE_FIELDS = (
    "cpu", "memory", "gpu", "mig", "devicePlugin", "hami", "extendedResources", "labels",
    "taints",
)  # fmt: skip
#: A ClusterSpec pool's fields that place nodes, which a node pool decides itself.
_POOL_ONLY = {
    "count": "a node pool's size is spec.minNodes to spec.maxNodes",
    "namePrefix": "a node pool names its nodes after itself",
    "topology": "a node pool's nodes take their zone from spec.zones",
    "unschedulable": "a node pool's nodes join schedulable",
    "name": "the pool's name is metadata.name",
}
#: The longest pool name whose nodes' names (``<pool>-00000``) stay valid label values.
MAX_POOL_NAME = 57


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class PriceSpec(_Strict):
    """A pool's own price: per node-hour or per GPU-hour, one of them."""

    per_node_hour: Price | None = Field(default=None, alias="perNodeHour")
    per_gpu_hour: Price | None = Field(default=None, alias="perGpuHour")

    @model_validator(mode="after")
    def _one(self) -> PriceSpec:
        if (self.per_node_hour is None) == (self.per_gpu_hour is None):
            raise ValueError("give one of perNodeHour and perGpuHour")
        return self


class OutageSpec(_Strict):
    """One capacity outage: from ``start`` (after the run's start) for ``duration``."""

    start: float
    duration: float

    @model_validator(mode="before")
    @classmethod
    def _known(cls, value: object) -> object:
        # An unknown field is named (with a did-you-mean) before the missing one it may be.
        if isinstance(value, Mapping):
            for key in value:
                if key not in OUTAGE_FIELDS:
                    raise ValueError(
                        f"{quoted(str(key))}: {unknown_field(str(key), OUTAGE_FIELDS)}"
                    )
        return value

    @field_validator("start", "duration", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        return parse_duration_seconds(value)

    @field_validator("duration")
    @classmethod
    def _lasts(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("an outage lasts more than 0s")
        return value


class NodePoolSpec(_Strict):
    """``spec`` of a NodePool, but ``node`` (read as a ClusterSpec pool)."""

    capacity_type: CapacityType = Field(default=CapacityType.ON_DEMAND, alias="capacityType")
    min_nodes: int = Field(default=0, ge=0, le=100_000, alias="minNodes")
    max_nodes: int = Field(ge=0, le=100_000, alias="maxNodes")
    zones: list[str] = Field(default_factory=list, max_length=64)
    provisioning_delay: float = Field(default=0.0, alias="provisioningDelay")
    price: PriceSpec | None = None
    spot_taint: bool = Field(default=True, alias="spotTaint")
    capacity_outages: list[OutageSpec] = Field(
        default_factory=list, max_length=10_000, alias="capacityOutages"
    )
    node: dict[str, Any]

    @field_validator("capacity_outages")
    @classmethod
    def _in_order(cls, outages: list[OutageSpec]) -> list[OutageSpec]:
        for i, (before, after) in enumerate(itertools.pairwise(outages)):
            if after.start < before.start + before.duration:
                raise ValueError(
                    f"outage {i + 1} starts at {after.start:g}s, before outage {i} ends at "
                    f"{before.start + before.duration:g}s: list them in order, not overlapping"
                )
        return outages

    @field_validator("provisioning_delay", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        return parse_duration_seconds(value)

    @field_validator("zones")
    @classmethod
    def _zones(cls, zones: list[str]) -> list[str]:
        for zone in zones:
            problem = label_value_problem(zone) if zone else "must not be empty"
            if problem is not None:
                raise ValueError(f"a zone is a label value: it {problem}; got {quoted(zone)}")
        repeated = sorted({z for z in zones if zones.count(z) > 1})
        if repeated:
            raise ValueError(f"zone(s) {', '.join(repeated)} listed more than once")
        return zones


def node_pool_from_object(
    obj: Mapping[str, Any],
    source: str,
    location: str | None = None,
    prices: PriceList | None = None,
) -> NodePool:
    """One NodePool object (see the module docstring); ``prices`` prices a pool that states
    no price of its own (default: the list gpufleet ships)."""
    context, name, _ = named_object(obj, source, location, KIND, API_VERSIONS, namespaced=False)
    if len(name) > MAX_POOL_NAME or "." in name:
        raise context.error(
            "metadata.name",
            f"a node pool's name is a DNS label of at most {MAX_POOL_NAME} characters (its "
            f"nodes are named after it); got {quoted(name)}",
        )
    check_object_fields(context, obj, SPEC_FIELDS)
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    try:
        parsed = NodePoolSpec.model_validate(spec)
    except ValidationError as error:
        found = validation_error(error, spec, source, context.location, NodePoolSpec)
        field = "spec" if found.field is None else f"spec.{found.field}"
        raise InputError(found.source, found.reason, context.location, field) from None
    if parsed.max_nodes < parsed.min_nodes:
        raise context.error(
            "spec.maxNodes",
            f"{parsed.max_nodes} is less than spec.minNodes {parsed.min_nodes}: the pool could "
            "never be within its bounds",
        )
    template = _template(context, name, parsed.node)
    hourly, price_source = _price(context, template, parsed, prices)
    return NodePool(
        name=name,
        template=template,
        capacity=parsed.capacity_type,
        hourly_price=hourly,
        max_nodes=parsed.max_nodes,
        min_nodes=parsed.min_nodes,
        zones=tuple(parsed.zones),
        provisioning_delay=parsed.provisioning_delay,
        spot_taint=parsed.spot_taint,
        price_source=price_source,
        outages=tuple(CapacityOutage(o.start, o.duration) for o in parsed.capacity_outages),
    )


def _template(context: Context, name: str, node: Mapping[str, Any]) -> Node:
    """The pool's node shape, read as the one node of a ClusterSpec pool (its errors moved
    to ``spec.node``)."""
    for key in node:
        if key in _POOL_ONLY:
            raise context.error(f"spec.node.{key}", f"not a node's field: {_POOL_ONLY[key]}")
        if key not in NODE_FIELDS:
            raise context.error(f"spec.node.{key}", unknown_field(key, NODE_FIELDS))
    cluster = {
        "apiVersion": API_VERSIONS[0],
        "kind": "ClusterSpec",
        "metadata": {"name": name},
        "spec": {"pools": [{**node, "name": name, "count": 1}]},
    }
    try:
        (template,) = cluster_spec_from_dict(cluster, context.source)
    except InputError as error:
        field = error.field or ""
        inner = field.removeprefix("spec.pools[0]").lstrip(".")
        where = "spec.node" if not inner else f"spec.node.{inner}"
        raise context.error(where, error.reason) from None
    return replace(template, name=name)


def _price(
    context: Context, template: Node, spec: NodePoolSpec, prices: PriceList | None
) -> tuple[float, str]:
    """The pool's price per node-hour, and where it comes from."""
    own = spec.price
    if own is not None:
        if own.per_node_hour is not None:
            return own.per_node_hour, "the pool's own price per node-hour"
        assert own.per_gpu_hour is not None
        if not template.gpus:
            raise context.error("spec.price.perGpuHour", "the pool's nodes have no GPUs")
        return own.per_gpu_hour * template.gpu_count, "the pool's own price per GPU-hour"
    price_list = prices if prices is not None else default_prices()
    listed = f"price list {price_list.name!r}" if price_list.name else "the price list"
    model = template.gpu_model
    if model is not None:
        try:
            price_list.gpu_price(model)
        except MissingPriceError:
            priced = ", ".join(p.model for p in price_list.gpus) or "none"
            raise context.error(
                "spec.node.gpu.model",
                f"GPU model {quoted(model)} is not in {listed} (priced: {priced}); give the "
                "pool's own spec.price",
            ) from None
    try:
        rate = node_rate(template, spec.capacity_type, price_list)
    except MissingPriceError as error:
        raise context.error(
            "spec.price",
            f"no price: the pool gives none and {listed} cannot price a "
            f"{spec.capacity_type.value} node ({error}); give spec.price",
        ) from None
    how = "estimated from " if rate.estimated else ""
    return rate.hourly, f"{how}{listed}, {spec.capacity_type.value}"


class NodePoolSet:
    """NodePools read one object at a time, each name once: what :func:`read_node_pools` and
    a scenario's reader (:func:`gpufleet.io.readers.read_scenario`) collect. ``prices``
    prices pools that give no price of their own (default: the list gpufleet ships)."""

    def __init__(self, prices: PriceList | None = None) -> None:
        self.prices = prices  # None: the shipped list, read only if a pool needs it
        self.pools: list[NodePool] = []
        self._seen: dict[str, str] = {}

    def add(self, manifest: Mapping[str, Any], source: str, location: str | None) -> NodePool:
        """Read one NodePool object (an InputError naming the file, the pool and the field)."""
        pool = node_pool_from_object(manifest, source, location, self.prices)
        if pool.name in self._seen:
            first = self._seen[pool.name]
            raise InputError(
                source,
                f"a second {KIND} named {quoted(pool.name)}; the first is at {first}",
                location,
                "metadata.name",
            )
        self._seen[pool.name] = f"{source}:{location}"
        self.pools.append(pool)
        return pool


def read_node_pools(path: str | Path, prices: PriceList | None = None) -> list[NodePool]:
    """Every NodePool of a file or of a directory's ``*.yaml`` files, in order; another
    kind, or two pools of one name, is an error. ``prices`` prices pools that give no price
    of their own (default: the list gpufleet ships)."""
    pools = NodePoolSet(prices)
    for manifest, source in manifests_of_kind(path, KIND, API_VERSIONS[0]):
        pools.add(manifest, source, manifest.location)
    return pools.pools


__all__ = ["API_VERSIONS", "KIND", "NodePoolSet", "node_pool_from_object", "read_node_pools"]
