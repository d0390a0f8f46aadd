"""A node's hourly price from a price list: its GPUs plus its host, on its capacity type."""

from __future__ import annotations

import pytest

from gpufleet.economics.node_prices import node_rate
from gpufleet.economics.prices import GpuPrice, MissingPriceError, PriceList
from gpufleet.model.capacity import CapacityType
from gpufleet.testing.builders import make_node

PRICES = PriceList(
    (GpuPrice("H100", {CapacityType.ON_DEMAND: 10.0, CapacityType.RESERVED: 3.0}),),
    {CapacityType.ON_DEMAND: 0.03, CapacityType.SPOT: 0.01},
    {CapacityType.ON_DEMAND: 0.004},
    {CapacityType.SPOT: 0.5},
)


@pytest.mark.parametrize(
    ("capacity", "hourly", "estimated"),
    [
        (CapacityType.ON_DEMAND, 8 * 10.0 + 96 * 0.03 + 1024 * 0.004, False),
        (CapacityType.RESERVED, None, None),  # the host has no reserved price nor estimate
        (CapacityType.SPOT, 8 * 5.0 + 96 * 0.01 + 1024 * 0.002, True),
    ],
    ids=["on-demand", "reserved-host-missing", "spot-estimated"],
)
def test_a_node_costs_its_gpus_and_its_host(
    capacity: CapacityType, hourly: float | None, estimated: bool | None
) -> None:
    node = make_node(cpu=96_000, memory=1024 * 1024, gpus=8, model="NVIDIA-H100-80GB-HBM3")
    if hourly is None:
        with pytest.raises(MissingPriceError, match="no vCPU reserved price"):
            node_rate(node, capacity, PRICES)
        return
    rate = node_rate(node, capacity, PRICES)
    assert rate.hourly == pytest.approx(hourly)
    assert rate.estimated is estimated


def test_a_cpu_node_costs_its_host_and_an_unpriced_model_is_refused() -> None:
    cpu_node = make_node(cpu=4000, memory=2048, gpus=0)
    rate = node_rate(cpu_node, CapacityType.ON_DEMAND, PRICES)
    assert rate.hourly == pytest.approx(4 * 0.03 + 2 * 0.004)
    with pytest.raises(MissingPriceError, match="no GPU price covers model 'T4'"):
        node_rate(make_node(gpus=1, model="T4"), CapacityType.ON_DEMAND, PRICES)
