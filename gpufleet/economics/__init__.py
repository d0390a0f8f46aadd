"""Money: prices, cost allocation (allocated / used / idle, as OpenCost splits it) and GPU-hour
budgets. Pure arithmetic over plain records; it imports the model only and does no I/O (the
price file is read by :mod:`gpufleet.io.prices`)."""

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

__all__ = [
    "DEFAULT_WARN_AT",
    "IDLE",
    "UNALLOCATED",
    "Allocation",
    "BudgetPeriod",
    "BudgetState",
    "BudgetStatus",
    "CapacityType",
    "CostLine",
    "GpuCapacity",
    "GpuHourBudget",
    "GpuPrice",
    "GroupKey",
    "Holding",
    "MissingPriceError",
    "PriceList",
    "Rate",
    "Window",
    "WorkloadCost",
    "aggregate",
    "allocate",
    "budget_status",
    "gpu_hours_used",
    "group_key",
    "group_name",
    "holding_cost",
    "mig_fraction",
    "milli_fraction",
    "period_window",
    "used_status",
]
