"""Cost per workload, split allocated / used / idle as OpenCost splits it: whole GPUs, shares
and MIG slices by their part, spot and reserved at their prices, CPU and memory by request,
and the GPU time nobody held as the cluster's own __idle__ line."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from gpufleet.economics import (
    IDLE,
    CapacityType,
    Holding,
    MissingPriceError,
    allocate,
    holding_cost,
    mig_fraction,
    milli_fraction,
)
from gpufleet.testing.economics_builders import (
    ON_DEMAND,
    RESERVED,
    SPOT,
    holding,
    hours,
    node_gpus,
    price_list,
)

WINDOW = hours(0, 10)


@dataclass(frozen=True)
class Case:
    holding: Holding
    gpu_hours: float
    allocated: float
    used: float
    idle: float


CASES = {
    "whole-gpus": Case(holding(gpus=2, utilisation=0.5), 20, 200, 100, 100),
    "quarter-share": Case(holding(gpus=milli_fraction(250), utilisation=0.8), 2.5, 25, 20, 5),
    "mig-3g-slice": Case(
        holding(gpus=mig_fraction("3g.40gb"), utilisation=1.0), 30 / 7, 300 / 7, 300 / 7, 0
    ),
    "mig-1g-slice-idle": Case(holding(gpus=mig_fraction("1g.10gb")), 10 / 7, 100 / 7, 0, 100 / 7),
    "on-demand": Case(holding(capacity=ON_DEMAND, utilisation=0.25), 10, 100, 25, 75),
    "spot": Case(holding(capacity=SPOT, utilisation=0.25), 10, 40, 10, 30),
    "reserved": Case(holding(capacity=RESERVED, utilisation=0.25), 10, 30, 7.5, 22.5),
    "cpu-and-memory-only": Case(holding(gpus=0, cpu=4, memory_gib=16), 0, 3.6, 3.6, 0),
    "cpu-memory-beside-gpu": Case(holding(cpu=2, memory_gib=10, utilisation=0.5), 10, 102, 52, 50),
    "spot-host": Case(holding(capacity=SPOT, cpu=10, memory_gib=50), 10, 42, 2, 40),
    "clipped-to-window": Case(holding(start_h=-5, end_h=5, utilisation=1.0), 5, 50, 50, 0),
    "outside-window": Case(holding(start_h=20, end_h=30, cpu=4), 0, 0, 0, 0),
    "cheaper-model": Case(holding(gpus=4, model="NVIDIA A10G", utilisation=0.5), 40, 40, 20, 20),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_holding_costs_its_gpu_time_cpu_and_memory(case: Case) -> None:
    cost = holding_cost(case.holding, price_list(), WINDOW)
    assert cost.gpu_hours == pytest.approx(case.gpu_hours)
    assert cost.allocated == pytest.approx(case.allocated)
    assert cost.used == pytest.approx(case.used)
    assert cost.idle == pytest.approx(case.idle)
    assert cost.allocated == pytest.approx(cost.used + cost.idle)
    assert not cost.estimated


def test_a_missing_spot_price_is_estimated_from_on_demand_and_says_so() -> None:
    cost = holding_cost(holding(model="A10G", capacity=SPOT), price_list(estimate_spot=0.6), WINDOW)
    assert cost.gpu_cost == pytest.approx(6.0)
    assert cost.estimated


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        (holding(model="A10G", capacity=SPOT), "'A10G' has no spot price"),
        (holding(model="Tesla-T4"), "no GPU price covers model 'Tesla-T4'"),
    ],
    ids=["no-spot-price-no-estimate", "unpriced-model"],
)
def test_a_missing_price_is_an_error_naming_it(what: Holding, expected: str) -> None:
    with pytest.raises(MissingPriceError, match=expected):
        holding_cost(what, price_list(), WINDOW)


def test_the_most_specific_model_name_prices_a_product() -> None:
    from gpufleet.economics import GpuPrice, PriceList

    prices = PriceList(
        (GpuPrice("A100", {ON_DEMAND: 3.0}), GpuPrice("A100-SXM4-80GB", {ON_DEMAND: 5.0})),
        {ON_DEMAND: 0.0},
        {ON_DEMAND: 0.0},
    )
    assert prices.gpu_rate("NVIDIA-A100-SXM4-80GB", ON_DEMAND).hourly == 5.0
    assert prices.gpu_rate("NVIDIA-A100-SXM4-40GB", ON_DEMAND).hourly == 3.0
    with pytest.raises(MissingPriceError):
        prices.gpu_rate("NVIDIA-A10", ON_DEMAND)  # A10 is not an A100


def test_gpus_nobody_held_are_the_clusters_idle_line() -> None:
    allocation = allocate(
        [holding("a", gpus=2, utilisation=0.5), holding("b", gpus=1, capacity=SPOT, end_h=5)],
        price_list(),
        WINDOW,
        [node_gpus("n1", 8), node_gpus("n2", 2, capacity=SPOT)],
    )
    # On-demand: 80 GPU-hours offered, 20 held; spot: 20 offered, 5 held.
    assert allocation.idle.name == IDLE
    assert allocation.idle.gpu_hours == pytest.approx(60 + 15)
    assert allocation.idle.allocated == pytest.approx(60 * 10 + 15 * 4)
    assert allocation.idle.used == 0
    total = allocation.total
    assert total.gpu_hours == pytest.approx(100)
    assert total.allocated == pytest.approx(200 + 20 + 600 + 60)
    assert total.used == pytest.approx(100)


def test_a_node_offering_part_of_the_window_counts_that_part() -> None:
    allocation = allocate([], price_list(), WINDOW, [node_gpus(gpus=4, start_h=8, end_h=12)])
    assert allocation.idle.gpu_hours == pytest.approx(8)


def test_without_capacity_there_is_no_cluster_idle() -> None:
    allocation = allocate([holding()], price_list(), WINDOW)
    assert allocation.idle.gpu_hours == 0
    assert allocation.total.allocated == pytest.approx(100)


def test_holding_more_than_the_cluster_offered_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"held 16 GPU-hours of h100-80gb-hbm3 \(on-demand\)"):
        allocate([holding(gpus=2, end_h=8)], price_list(), WINDOW, [node_gpus(gpus=1)])


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"utilisation": 1.5}, "utilisation is a fraction from 0 to 1"),
        ({"gpus": -1.0}, "gpus must be a finite amount"),
        ({"cpu": math.inf}, "cpu must be a finite amount"),
        ({"start": 10.0, "end": 5.0}, "holds until after it starts"),
        ({"gpus": 1.0, "gpu_model": " "}, "names no GPU model"),
    ],
    ids=["utilisation-over-1", "negative-gpus", "infinite-cpu", "ends-before-start", "no-model"],
)
def test_a_bad_holding_is_refused_naming_the_workload(
    fields: dict[str, object], expected: str
) -> None:
    base: dict[str, object] = {"workload": "w", "namespace": "ns", "start": 0.0, "end": 1.0}
    with pytest.raises(ValueError, match=expected) as error:
        Holding(**{**base, **fields})  # type: ignore[arg-type]
    assert "ns/w" in str(error.value)


def test_mig_fraction_is_compute_slices_out_of_seven() -> None:
    assert mig_fraction("nvidia.com/mig-7g.80gb") == 1.0
    assert mig_fraction("2g.20gb") == pytest.approx(2 / 7)
    with pytest.raises(ValueError, match="not a MIG profile"):
        mig_fraction("8g.90gb")


def test_capacity_types_are_spelled_as_karpenter_spells_them() -> None:
    assert [c.value for c in CapacityType] == ["on-demand", "spot", "reserved"]
