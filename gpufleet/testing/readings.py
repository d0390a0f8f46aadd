"""Builders of device readings (``NodeTelemetry``) for tests of whatever consumes telemetry:
a node of GPUs with chosen utilisation, memory, temperature and holders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.telemetry.source import NodeTelemetry

MEMORY_MIB = 81_559


def gpu_uuid(node: str, gpu: int) -> str:
    return f"GPU-{node}-{gpu}"


def sample(
    node: str,
    gpu: int,
    util: float = 0.0,
    mem_used_mib: int = 0,
    temp_c: float = 40.0,
    power_w: float = 100.0,
    xid: int = 0,
    model: str = "NVIDIA H100 80GB HBM3",
) -> DeviceSample:
    return DeviceSample(
        gpu=gpu,
        uuid=gpu_uuid(node, gpu),
        model=model,
        gpu_util=util,
        fb_used_mib=mem_used_mib,
        fb_free_mib=MEMORY_MIB - mem_used_mib,
        temperature_c=temp_c,
        power_w=power_w,
        xid=xid,
    )


def node_reading(
    node: str,
    utils: Sequence[float],
    holders: Mapping[int, Sequence[tuple[str, str]]] | None = None,
    mem_used_mib: int = 0,
    temp_c: float = 40.0,
) -> NodeTelemetry:
    """``node`` with one GPU per entry of ``utils``; ``holders`` names the (namespace, pod)
    pods holding GPU i; memory and temperature apply to every GPU."""
    samples = [
        sample(node, gpu, util, mem_used_mib=mem_used_mib, temp_c=temp_c)
        for gpu, util in enumerate(utils)
    ]
    users = [
        DeviceUser(gpu_uuid(node, gpu), pod, namespace, "main")
        for gpu, pods in (holders or {}).items()
        for namespace, pod in pods
    ]
    return NodeTelemetry(node, samples, users)
