"""Resource keys, and amounts by key in the model's integer units.

Quotas and what a workload asks for are kept per *resource key*:

* ``cpu`` (milli-CPU), ``memory`` (MiB), ``nvidia.com/gpu`` (milli-GPU, so shares count in
  part), and ``nvidia.com/gpu.<model>`` (milli-GPU on nodes of that GPU model, e.g.
  ``nvidia.com/gpu.H100``: a quota on H100 separate from the quota on T4).

Owns the keys, :data:`Resources` and writing an amount back as Kubernetes writes it
(:func:`quantity`). Reading quantities from text is io's (:mod:`gpufleet.io.quantities`).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.model.gpu import MILLI_PER_GPU

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
GPU_MODEL_PREFIX = "nvidia.com/gpu."


def gpu_model_key(model: str) -> str:
    """The quota key of GPUs of one model (``nvidia.com/gpu.H100``)."""
    return f"{GPU_MODEL_PREFIX}{model}"


def quantity(resource: str, amount: int) -> int | str:
    """A model amount as Kubernetes writes it: GPUs as counts (``0.5`` for half of one), CPU as
    cores or ``2500m``, memory in ``Mi``."""
    if resource == GPU or resource.startswith(GPU_MODEL_PREFIX):
        whole, rest = divmod(amount, MILLI_PER_GPU)
        return whole if not rest else f"{amount / MILLI_PER_GPU:g}"
    if resource == CPU:
        return f"{amount}m" if amount % 1000 else amount // 1000
    if resource == MEMORY:
        return f"{amount}Mi"
    return amount


#: Resource key -> amount (model units). Keys a quota does not name are not limited by it.
Resources = Mapping[str, int]
