"""Which of the feasible device choices for a pod's claims to take: the policy hook.

Owns :class:`ChoicePolicy` (a score of a complete choice; the allocator keeps the highest, the
first found among equals, so ties go to the lowest device names) and the default,
:class:`MostCapacityLeft`. kube-scheduler takes the first devices that fit, in name order; that
breaks up what later requests need whole. The default rule instead keeps usable capacity whole:

1. **Whole partitionable devices first**: the more counter sets (one per MIG-capable GPU)
   left untouched, the better. A MIG request goes to a GPU already partitioned rather than
   breaking a whole one, and a whole-GPU request (which takes all its GPU's counters) to a GPU
   with nothing on it only because no other way exists.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from gpufleet.model.dra import PCIE_ROOT_ATTRIBUTE, Device, DeviceId, DeviceTaintEffect
from gpufleet.scheduling.dra.inventory import CounterKey, Counters, NodeDevices


class ChoicePolicy(Protocol):
    """Scores complete choices: higher is better."""

    def score(
        self,
        node: NodeDevices,
        chosen: Sequence[DeviceId],
        counters_left: Mapping[CounterKey, Counters],
    ) -> tuple[float, ...]:
        """``chosen``: the devices of the choice (a shared device once per use);
        ``counters_left``: the node's counters once the choice's are taken."""
        ...


@dataclass(frozen=True, slots=True)
class MostCapacityLeft:
    """The default rule (module docstring): untouched counter sets, then free devices per
    topology group, squared."""

    group_attribute: str = PCIE_ROOT_ATTRIBUTE

    def score(
        self,
        node: NodeDevices,
        chosen: Sequence[DeviceId],
        counters_left: Mapping[CounterKey, Counters],
    ) -> tuple[float, ...]:
        untouched = sum(
            1
            for key, total in node.counter_totals.items()
            if all(
                counters_left.get(key, {}).get(name, Fraction(0)) >= v for name, v in total.items()
            )
        )
        busy = set(chosen) | node.taken
        groups: Counter[tuple[str, str]] = Counter()
        for device in node.devices:
            if device.consumes_counters or device.id in busy or _tainted(device):
                continue
            groups[self._group(device)] += 1
        return (float(untouched), float(sum(n * n for n in groups.values())))

    def _group(self, device: Device) -> tuple[str, str]:
        value = device.attributes.get(self.group_attribute)
        return (device.pool, str(value)) if value is not None else (device.pool, f"#{device.name}")


def _tainted(device: Device) -> bool:
    """A device new claims cannot use unless they tolerate it is not capacity to keep."""
    return any(taint.effect is not DeviceTaintEffect.NONE for taint in device.taints)


DEFAULT_POLICY: ChoicePolicy = MostCapacityLeft()
