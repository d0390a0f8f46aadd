"""``GET /api/v1/cost``: a plane's cost report (:mod:`gpufleet.service.costing`) as the API's
schema, for the caller: a tenant sees only its own workloads (and not the cluster's idle GPU
time, which is everyone's), an admin all. Bad ``by`` or ``window``: a 400 naming the field."""

from __future__ import annotations

from gpufleet.api.errors import ApiError
from gpufleet.api.schemas import CostLine, CostReport, IdleHolder
from gpufleet.economics import PriceList
from gpufleet.economics.reports import IDLE_HOLDER_BELOW, CostGroup, parse_by
from gpufleet.economics.reports import CostReport as Report
from gpufleet.service import costing
from gpufleet.service.auth import Principal
from gpufleet.service.cost_window import parse_window
from gpufleet.service.observatory import STEP_S
from gpufleet.service.protocol import Plane
from gpufleet.service.records import WorkloadRecord
from gpufleet.telemetry.series_query import GroupedSeriesQuery


def plane_series(plane: Plane) -> GroupedSeriesQuery | None:
    """The plane's utilisation series (its observatory's), None where it observes nothing."""
    observatory = plane.observatory
    return None if observatory is None else observatory.series


def plane_step(plane: Plane) -> float:
    """The step of the plane's observatory (how long a utilisation sample stands at least)."""
    observatory = plane.observatory
    return STEP_S if observatory is None else observatory.step_s


def report_for(plane: Plane, caller: Principal, prices: PriceList, by: str, window: str) -> Report:
    """The report ``caller`` may see (ApiError 400 for a bad ``by`` or ``window``)."""
    try:
        window_s = parse_window(window)
    except ValueError as error:
        raise ApiError(400, str(error), "window") from None
    try:
        parse_by(by)
    except ValueError as error:
        raise ApiError(400, str(error), "by") from None

    def visible(record: WorkloadRecord) -> bool:
        return caller.may_see(record.tenant)

    return costing.cost_report(
        plane, window_s, by, plane.now(), prices, series=plane_series(plane),
        visible=None if caller.is_admin else visible, step_s=plane_step(plane),
    )  # fmt: skip


def cost_view(
    plane: Plane, caller: Principal, prices: PriceList, by: str, window: str
) -> CostReport:
    report = report_for(plane, caller, prices, by, window)
    holders = report.idle_holders(IDLE_HOLDER_BELOW)
    return CostReport(
        by=list(report.by),
        window=window,
        start=report.window.start,
        end=report.window.end,
        currency=report.currency,
        measured=report.measured,
        lines=[line_view(group) for group in report.groups],
        total=line_view(report.total),
        idle_holders=[
            IdleHolder(
                workload=h.workload,
                namespace=h.namespace,
                queue=h.queue,
                tenant=h.tenant,
                kind=h.kind,
                gpus=round(h.gpus, 4),
                gpu_hours=_r(h.gpu_hours),
                utilisation=round(h.utilisation, 4),
                idle=_r(h.idle),
                held_since=h.held_since,
            )
            for h in holders
        ],
        idle_below=IDLE_HOLDER_BELOW,
        unpriced_models=list(report.unpriced_models),
        notes=list(report.notes),
    )


def line_view(group: CostGroup) -> CostLine:
    utilisation = group.utilisation
    return CostLine(
        name=group.name,
        workloads=group.workloads,
        gpu_hours=_r(group.gpu_hours),
        idle_gpu_hours=_r(group.idle_gpu_hours),
        unmeasured_gpu_hours=_r(group.unmeasured_gpu_hours),
        unpriced_gpu_hours=_r(group.unpriced_gpu_hours),
        allocated=_r(group.allocated),
        used=_r(group.used),
        idle=_r(max(group.idle, 0.0)),
        unmeasured=_r(group.gpu_unmeasured_cost),
        gpu=_r(group.gpu_cost),
        cpu=_r(group.cpu_cost),
        memory=_r(group.memory_cost),
        utilisation=None if utilisation is None else round(utilisation, 4),
        estimated=group.estimated,
    )


def _r(value: float) -> float:
    """Money and hours to 6 decimals (a micro-dollar), so that sums read cleanly."""
    return round(value, 6)
