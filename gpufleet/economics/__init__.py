"""Money: prices, cost allocation (allocated / used / idle, as OpenCost splits it), cost
reports of any world's pod runs, and GPU-hour budgets. Pure arithmetic over plain records; it
imports the model only and does no I/O (the price file is read by
:mod:`gpufleet.io.fleet.prices`)."""

from gpufleet.economics.aggregation import UNALLOCATED, GroupKey, aggregate, group_key, group_name
from gpufleet.economics.allocation import (
    IDLE,
    Allocation,
    CostLine,
    GpuCapacity,
    Holding,
    Window,
    WorkloadCost,
    allocate,
    holding_cost,
    mig_fraction,
    milli_fraction,
)
from gpufleet.economics.budgets import (
    DEFAULT_WARN_AT,
    BudgetPeriod,
    BudgetState,
    BudgetStatus,
    GpuHourBudget,
    budget_status,
    gpu_hours_used,
    period_window,
    used_status,
)
from gpufleet.economics.prices import CapacityType, GpuPrice, MissingPriceError, PriceList, Rate
from gpufleet.economics.reports import (
    DEFAULT_BY,
    CostGroup,
    CostReport,
    RunCost,
    cost_of_runs,
    parse_by,
)
from gpufleet.economics.runs import PodRun, capacity_type, gpus_held

__all__ = [
    "DEFAULT_BY",
    "DEFAULT_WARN_AT",
    "IDLE",
    "UNALLOCATED",
    "Allocation",
    "BudgetPeriod",
    "BudgetState",
    "BudgetStatus",
    "CapacityType",
    "CostGroup",
    "CostLine",
    "CostReport",
    "GpuCapacity",
    "GpuHourBudget",
    "GpuPrice",
    "GroupKey",
    "Holding",
    "MissingPriceError",
    "PodRun",
    "PriceList",
    "Rate",
    "RunCost",
    "Window",
    "WorkloadCost",
    "aggregate",
    "allocate",
    "budget_status",
    "capacity_type",
    "cost_of_runs",
    "gpu_hours_used",
    "gpus_held",
    "group_key",
    "group_name",
    "holding_cost",
    "mig_fraction",
    "milli_fraction",
    "parse_by",
    "period_window",
    "used_status",
]
