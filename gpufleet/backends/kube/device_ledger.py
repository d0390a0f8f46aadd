"""Which devices of each node the Kubernetes backend has seen given out.

Owns :class:`DeviceLedger`. Pods bound by gpufleet carry their devices in the binding
annotations (:mod:`gpufleet.io.kube.annotations`); pods bound by other schedulers carry none,
and the ledger then picks the devices they most likely hold, holding what
:func:`~gpufleet.model.sharing.milli_per_device` says (free whole devices lowest index first, the
fullest devices a share or replica still fits on, the first free MIG slice of their profile) so
that they count against the node.
"""

from __future__ import annotations

from collections import defaultdict

from gpufleet.model import MILLI_PER_GPU, Node, Placement, Pod
from gpufleet.model.sharing import milli_per_device


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
