"""What each pod of a control plane's book held, as the economics package prices it.

Owns the reading of a plane's records and nodes into plain
:class:`~gpufleet.economics.runs.PodRun` records (which pod, on which node, how much of which
GPU model, bought how, from when to when); the window's text (``7d``) is
:mod:`gpufleet.service.cost_window`. What a run costs and how the runs group is
:mod:`gpufleet.economics`; putting the two together, with the measured utilisation, is
:mod:`gpufleet.service.costing`.

What the records do not keep is not invented: a pod's earlier runs (before an eviction or a
failure) left no placement, so only its current or last run counts; a pod that finished
before its workload did ends at its start plus the workload's run time (the simulated world
runs a pod exactly that long), capped at the workload's end or now; a pod cancelled while it
ran (through the API, or stopped by an idle policy) ends when its workload was cancelled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from gpufleet.economics import CapacityType
from gpufleet.economics.runs import PodRun, capacity_type, gpus_held
from gpufleet.model import Node
from gpufleet.service.records import (
    POD_CANCELLED,
    POD_RUNNING,
    POD_SUCCEEDED,
    PodRecord,
    WorkloadRecord,
)


def pod_runs(records: Iterable[WorkloadRecord], nodes: Sequence[Node], now: float) -> list[PodRun]:
    """The runs of every pod of ``records`` that was placed, as of ``now``."""
    by_name = {node.name: node for node in nodes}
    runs = []
    for record in records:
        for pod_record in record.pods.values():
            run = _run_of(record, pod_record, by_name, now)
            if run is not None:
                runs.append(run)
    return runs


def _run_of(
    record: WorkloadRecord, pod_record: PodRecord, nodes: Mapping[str, Node], now: float
) -> PodRun | None:
    placement = pod_record.placement
    start = pod_record.started
    if placement is None or start is None:
        return None
    running = pod_record.state == POD_RUNNING
    if running:
        end = now
    elif pod_record.state == POD_SUCCEEDED:
        end = _succeeded_end(record, start, now)
    elif pod_record.state == POD_CANCELLED and record.finished is not None:
        end = min(record.finished, now)  # it held its devices until its workload was cancelled
    else:
        return None
    node = nodes.get(placement.node)
    gpus, model = gpus_held(placement.gpu_milli, placement.mig_slices, node)
    pod = pod_record.pod
    workload = record.timed.workload
    return PodRun(
        record.key,
        workload.name,
        pod.namespace,
        pod.name,
        placement.node,
        start,
        max(start, end),
        running,
        gpus,
        model,
        capacity_type(node.labels) if node is not None else CapacityType.ON_DEMAND,
        pod.cpu_milli / 1000,
        pod.memory_mib / 1024,
        workload.queue,
        record.tenant,
        record.kind,
        {**workload.labels, **pod.labels},
        dict(pod.annotations),
    )


def _succeeded_end(record: WorkloadRecord, start: float, now: float) -> float:
    """When a finished pod let go: its workload's end, else its start plus the run time."""
    if record.finished is not None:
        return min(record.finished, now)
    duration = record.timed.duration
    if duration is not None and math.isfinite(duration):
        return min(start + duration, now)
    return now
