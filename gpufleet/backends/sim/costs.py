"""The cost of a simulated run, priced, split and grouped as ``serve``'s cost report is.

Owns :class:`CostSettings` (the price list, the groupings, how often utilisation is sampled)
and :func:`run_cost`: the run's pod runs (:class:`~gpufleet.backends.sim.holds.HoldLog`) read
into :class:`~gpufleet.economics.runs.PodRun` records (a pod's workload gives its queue,
labels and kind; its node the GPU model, how much of it, and the capacity type), with each
pod's mean GPU utilisation from the usage profiles
(:class:`~gpufleet.backends.sim.usage_meter.UsageMeter`), given to
:func:`~gpufleet.economics.reports.cost_of_runs` once per grouping over the run's window (from
its first arrival, t=0, to the moment its last pod stopped, or the end of the run where pods
still run then), the cluster's nodes giving ``__idle__``: the GPU time nobody held. A pod the
meter never sampled is unmeasured, never 0 %.

The reports kept leave out the pods' own lines (``runs``): a run's ``results.json`` would hold
every pod. The simulator has no tenants: grouping by ``tenant`` puts every pod in
``__unallocated__``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpufleet.backends.sim.holds import Hold
from gpufleet.backends.sim.usage_meter import EVERY_S
from gpufleet.economics import CapacityType, PriceList, Window
from gpufleet.economics.reports import CostReport, cost_of_runs, parse_by
from gpufleet.economics.runs import PodRun, capacity_type, gpus_held
from gpufleet.model import Node
from gpufleet.model.workload import TimedWorkload, Workload


@dataclass(frozen=True, slots=True)
class CostSettings:
    """How runs are costed: ``prices``; ``groupings``, each one or more keys of
    :func:`~gpufleet.economics.reports.parse_by` (``queue``, ``namespace``, ``team``,
    ``label:KEY``...), a report per grouping; ``sample_every_s``: the step of the utilisation
    samples (None: none are taken, and every pod is unmeasured)."""

    prices: PriceList
    groupings: tuple[tuple[str, ...], ...] = (("queue",),)
    sample_every_s: float | None = EVERY_S

    def __post_init__(self) -> None:
        if not self.groupings:
            raise ValueError("cost: give at least one grouping")
        for grouping in self.groupings:
            parse_by(grouping)
        if self.sample_every_s is not None and not self.sample_every_s > 0:
            raise ValueError(
                f"cost: the sampling step must be above 0 s, got {self.sample_every_s}"
            )


def pod_runs(
    holds: Sequence[Hold],
    nodes: Sequence[Node],
    workloads: Sequence[TimedWorkload],
    end: float,
    kinds: Mapping[str, str] | None = None,
) -> list[PodRun]:
    """The runs of ``holds`` as the cost report reads them (those still running end at
    ``end``); ``kinds``: the object kind of each workload key, where the workload has none."""
    by_node = {node.name: node for node in nodes}
    owner: dict[str, Workload] = {p.key: t.workload for t in workloads for p in t.workload.pods}
    kinds = kinds or {}
    runs = []
    for hold in holds:
        pod, placement = hold.pod, hold.placement
        node = by_node.get(placement.node)
        gpus, model = gpus_held(placement.gpu_milli, placement.mig_slices, node)
        workload = owner.get(pod.key)
        key = workload.key if workload is not None else pod.key
        labels = dict(pod.labels) if workload is None else {**workload.labels, **pod.labels}
        runs.append(
            PodRun(
                workload=key,
                name=workload.name if workload is not None else pod.name,
                namespace=pod.namespace,
                pod=pod.name,
                node=placement.node,
                start=hold.start,
                end=end if hold.end is None else hold.end,
                running=hold.end is None,
                gpus=gpus,
                gpu_model=model,
                capacity=capacity_type(node.labels) if node else CapacityType.ON_DEMAND,
                cpu=pod.cpu_milli / 1000,
                memory_gib=pod.memory_mib / 1024,
                queue=workload.queue if workload is not None else "",
                kind=kinds.get(key) or (workload.kind if workload is not None else "") or "Pod",
                labels=labels,
                annotations=dict(pod.annotations),
            )
        )
    return runs


def run_cost(
    runs: Sequence[PodRun],
    nodes: Sequence[Node],
    settings: CostSettings,
    end: float,
    utilisation: Mapping[tuple[str, str], float] | None,
    pools: bool = False,
) -> tuple[CostReport, ...]:
    """A report per grouping of ``runs`` from t=0 to ``end``, without the pods' own lines.
    ``utilisation``: each sampled pod's mean (0 to 1) by (namespace, pod); None: not sampled.
    ``pools``: the run had node pools, whose nodes came and went: the cluster's unheld GPU
    time (``__idle__``) is left out, the pools' own report bills their nodes."""
    window = Window(0.0, max(end, 0.0))
    reports = []
    for grouping in settings.groupings:
        report = cost_of_runs(
            runs, nodes, settings.prices, window, grouping, utilisation, cluster_idle=not pools
        )
        notes = report.notes
        if pools:
            notes += (POOLS_NOTE,)
        reports.append(replace(report, runs=(), notes=notes))
    return tuple(reports)


POOLS_NOTE = (
    "the run's nodes came and went with its node pools: the cluster's unheld GPU time "
    "(__idle__) is left out. This table prices what the pods held at the price list's rates; "
    "the bill is the node pools' cost (every node at its pool's price for the time it was "
    "there, held or not)"
)
