"""Which GPU devices a bound pod holds: written onto the pod at binding, read back after.

Owns the annotations the scheduler writes through the Binding (the API server copies a
binding's annotations onto the pod in the same write, so a pod is never bound without them):
the device indices, the milli-GPU taken on each when less than a device (a share, or a replica
of a time-sliced GPU), the MIG slices, and an ``NVIDIA_VISIBLE_DEVICES``-style hint for a
node-side component to enforce. A restarted scheduler reads them back, so it hands out no device
twice. (On a time-sliced node the device plugin, not gpufleet, picks which replica a pod gets:
the index is where gpufleet counts it.)

Pods bound by other schedulers carry none of this; :class:`DeviceLedger` then picks the devices
they most likely hold, holding what :func:`~gpufleet.model.sharing.milli_per_device` says (free
whole devices lowest index first, the fullest devices a share or replica still fits on, the
first free MIG slice of their profile) so that they count against the node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from gpufleet.model import MILLI_PER_GPU, Node, Placement, Pod
from gpufleet.model.sharing import milli_per_device

GPU_INDEX_ANNOTATION = "gpufleet.dev/gpu-index"
GPU_SHARE_ANNOTATION = "gpufleet.dev/gpu-milli-per-device"
MIG_SLICES_ANNOTATION = "gpufleet.dev/mig-slices"
VISIBLE_DEVICES_ANNOTATION = "gpufleet.dev/visible-devices"


def placement_annotations(placement: Placement) -> dict[str, str]:
    """What a binding writes onto the pod for ``placement`` (nothing for a CPU-only pod)."""
    out: dict[str, str] = {}
    if placement.gpu_indices:
        out[GPU_INDEX_ANNOTATION] = ",".join(str(i) for i in placement.gpu_indices)
        if 0 < placement.gpu_milli_per_device < MILLI_PER_GPU:
            out[GPU_SHARE_ANNOTATION] = str(placement.gpu_milli_per_device)
    if placement.mig_slices:
        out[MIG_SLICES_ANNOTATION] = ",".join(f"{g}:{s}" for g, s in placement.mig_slices)
    if out:
        out[VISIBLE_DEVICES_ANNOTATION] = placement.visible_devices
    return out


def placement_from_annotations(node: str, annotations: Mapping[str, str]) -> Placement | None:
    """The placement a binding recorded, or None when the pod carries none (or a broken one)."""
    if not any(
        key in annotations
        for key in (GPU_INDEX_ANNOTATION, MIG_SLICES_ANNOTATION, VISIBLE_DEVICES_ANNOTATION)
    ):
        return None
    try:
        indices = _ints(annotations.get(GPU_INDEX_ANNOTATION, ""))
        share = int(annotations.get(GPU_SHARE_ANNOTATION, "0") or 0)
        slices = tuple(
            (int(gpu), int(slot))
            for gpu, slot in (
                item.split(":") for item in _items(annotations.get(MIG_SLICES_ANNOTATION, ""))
            )
        )
    except ValueError:
        return None
    milli = share or (MILLI_PER_GPU if indices else 0)
    return Placement(node, indices, milli, slices)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(item) for item in _items(text))


class DeviceLedger:
    """What each node's devices have given out, as far as the backend has seen."""

    def __init__(self) -> None:
        self._milli: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self._slices: dict[str, set[tuple[int, int]]] = defaultdict(set)

    def take(self, placement: Placement) -> None:
        used = self._milli[placement.node]
        for index in placement.gpu_indices:
            used[index] += placement.gpu_milli_per_device
        self._slices[placement.node].update(placement.mig_slices)

    def give_back(self, placement: Placement) -> None:
        used = self._milli[placement.node]
        for index in placement.gpu_indices:
            used[index] -= placement.gpu_milli_per_device
            if used[index] <= 0:
                del used[index]
        self._slices[placement.node].difference_update(placement.mig_slices)

    def guess(self, pod: Pod, node: Node) -> Placement:
        """The devices ``pod`` most likely holds on ``node`` (see the module docstring); only
        what is free is picked, so the guess never over-allocates."""
        request = pod.gpu
        used = self._milli[node.name]
        whole = [g for g in node.gpus if not g.partitioned]
        if request.mig_profile is not None:
            taken = self._slices[node.name]
            free = [
                (gpu.index, s.slot)
                for gpu in node.gpus
                for s in gpu.mig_slices
                if s.profile == request.mig_profile and (gpu.index, s.slot) not in taken
            ]
            return Placement(node.name, mig_slices=tuple(free[: request.mig_count]))
        if request.count == 0:
            return Placement(node.name)
        # (used milli, index, milli): the fullest devices that still have room, lowest first
        fitting: list[tuple[int, int, int]] = []
        for gpu in whole:
            milli = milli_per_device(request, node.gpu_sharing, gpu.memory_mib)
            if used[gpu.index] + milli <= MILLI_PER_GPU:
                fitting.append((-used[gpu.index], gpu.index, milli))
        if len(fitting) < request.count:
            return Placement(node.name)
        chosen = sorted(fitting)[: request.count]
        return Placement(node.name, tuple(sorted(i for _, i, _ in chosen)), chosen[0][2])
