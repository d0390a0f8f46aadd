"""Summaries of simulation runs: one row per policy, medians over seeds; and the JSON file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from gpufleet.backends.sim.results import FillRun, ReplayRun
from gpufleet.report.cells import DURATION


@dataclass(slots=True)
class FillSummary:
    policy: str
    seeds: list[int]
    median_unallocated_at_100: float
    min_unallocated_at_100: float
    max_unallocated_at_100: float
    median_fragmentation_at_100: float
    median_seconds: float = field(metadata=DURATION)
    failure_rate_by_class: dict[str, float] = field(default_factory=dict)
    impossible_pods: int = 0
    bind_violations: int = 0


@dataclass(slots=True)
class ReplaySummary:
    policy: str
    seeds: list[int]
    p50_delay: float = field(metadata=DURATION)
    p95_delay: float = field(metadata=DURATION)
    max_delay: float = field(metadata=DURATION)
    mean_allocated_pct: float
    never_ran: int
    median_seconds: float = field(metadata=DURATION)
    bind_violations: int = 0


def summarize_fill(runs: Sequence[FillRun]) -> list[FillSummary]:
    rows = []
    for policy in dict.fromkeys(r.policy for r in runs):
        mine = [r for r in runs if r.policy == policy]
        at_100 = [r.unallocated_at_100 for r in mine]
        failed: dict[str, int] = {}
        arrived: dict[str, int] = {}
        for run in mine:
            for cls, stats in run.classes.items():
                failed[cls] = failed.get(cls, 0) + stats.failed_by_100
                arrived[cls] = arrived.get(cls, 0) + stats.arrived_by_100
        rows.append(
            FillSummary(
                policy=policy,
                seeds=[r.seed for r in mine],
                median_unallocated_at_100=round(median(at_100), 3),
                min_unallocated_at_100=round(min(at_100), 3),
                max_unallocated_at_100=round(max(at_100), 3),
                median_fragmentation_at_100=round(
                    median(r.fragmentation_pct[100] for r in mine), 3
                ),
                median_seconds=round(median(r.seconds for r in mine), 3),
                failure_rate_by_class={
                    cls: round(100.0 * failed[cls] / arrived[cls], 2)
                    for cls in sorted(arrived)
                    if arrived[cls]
                },
                impossible_pods=max(r.impossible_pods for r in mine),
                bind_violations=sum(r.bind_violations for r in mine),
            )
        )
    return rows


def summarize_replay(runs: Sequence[ReplayRun]) -> list[ReplaySummary]:
    rows = []
    for policy in dict.fromkeys(r.policy for r in runs):
        mine = [r for r in runs if r.policy == policy]
        rows.append(
            ReplaySummary(
                policy=policy,
                seeds=[r.seed for r in mine],
                p50_delay=round(median(r.queueing_delay.p50 for r in mine), 3),
                p95_delay=round(median(r.queueing_delay.p95 for r in mine), 3),
                max_delay=round(median(r.queueing_delay.max for r in mine), 3),
                mean_allocated_pct=round(
                    median(_mean(r.timeline.allocated_gpu_pct) for r in mine), 3
                ),
                never_ran=int(median(r.never_ran for r in mine)),
                median_seconds=round(median(r.seconds for r in mine), 3),
                bind_violations=sum(r.bind_violations for r in mine),
            )
        )
    return rows


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` (dataclasses allowed) as indented JSON, atomically."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_plain(payload), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
