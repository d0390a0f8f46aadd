"""Where a pod runs, down to the device."""

from __future__ import annotations

from dataclasses import dataclass


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
    def visible_devices(self) -> str:
        """The ``NVIDIA_VISIBLE_DEVICES``-style hint for a node-side component."""
        indices = sorted({*self.gpu_indices, *(gpu for gpu, _ in self.mig_slices)})
        return ",".join(str(i) for i in indices)
