"""``gpufleet serve``'s per-tenant limits: its options and the
:class:`~gpufleet.service.limits.TenantLimits` they make (0 turns a limit off)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.output import fail
from gpufleet.service.limits import (
    DEFAULT_MAX_ACTIVE_PODS,
    DEFAULT_MAX_ACTIVE_WORKLOADS,
    DEFAULT_WRITE_BURST,
    DEFAULT_WRITE_RATE,
    TenantLimits,
)

MaxActiveWorkloadsOption = Annotated[
    int,
    typer.Option(
        help="unfinished workloads a tenant may have; a submission over it gets 403 "
        "'exceeded quota' (0: no limit)"
    ),
]
MaxActivePodsOption = Annotated[
    int, typer.Option(help="pods of unfinished workloads a tenant may have (0: no limit)")
]
WriteRateOption = Annotated[
    float,
    typer.Option(
        help="writes (POST, PUT, DELETE) a second per tenant; over it a request gets 429 "
        "with Retry-After (0: no limit)"
    ),
]
WriteBurstOption = Annotated[
    int, typer.Option(help="writes a tenant may make at once, above --write-rate")
]
LimitAdminsOption = Annotated[
    bool, typer.Option(help="hold admins' tokens to the same limits as tenants'")
]


def tenant_limits(
    max_active_workloads: int = DEFAULT_MAX_ACTIVE_WORKLOADS,
    max_active_pods: int = DEFAULT_MAX_ACTIVE_PODS,
    write_rate: float = DEFAULT_WRITE_RATE,
    write_burst: int = DEFAULT_WRITE_BURST,
    limit_admins: bool = False,
) -> TenantLimits:
    """The limits the options ask for, or one line naming the bad option."""
    for flag, value in (
        ("--max-active-workloads", max_active_workloads),
        ("--max-active-pods", max_active_pods),
        ("--write-rate", write_rate),
    ):
        if not value >= 0:
            raise fail(f"{flag} must be 0 (no limit) or more, got {value:g}")
    if write_burst < 1:
        raise fail(f"--write-burst must be 1 or more, got {write_burst}")
    return TenantLimits(
        max_active_workloads=max_active_workloads or None,
        max_active_pods=max_active_pods or None,
        write_rate=write_rate or None,
        write_burst=write_burst,
        limit_admins=limit_admins,
    )
