"""The device nodes of a fake node's GPUs, as the NVIDIA driver makes them, in a directory that
stands for ``/dev`` (a :class:`~gpufleet.devices.fake_spec.FakeSpec`'s ``device_dir``).

Owns :func:`write_fake_device_dir`: ``nvidiaN`` per GPU, ``nvidiactl``, ``nvidia-uvm``,
``nvidia-uvm-tools``, and, where a GPU is in MIG mode, ``nvidia-caps/nvidia-capN`` for the MIG
``config`` and ``monitor`` capabilities and for each GPU instance's and compute instance's
``access`` capability, with a ``mig-minors`` file beside them that stands for the driver's
``/proc/driver/nvidia-caps/mig-minors`` (every capability the driver could make, and its
minor, numbered as the driver numbers them: ``config`` 1, ``monitor`` 2, then per GPU 15 GPU
instances of 9 minors each: the instance's ``access``, then its 8 compute instances'). Nodes
are plain files, or (``char_nodes``, root only) character devices: the GPUs' of the driver's
major 195, the capabilities' of :data:`FAKE_CAPS_MAJOR`, which no driver answers (ENXIO).

It reads only the fake description; what a run gets of it is decided by
:mod:`gpufleet.backends.local.private_dev`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpufleet.devices.fake_layout import build_gpus
from gpufleet.devices.fake_spec import FakeSpec

#: The NVIDIA driver's character major (``nvidiaN``, ``nvidiactl``).
NVIDIA_MAJOR = 195
#: The fake capabilities' major: one of Linux's local/experimental majors, so that no driver
#: answers (the real ``nvidia-caps`` major is dynamic, read from ``/proc/devices``).
FAKE_CAPS_MAJOR = 62
#: The control nodes and their minors (the driver's: 255; ``nvidia-uvm``'s own major aside).
CONTROL_NODES = {"nvidiactl": 255, "nvidia-uvm": 254, "nvidia-uvm-tools": 253}
#: The driver's numbering of MIG capabilities (see the module docstring).
GPU_INSTANCES = 15
COMPUTE_INSTANCES = 8
FIRST_INSTANCE_MINOR = 3
#: The name of the fake ``mig-minors`` file in the device directory.
MIG_MINORS_FILE = "mig-minors"


def gpu_instance_minor(gpu: int, gpu_instance: int) -> int:
    """The minor of ``gpu<gpu>/gi<gpu_instance>/access``."""
    per_gpu = GPU_INSTANCES * (1 + COMPUTE_INSTANCES)
    return FIRST_INSTANCE_MINOR + gpu * per_gpu + gpu_instance * (1 + COMPUTE_INSTANCES)


def mig_minors_text(gpus: int) -> str:
    """The ``mig-minors`` file of a machine of ``gpus`` GPUs, as the driver writes it."""
    lines = ["config 1", "monitor 2"]
    for gpu in range(gpus):
        for gi in range(GPU_INSTANCES):
            minor = gpu_instance_minor(gpu, gi)
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {minor + 1 + ci}"
                      for ci in range(COMPUTE_INSTANCES)]  # fmt: skip
    return "\n".join(lines) + "\n"


def _node(path: Path, major: int, minor: int, char_nodes: bool) -> None:
    if char_nodes:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    else:
        path.write_text("")


def write_fake_device_dir(spec: FakeSpec, directory: Path, char_nodes: bool = False) -> Path:
    """Write the nodes of ``spec``'s GPUs in ``directory`` (made if needed; see the module
    docstring); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    gpus = build_gpus(spec)
    for gpu in gpus:
        _node(directory / f"nvidia{gpu.index}", NVIDIA_MAJOR, gpu.index, char_nodes)
    for name, minor in CONTROL_NODES.items():
        _node(directory / name, NVIDIA_MAJOR, minor, char_nodes)
    migs = [gpu for gpu in gpus if gpu.mig_enabled]
    if not migs:
        return directory
    caps = directory / "nvidia-caps"
    caps.mkdir(exist_ok=True)
    minors = [1, 2]  # config, monitor
    for gpu in migs:
        for instance in gpu.mig:
            first = gpu_instance_minor(gpu.index, instance.gpu_instance_id)
            minors += [first, first + 1 + instance.compute_instance_id]
    for minor in sorted(set(minors)):
        _node(caps / f"nvidia-cap{minor}", FAKE_CAPS_MAJOR, minor, char_nodes)
    (directory / MIG_MINORS_FILE).write_text(mig_minors_text(len(gpus)))
    return directory


__all__ = [
    "CONTROL_NODES",
    "FAKE_CAPS_MAJOR",
    "MIG_MINORS_FILE",
    "NVIDIA_MAJOR",
    "gpu_instance_minor",
    "mig_minors_text",
    "write_fake_device_dir",
]
