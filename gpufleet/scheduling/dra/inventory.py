"""What one node offers to DRA claims: its devices, the shared counters left, what is taken.

Owns :class:`NodeDevices` and :func:`node_devices`, which builds it from the ResourceSlices of
the cluster: a slice reaches a node by ``nodeName``, ``allNodes`` or a node selector on the
node's labels. A device allocated to a claim is taken (unless it allows multiple allocations),
and the counters a taken partitionable device consumes (a MIG device's memory and compute
slices) are subtracted from its counter set. Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

from gpufleet.model.dra import Device, DeviceId, ResourceSlice
from gpufleet.model.selectors import NodeSelectorRequirement, NodeSelectorTerm

#: A counter set: (driver, pool, counter set name).
CounterKey = tuple[str, str, str]
Counters = Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """One node's devices (in id order) and their state."""

    devices: tuple[Device, ...]
    #: Every counter set the devices consume from: its counters in all.
    counter_totals: Mapping[CounterKey, Counters] = field(default_factory=dict)
    #: What is left of each counter set once the taken devices' consumption is subtracted.
    counters_left: Mapping[CounterKey, Counters] = field(default_factory=dict)
    #: Devices allocated to claims already (those that allow multiple allocations excluded).
    taken: frozenset[DeviceId] = frozenset()


@functools.lru_cache(maxsize=1 << 16)
def consumption(device: Device) -> Mapping[CounterKey, Counters]:
    """What ``device`` consumes, by counter set (worked out once per device; read only)."""
    used: dict[CounterKey, dict[str, Fraction]] = {}
    for consumed in device.consumes_counters:
        key = (device.driver, device.pool, consumed.counter_set)
        into = used.setdefault(key, {})
        for name, amount in consumed.counters:
            into[name] = into.get(name, Fraction(0)) + amount
    return MappingProxyType({key: MappingProxyType(c) for key, c in used.items()})


def node_devices(
    slices: Iterable[ResourceSlice],
    node: str,
    labels: Mapping[str, str] | None = None,
    allocated: Iterable[DeviceId] = (),
) -> NodeDevices:
    """The devices of the slices that reach ``node`` (with ``labels``), ``allocated`` taken:
    the devices claims hold, less those held with admin access (which leaves a device free
    for others, as Kubernetes counts it)."""
    devices: dict[DeviceId, Device] = {}
    totals: dict[CounterKey, dict[str, Fraction]] = {}
    for resource_slice in slices:
        if not reaches(resource_slice, node, labels or {}):
            continue
        for counter_set in resource_slice.shared_counters:
            key = (resource_slice.driver, resource_slice.pool, counter_set.name)
            totals[key] = dict(counter_set.counters)
        for device in resource_slice.devices:
            devices.setdefault(device.id, device)
    left = {key: dict(counters) for key, counters in totals.items()}
    taken: set[DeviceId] = set()
    for device_id in allocated:
        held = devices.get(device_id)
        if held is None or held.shareable or device_id in taken:
            continue
        taken.add(device_id)
        for key, used in consumption(held).items():
            if key in left:
                for name, amount in used.items():
                    left[key][name] = left[key].get(name, Fraction(0)) - amount
    ordered = tuple(devices[key] for key in sorted(devices))
    return NodeDevices(ordered, totals, left, frozenset(taken))


def reaches(resource_slice: ResourceSlice, node: str, labels: Mapping[str, str]) -> bool:
    """Whether ``resource_slice``'s devices can be used on ``node``."""
    if resource_slice.all_nodes:
        return True
    if resource_slice.node_name is not None:
        return resource_slice.node_name == node
    return any(_term_matches(term, labels) for term in resource_slice.node_selector)


def _term_matches(term: NodeSelectorTerm, labels: Mapping[str, str]) -> bool:
    return all(_requirement_matches(r, labels) for r in term.match_expressions)


def _requirement_matches(requirement: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(requirement.key)
    operator, values = requirement.operator, requirement.values
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None or not value.lstrip("-").isdigit():
        return False
    return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])


def fits(
    used: Mapping[CounterKey, Mapping[str, Fraction]], left: Mapping[CounterKey, Counters]
) -> bool:
    """Whether consumption ``used`` fits in the counters ``left`` (a set not listed: no)."""
    for key, counters in used.items():
        remaining = left.get(key)
        if remaining is None:
            return False
        for name, amount in counters.items():
            if amount > remaining.get(name, Fraction(0)):
                return False
    return True
