"""A local process's devices and gang, as the environment variables it starts with.

Owns two pure functions and a port picker:

* :func:`placement_env`: the devices of a :class:`~gpufleet.model.Placement` on this machine's
  :class:`~gpufleet.model.inventory.NodeInventory`, by UUID (MIG instances by their MIG UUID,
  which CUDA accepts in ``CUDA_VISIBLE_DEVICES`` since 11.1), in ``CUDA_VISIBLE_DEVICES`` (what
  CUDA honours for a bare process) and ``NVIDIA_VISIBLE_DEVICES`` (what the NVIDIA container
  toolkit honours); ``GPUFLEET_GPU_MILLI``; for a share of a GPU where CUDA MPS runs, the
  limits the MPS server enforces. The UUID lookup and the MPS arithmetic are the node agent's
  (:mod:`gpufleet.devices.visibility`), so a pod sees the same devices on Kubernetes and here.
  A placement with no devices sees none (``CUDA_VISIBLE_DEVICES`` empty).
* :func:`rendezvous_env`: what torchrun gives each worker (PyTorch's "torchrun (Elastic
  Launch)" environment variables; ``init_process_group("env://")`` reads ``MASTER_ADDR``,
  ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK``). Each pod of a gang is one process that sees
  only its own GPUs, so each is laid out as its own node of the rendezvous, as a PyTorchJob's
  pods are: ``GROUP_RANK`` = ``RANK``, ``LOCAL_RANK`` 0, ``LOCAL_WORLD_SIZE`` 1. (Numbering
  local ranks 0..N-1 instead would break the common ``torch.cuda.set_device(LOCAL_RANK)``: rank
  1 sees one GPU, ``cuda:0``.)
* :func:`free_port`: a TCP port free on the loopback now, chosen once per gang.

It starts nothing and decides nothing.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from gpufleet.devices.visibility import (
    CUDA_VISIBLE_DEVICES_ENV,
    GPU_MILLI_ENV,
    VISIBLE_DEVICES_ENV,
    gpu_uuids,
    mig_uuids,
    mps_limits,
)
from gpufleet.model.gpu import MILLI_PER_GPU
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.placement import Placement

#: Where a gang on one machine meets.
LOOPBACK = "127.0.0.1"
#: ``NVIDIA_VISIBLE_DEVICES`` for a process without GPUs (the container toolkit's word).
NO_DEVICES = "none"
RENDEZVOUS_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
)


def placement_env(
    placement: Placement, inventory: NodeInventory, mps: bool = False
) -> dict[str, str]:
    """The device variables of a process placed at ``placement`` (see the module docstring);
    ``mps``: CUDA MPS serves this machine's GPUs. A device the inventory lacks raises
    :class:`~gpufleet.devices.visibility.DeviceNotFoundError`."""
    whole = gpu_uuids(inventory, placement.gpu_indices)
    devices = whole + mig_uuids(inventory, placement.mig_slices)
    env = {
        CUDA_VISIBLE_DEVICES_ENV: ",".join(devices),
        VISIBLE_DEVICES_ENV: ",".join(devices) or NO_DEVICES,
    }
    if whole:
        milli = placement.milli_per_device
        env[GPU_MILLI_ENV] = str(milli)
        if mps and milli < MILLI_PER_GPU:
            memory = {d.uuid: d.memory_mib for d in inventory.devices}
            env.update(mps_limits(whole, milli, memory))
    return env


def rendezvous_env(
    rank: int, world_size: int, port: int, address: str = LOOPBACK
) -> Mapping[str, str]:
    """torchrun's worker variables for rank ``rank`` of ``world_size`` meeting at
    ``address:port`` (see the module docstring)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a gang of {world_size}")
    if not 0 < port < 65536:
        raise ValueError(f"expected a TCP port, got {port}")
    values = (address, port, world_size, rank, 0, 1, rank, rank, world_size)
    return dict(zip(RENDEZVOUS_NAMES, (str(v) for v in values), strict=True))


def free_port(address: str = LOOPBACK) -> int:
    """A TCP port nothing listens on at ``address`` now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port
