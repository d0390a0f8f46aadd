"""Builders for the economics tests: a small price list with round numbers, and holdings and
capacity in hours rather than seconds."""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.economics import CapacityType, GpuCapacity, GpuPrice, Holding, PriceList, Window

HOUR = 3600.0
ON_DEMAND, SPOT, RESERVED = CapacityType.ON_DEMAND, CapacityType.SPOT, CapacityType.RESERVED


def price_list(
    estimate_spot: float | None = None, estimate_reserved: float | None = None
) -> PriceList:
    """H100 at 10/4/3 (on-demand/spot/reserved) per GPU-hour, A10G on-demand only at 1;
    a vCPU-hour 0.05 (spot 0.01), a GiB-hour 0.01 (spot 0.002); the estimates given."""
    estimates = {SPOT: estimate_spot, RESERVED: estimate_reserved}
    return PriceList(
        (
            GpuPrice("H100", {ON_DEMAND: 10.0, SPOT: 4.0, RESERVED: 3.0}),
            GpuPrice("A10G", {ON_DEMAND: 1.0}),
        ),
        {ON_DEMAND: 0.05, SPOT: 0.01, RESERVED: 0.05},
        {ON_DEMAND: 0.01, SPOT: 0.002, RESERVED: 0.01},
        {capacity: value for capacity, value in estimates.items() if value is not None},
    )


def hours(start: float, end: float) -> Window:
    return Window(start * HOUR, end * HOUR)


def holding(
    name: str = "job",
    *,
    gpus: float = 1.0,
    model: str = "NVIDIA-H100-80GB-HBM3",
    start_h: float = 0.0,
    end_h: float = 10.0,
    capacity: CapacityType = ON_DEMAND,
    utilisation: float = 0.0,
    cpu: float = 0.0,
    memory_gib: float = 0.0,
    namespace: str = "ml",
    queue: str = "",
    tenant: str = "",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Holding:
    return Holding(
        name,
        namespace,
        start_h * HOUR,
        end_h * HOUR,
        gpus,
        model if gpus > 0 else "",
        capacity,
        utilisation,
        cpu,
        memory_gib,
        queue,
        tenant,
        dict(labels or {}),
        dict(annotations or {}),
    )


def node_gpus(
    node: str = "n1",
    gpus: float = 8,
    *,
    model: str = "NVIDIA-H100-80GB-HBM3",
    start_h: float = 0.0,
    end_h: float = 10.0,
    capacity: CapacityType = ON_DEMAND,
) -> GpuCapacity:
    return GpuCapacity(node, model, gpus, start_h * HOUR, end_h * HOUR, capacity)
