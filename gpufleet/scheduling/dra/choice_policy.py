"""Which of the feasible device choices for a pod's claims to take: the policy hook.

Owns :class:`ChoicePolicy` (a score of each complete choice, prepared once per node; the
allocator keeps the highest, the first found among equals, so ties go to the lowest device
names) and the default, :class:`MostCapacityLeft`. kube-scheduler takes the first devices that
fit, in name order, which breaks up what later requests need whole. The default rule keeps
usable capacity whole instead:

1. **Whole partitionable devices first**: the more counter sets (one per MIG-capable GPU)
   left untouched, the better. A MIG device is taken from a GPU already partitioned rather
   than from a whole one, which stays free for a whole-GPU request (that takes all of its
   GPU's counters, so it needs a GPU with nothing on it).
2. **Whole topology groups next**: the free devices left in each group (devices sharing a
   PCIe root, ``resource.kubernetes.io/pcieRoot``, by default; a pool's devices without the
   attribute are a group each; a tainted device is not free) are summed as squares, the more
   the better. Taking two GPUs from a group with two free leaves 4² = 16 for a group of four;
   taking them from the group of four leaves 2² + 2² = 8: the first keeps a whole group for a
   request that needs one.

Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from gpufleet.model.dra import PCIE_ROOT_ATTRIBUTE, Device, DeviceId, DeviceTaintEffect
from gpufleet.scheduling.dra.inventory import CounterKey, Counters, NodeDevices, consumption

_ZERO = Fraction(0)


#: Scores one complete choice: the devices chosen (a shared device once per use) and the
#: node's counters once the choice's are taken; higher is better.
Scorer = Callable[[Sequence[DeviceId], Mapping[CounterKey, Counters]], tuple[float, ...]]


class ChoicePolicy(Protocol):
    """Ranks the complete choices on one node: :meth:`scorer` is asked once per node and
    allocation (what depends on the node alone is worked out there), its scorer once per
    choice."""

    def scorer(self, node: NodeDevices) -> Scorer: ...


@dataclass(frozen=True, slots=True)
class MostCapacityLeft:
    """The default rule (module docstring): untouched counter sets, then free devices per
    topology group, squared."""

    group_attribute: str = PCIE_ROOT_ATTRIBUTE

    def scorer(self, node: NodeDevices) -> Scorer:
        sets_of = {
            device.id: frozenset(consumption(device))
            for device in node.devices
            if device.consumes_counters
        }
        group_of: dict[DeviceId, tuple[str, str]] = {}
        free: Counter[tuple[str, str]] = Counter()
        for device in node.devices:
            if device.consumes_counters or device.id in node.taken or _tainted(device):
                continue
            group = self._group(device)
            group_of[device.id] = group
            free[group] += 1
        totals = node.counter_totals
        whole = {key for key, total in totals.items() if _untouched(total, node.counters_left, key)}

        def score(
            chosen: Sequence[DeviceId], counters_left: Mapping[CounterKey, Counters]
        ) -> tuple[float, ...]:
            touched = {key for d in chosen for key in sets_of.get(d, ()) if key in whole}
            untouched = len(whole) - sum(
                1 for key in touched if not _untouched(totals[key], counters_left, key)
            )
            left = Counter(free)
            for device_id in set(chosen):
                group = group_of.get(device_id)
                if group is not None:
                    left[group] -= 1
            return (float(untouched), float(sum(n * n for n in left.values())))

        return score

    def _group(self, device: Device) -> tuple[str, str]:
        value = device.attributes.get(self.group_attribute)
        return (device.pool, str(value)) if value is not None else (device.pool, f"#{device.name}")


def _untouched(total: Counters, left: Mapping[CounterKey, Counters], key: CounterKey) -> bool:
    remaining = left.get(key, {})
    return all(remaining.get(name, _ZERO) >= amount for name, amount in total.items())


def _tainted(device: Device) -> bool:
    """A device new claims cannot use unless they tolerate it is not capacity to keep."""
    return any(taint.effect is not DeviceTaintEffect.NONE for taint in device.taints)


DEFAULT_POLICY: ChoicePolicy = MostCapacityLeft()
