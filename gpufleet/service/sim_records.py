"""What the embedded control plane writes down about the simulated world, as plain functions.

The key of the pod a world's report is about (:func:`pod_key`), a job's progress as the API
shows it (:func:`progress_of`), where a pod runs in words (:func:`placement_text`), the part of a
workload still to run (:func:`remaining_part`) and the seed of the simulated telemetry
(:func:`telemetry_seed`). Pure functions of their arguments: the plane
(:mod:`gpufleet.service.embedded_plane`) owns the state, the lock and the store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gpufleet.backends.sim.jobs import JobRun
from gpufleet.model import Placement
from gpufleet.model.events import BindFailed, JobEnded, PodBound, PodDeleted, PodRestarted
from gpufleet.model.workload import TimedWorkload
from gpufleet.service.plane_book import ServeOptions
from gpufleet.service.records import JobProgress


def telemetry_seed(options: ServeOptions) -> int:
    """The usage profiles' seed: the one said for them, else the plane's."""
    return options.seed if options.telemetry_seed is None else options.telemetry_seed


def pod_key(event: PodBound | BindFailed | PodDeleted | PodRestarted | JobEnded) -> str:
    """The key of the pod a report is about (a job's end: its pod's)."""
    if isinstance(event, PodBound):
        return event.pod.key
    return event.pod_key if isinstance(event, JobEnded) else event.key


def progress_of(run: JobRun) -> JobProgress:
    """A job's progress as its controller in the world sees it."""
    done, total = run.completions
    return JobProgress(
        str(run.spec.kind), done, total, run.failed_pods, run.restarts,
        None if run.outcome is None else str(run.outcome), run.reason, run.message,
        sorted(run.failed_indexes),
    )  # fmt: skip


def placement_text(placement: Placement) -> str:
    """``n1 GPU 0,1`` or ``n1 GPU 2 (0.5 each)`` or ``n1 MIG 3:0``."""
    parts = [placement.node]
    if placement.gpu_indices:
        share = placement.gpu_milli_per_device
        gpus = ",".join(str(i) for i in placement.gpu_indices)
        parts.append(f"GPU {gpus}" + (f" ({share / 1000:g} each)" if 0 < share < 1000 else ""))
    if placement.mig_slices:
        parts.append("MIG " + ",".join(f"{g}:{s}" for g, s in placement.mig_slices))
    return " ".join(parts)


def remaining_part(timed: TimedWorkload, pods: Sequence[tuple[Any, float | None]]) -> TimedWorkload:
    """The part of a workload still to run: its waiting pods, with the work they have left."""
    workload = timed.workload
    chosen = tuple(pod for pod, _ in pods)
    left = [r for _, r in pods if r is not None]
    duration = max(left) if left else timed.duration
    if len(chosen) != len(workload.pods):
        workload = dataclasses.replace(
            workload, pods=chosen, min_member=min(workload.min_member, len(chosen))
        )
    return dataclasses.replace(timed, workload=workload, duration=duration)
