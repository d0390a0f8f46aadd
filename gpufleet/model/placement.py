"""Where a pod runs, down to the device."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.gpu import MILLI_PER_GPU
from gpufleet.model.sharing import held_gpu_milli


@dataclass(frozen=True, slots=True)
class Placement:
    """A pod's node, the GPU indices it holds, the milli-GPU it takes on each, its MIG slices.

    ``mig_slices`` holds ``(gpu index, slot)`` pairs.
    """

    node: str
    gpu_indices: tuple[int, ...] = ()
    gpu_milli_per_device: int = 0
    mig_slices: tuple[tuple[int, int], ...] = ()

    @property
    def milli_per_device(self) -> int:
        """Milli-GPU held on each of ``gpu_indices`` (a placement that names devices but no
        milli holds them whole)."""
        return self.gpu_milli_per_device or (MILLI_PER_GPU if self.gpu_indices else 0)

    @property
    def gpu_milli(self) -> int:
        """The GPU amount the pod holds here (:func:`~gpufleet.model.sharing.held_gpu_milli`)."""
        return held_gpu_milli(self.milli_per_device, len(self.gpu_indices))

    @property
    def visible_devices(self) -> str:
        """The ``NVIDIA_VISIBLE_DEVICES``-style hint for a node-side component."""
        indices = sorted({*self.gpu_indices, *(gpu for gpu, _ in self.mig_slices)})
        return ",".join(str(i) for i in indices)
