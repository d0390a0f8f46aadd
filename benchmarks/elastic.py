"""Elastic capacity against static, reserved and autoscaled on-demand capacity (issues 15, 29).

    python benchmarks/elastic.py [--days 7] [--seeds 0 1 2] [--jobs-per-day 600] [--quick]

Two parts, each its own simulated run (mixing them in one run changes nothing they measure and
would make one run slower; the inference service does not share nodes with the batch work):

**Batch and training, on node pools.** ``--days`` of GPU jobs drawn from the Alibaba 2023
trace's shapes as gpufleet ships them (gpufleet/data/alibaba2023_pod_shapes.csv, by their counts;
CPU-only pods left out: the pools are GPU nodes), so the benchmark runs anywhere without the
trace. Arrivals: ``--jobs-per-day`` on average, a non-homogeneous Poisson process (the count
fixed, times drawn by the inverse of the rate's integral) whose rate follows a day (a cosine,
highest at 14:00, the trough a third of the peak) and a week (day 0 a Monday; Saturday and
Sunday at 40% of a weekday). Run times: the trace's own run-time quantiles per pod class
(gpufleet/data/alibaba2023_runtimes.csv, log-linear between quantiles, as
:func:`~gpufleet.backends.sim.workloads.sample_runtime` draws them), capped at ``--max-runtime``
(the trace's longest are censored at its end): an empirical, heavy-tailed distribution (a
one-GPU pod's median is about 10 minutes, its 95th percentile 3.4 hours, a multi-GPU pod's
95th percentile over 2 days), chosen over a fitted law because it is the trace's. Gangs, as
:func:`~gpufleet.backends.sim.scenarios.from_trace` makes them: every multi-GPU pod becomes a
gang of 2-4 identical workers, and :data:`ONE_GPU_GANG_SHARE` of one-GPU pods gangs of 2, 4 or 8.
Each job is drawn (:data:`NEEDS`) fault-tolerant (it tolerates the spot taint
``gpufleet.dev/capacity-type=spot:NoSchedule`` and checkpoints every 30 minutes, losing at most
that to an interruption), non-preemptible (``preemptible: false``: critical, on-demand only), or
neither (no spot toleration: on-demand). One queue, no quota: capacity is the only limit.

Pools (:func:`batch_pools`): the same node shape, AWS p5.48xlarge (8 x H100 80GB, 192 vCPU,
2,048 GiB), on-demand and spot, each 0 to ``--max-nodes`` nodes, joining
:data:`PROVISIONING_DELAY_S` (5 minutes: boot, driver, device plugin) after they are asked for.
Prices from gpufleet/data/prices.yaml through :func:`~gpufleet.economics.node_prices.node_rate`
(no price of the pools' own): on-demand $98.32 per node-hour, the list's p5.48xlarge figure
(usage.ai, the pre-June-2025 list price; the file says it is likely high); spot: the list has no
H100 spot price, so its documented estimate, 0.6 x on-demand for the GPUs (the smallest saving
of the "40-70% less" its source gives) plus OpenCost's spot vCPU and memory prices: $53.25 per
node-hour, marked estimated. Spot interruptions: a ``SpotInterruption`` on every spot node at
the AWS Spot Instance Advisor's highest frequency band, ">20%" a month (where GPU instance types
mostly sit; taken at 20% a month, 3.06e-4 per node-hour: :func:`~gpufleet.model.node_faults.
band_rate`), with AWS's 2-minute notice, the node not coming back (its pool replaces it if the
work needs one). The autoscaler is gpufleet's (:mod:`gpufleet.backends.sim.node_pools`, Cluster
Autoscaler's defaults: scale-up every 10 s for work parked for capacity, the cheapest pool that
fits; a node under half used for 10 minutes, whose pods fit elsewhere, drained and removed). At
the published rate a week sees few interruptions, so ``--stress`` also runs the elastic case at
:data:`STRESS_FACTORS` times that rate (a sensitivity check, not the target's condition). The
band is read at its lower edge, 20% a month: the least it says, so the published rate is a
lower bound and the multiples show what a worse month costs. ``--spot-outages`` also runs the
elastic case with the spot pool out of capacity :data:`SPOT_OUTAGE_HOURS` each day (its
``spec.capacityOutages``): its requests fail as a cloud's insufficient-capacity error, and the
autoscaler falls back on on-demand for 3 minutes at a time, as Karpenter does.

**Five ways to buy the week**, side by side for each seed: (1) static on-demand at the elastic
run's peak of nodes at once (both pools: what "sized for the peak" means); (2) the *smallest
adequate* static on-demand fleet: the fewest nodes, at most that peak, with which the same jobs
all complete and the p95 queueing delay is no worse than the elastic run's plus
:data:`QUEUEING_SLACK_S` (10 minutes: the elastic run pays a node's 5-minute provisioning on
every scale-up, the static one never), found by bisection between the mean GPU demand in nodes
and the elastic peak (each size tried is listed); the target's baseline, the cheapest static
on-demand fleet that serves the week as well, so it favours the baseline; (3) the same fleet
bought reserved (the list's reserved price, EC2 Capacity Blocks: the same run, priced so);
(4) the on-demand pool alone, autoscaled (what autoscaling saves without spot); (5) elastic:
on-demand and spot pools, autoscaled. Static fleets are paid for the period, ``--days`` x 24
hours at their price (a fleet is bought for the week; the run's tail beyond it is the week's
work draining, which the next week's same fleet carries); the autoscaled runs pay the pools'
node-hours (each node from its asking to its leaving, the drain included). Every price comes
from gpufleet/data/prices.yaml through the pools (:func:`pool`, :func:`reserved_pool`).

**Inference, autoscaled against static replicas.** One chat service (a whole GPU per replica,
12 requests per second, 250 ms a request, 90 s to load its model: the figures of
examples/autoscaling/chat-traffic.yaml; p95 objective 1 s) with :data:`PEAK_RPS` requests per
second at 14:00 on weekdays, a trough a tenth of it at 02:00, weekends at 60%, 10% noise, and a
1.5x burst of 20 minutes on two afternoons. Autoscaled: gpufleet's annotations (HPA's algorithm
on requests outstanding, 2 per replica, i.e. a replica at two thirds of its 3 slots, 2 to 96
replicas, 15-minute scale-down stabilisation) on an on-demand pool of AWS g5.xlarge nodes (one
A10G each: $1.006 per node-hour, the list's figure), 5-minute provisioning: a replica waits for
its node, then loads its model. The replicas are inference-critical (priority 1,000,000) and do
not tolerate the spot taint: never on spot. Static, sized for the peak: the replicas the
highest rate (the bursts' 450 requests per second) needs at the same two thirds of a replica's
slots the autoscaler aims at (57), on as many g5.xlarge nodes, all week. Measured: minutes
whose p95 latency met the objective, and GPU-hours: the nodes' (what is paid: the autoscaled
pool's from each node's asking to its leaving) and the replicas' (from placement). The pool
keeps the minimum replicas' 2 nodes from the start.

Targets (issue 15): batch cost at least 40% lower with every job completed and at most 5% of
GPU-hours lost to interruptions (lost / GPU-hours of work done); inference objective met in at
least 99% of minutes with at least 30% fewer GPU-hours (the nodes') than static. Medians over
``--seeds``. Results: benchmarks/results/elastic.md and .json (machine load before and after,
wall times); a progress line per run on stderr.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpufleet.backends.sim.inference import InferenceSettings, ServingReport
from gpufleet.backends.sim.node_pools import PoolSettings
from gpufleet.backends.sim.results import TenancyRun
from gpufleet.backends.sim.run import run_workloads
from gpufleet.backends.sim.workloads import sample_runtime
from gpufleet.io.cluster_traces.shapes import bundled_shape_table
from gpufleet.io.fleet.nodepools import node_pool_from_object
from gpufleet.io.readers import read_scenario
from gpufleet.model import PodClass, Toleration
from gpufleet.model.capacity import SPOT_TAINT
from gpufleet.model.node_faults import (
    AWS_SPOT_NOTICE_S,
    NodeFault,
    NodeFaultKind,
    NodeSelection,
    band_rate,
)
from gpufleet.model.nodepools import NodePool
from gpufleet.model.shapes import ShapeTable
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.report.summary import write_json

RESULTS = Path(__file__).resolve().parent / "results"
POLICY = "default"
HOUR = 3600.0
DAY = 86_400.0
PROVISIONING_DELAY_S = 300.0
SPOT_BAND = ">20%"
#: Multiples of the band's rate ``--stress`` also runs the elastic case at.
STRESS_FACTORS = (10.0, 100.0)
QUEUEING_SLACK_S = 600.0
#: ``--spot-outages``: the hours of each day (from the run's start, the week's midnight) in
#: which the spot pool has no capacity: the afternoon, when the arrivals peak.
SPOT_OUTAGE_HOURS = (12.0, 18.0)
CHECKPOINT_INTERVAL_S = 1800.0
ONE_GPU_GANG_SHARE = 0.1
#: Share of jobs by what they say about capacity (fault-tolerant, neither, non-preemptible).
NEEDS = {"fault-tolerant": 0.6, "any": 0.25, "non-preemptible": 0.15}
WEEKEND_FACTOR = 0.4
PEAK_TO_TROUGH = 3.0
PEAK_HOUR = 14.0
TARGET_COST_REDUCTION = 0.40
TARGET_LOST_SHARE = 0.05
TARGET_MINUTES_MET = 99.0
TARGET_GPU_HOUR_REDUCTION = 0.30
SPOT_TOLERATION = Toleration(SPOT_TAINT.key, "Equal", SPOT_TAINT.value, SPOT_TAINT.effect)
#: Inference load: weekday peak (requests per second), trough share, weekend factor.
PEAK_RPS = 300.0
TROUGH_SHARE = 0.1
INFERENCE_WEEKEND_FACTOR = 0.6
REPLICA_THROUGHPUT = 12.0
SERVICE_TIME_S = 0.25
#: Requests outstanding per replica the autoscaler keeps (of 12 x 0.25 = 3 slots: two thirds).
TARGET_QUEUE_DEPTH = 2.0
BURST_FACTOR = 1.5
MIN_REPLICAS = 2

P5 = {
    "cpu": "192",
    "memory": "2048Gi",
    "gpu": {"model": "NVIDIA-H100-80GB-HBM3", "count": 8, "memory": "80Gi"},
}
G5 = {"cpu": "4", "memory": "16Gi", "gpu": {"model": "NVIDIA-A10G", "count": 1, "memory": "24Gi"}}


def pool(
    name: str,
    capacity: str,
    node: dict[str, Any],
    max_nodes: int,
    min_nodes: int = 0,
    outages: Sequence[dict[str, str]] = (),
) -> NodePool:
    """A pool read as a ``kind: NodePool`` object, priced from the bundled price list;
    ``outages``: its ``spec.capacityOutages``."""
    obj = {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "capacityType": capacity,
            "minNodes": min_nodes,
            "maxNodes": max_nodes,
            "provisioningDelay": f"{PROVISIONING_DELAY_S:g}s",
            "node": node,
            **({"capacityOutages": list(outages)} if outages else {}),
        },
    }
    return node_pool_from_object(obj, "benchmarks/elastic.py")


def spot_outages(days: float) -> list[dict[str, str]]:
    """The spot pool's capacity outages: :data:`SPOT_OUTAGE_HOURS` of each day of ``days``
    and of the day after (the week's work drains into it)."""
    start, end = SPOT_OUTAGE_HOURS
    return [
        {"start": f"{day * 24 + start:g}h", "duration": f"{end - start:g}h"}
        for day in range(math.ceil(days) + 1)
    ]


def batch_pools(max_nodes: int, days: float | None = None) -> tuple[NodePool, NodePool]:
    """The on-demand and spot pools; with ``days``, the spot pool has daily outages."""
    outages = spot_outages(days) if days is not None else ()
    return (
        pool("h100-on-demand", "on-demand", P5, max_nodes),
        pool("h100-spot", "spot", P5, max_nodes, outages=outages),
    )


def reserved_pool(nodes: int) -> NodePool:
    """The same node bought reserved (the price list's reserved H100 price), for pricing a
    static fleet: a reserved fleet is the same nodes, paid less, for the whole period."""
    return pool("h100-reserved", "reserved", P5, nodes)


# ----------------------------------------------------------------------------- the week


def arrival_rate(t: np.ndarray) -> np.ndarray:
    """Relative arrival rate at seconds ``t`` (day 0 a Monday, 00:00)."""
    amplitude = (PEAK_TO_TROUGH - 1) / (PEAK_TO_TROUGH + 1)
    daily = 1 + amplitude * np.cos(2 * np.pi * (t - PEAK_HOUR * HOUR) / DAY)
    weekday = (t // DAY).astype(np.int64) % 7
    return daily * np.where(weekday >= 5, WEEKEND_FACTOR, 1.0)


def arrivals(count: int, days: float, rng: np.random.Generator) -> np.ndarray:
    """``count`` arrival times over ``days``, distributed as :func:`arrival_rate`."""
    grid = np.arange(0.0, days * DAY + 60.0, 60.0)
    cumulative = np.concatenate([[0.0], np.cumsum(arrival_rate(grid[:-1]))])
    cumulative /= cumulative[-1]
    return np.sort(np.interp(rng.random(count), cumulative, grid))


@dataclass(frozen=True, slots=True)
class Week:
    workloads: list[TimedWorkload]
    gpu_hours: float
    gangs: int
    needs: dict[str, int]


def batch_week(
    table: ShapeTable, days: float, jobs_per_day: float, seed: int, max_runtime: float
) -> Week:
    rng = np.random.default_rng(seed)
    gpu_shapes = [s for s in table.shapes if s.num_gpu > 0]
    weights = np.array([s.count for s in gpu_shapes], np.float64)
    count = max(1, round(jobs_per_day * days))
    picks = rng.choice(len(gpu_shapes), size=count, p=weights / weights.sum())
    times = arrivals(count, days, rng)
    needs = list(NEEDS)
    drawn = rng.choice(len(needs), size=count, p=np.array(list(NEEDS.values())))
    workloads: list[TimedWorkload] = []
    gpu_hours = 0.0
    gangs = 0
    tally = dict.fromkeys(needs, 0)
    for n, (pick, created, need_index) in enumerate(zip(picks, times, drawn, strict=True)):
        pod = gpu_shapes[pick].pod(f"job-{n:05d}")
        size = 1
        if pod.pod_class is PodClass.MULTI_GPU:
            size = int(rng.choice([2, 3, 4]))
        elif pod.pod_class is PodClass.ONE_GPU and rng.random() < ONE_GPU_GANG_SHARE:
            size = int(rng.choice([2, 4, 8]))
        runtime = min(sample_runtime(table, pod.pod_class, rng), max_runtime)
        runtime = max(runtime, 60.0)
        need = needs[need_index]
        tally[need] += 1
        tolerations = (SPOT_TOLERATION,) if need == "fault-tolerant" else ()
        members = tuple(
            replace(
                pod,
                name=f"{pod.name}-w{i}" if size > 1 else pod.name,
                namespace="batch",
                tolerations=tolerations,
            )
            for i in range(size)
        )
        workload = Workload(
            pod.name,
            "batch",
            members,
            "default",
            expected_runtime=round(runtime * 1.5, 1),
            checkpoint_interval=CHECKPOINT_INTERVAL_S if need == "fault-tolerant" else None,
            preemptible=need != "non-preemptible",
        )
        gangs += size > 1
        gpu_hours += size * pod.gpu.total_milli / 1000 * runtime / HOUR
        workloads.append(TimedWorkload(workload, float(created), runtime))
    return Week(workloads, gpu_hours, gangs, tally)


# ----------------------------------------------------------------------------- batch runs


@dataclass(slots=True)
class BatchSide:
    """One batch run, as the report says it."""

    label: str
    nodes: str
    cost: float
    node_hours: float
    hours: float
    jobs: int
    completed: int
    never_ran: int
    delay_p50: float
    delay_p95: float
    gpu_hours_done: float
    gpu_hours_lost: float = 0.0
    interruptions: int = 0
    spot_gpu_hours: float = 0.0
    node_hours_by_pool: dict[str, float] = field(default_factory=dict)
    peak_nodes: int = 0
    wall_s: float = 0.0

    @property
    def lost_share(self) -> float:
        return self.gpu_hours_lost / self.gpu_hours_done if self.gpu_hours_done else 0.0

    @property
    def all_done(self) -> bool:
        return self.completed == self.jobs and self.never_ran == 0


def progress(what: str) -> None:
    load = os.getloadavg()[0]
    print(f"[elastic] {what} (load {load:.2f})", file=sys.stderr, flush=True)


def spot_fault(factor: float = 1.0) -> NodeFault:
    return NodeFault(
        NodeFaultKind.SPOT_INTERRUPTION,
        f"aws-spot-advisor-{SPOT_BAND}" + ("" if factor == 1 else f"-x{factor:g}"),
        NodeSelection(capacity_type="spot"),
        rate_per_node_hour=band_rate(SPOT_BAND) * factor,
        notice=AWS_SPOT_NOTICE_S,
        back_after=None,
    )


def completed_of(run: TenancyRun) -> int:
    return sum(q.completed for q in run.tenancy.queues.values())


def gpu_hours_done(run: TenancyRun) -> float:
    return sum(q.gpu_hours_used for q in run.tenancy.queues.values())


def peak_nodes(run: TenancyRun) -> int:
    assert run.pools is not None
    return max((sum(counts) for _, counts in run.pools.timeline), default=0)


def run_elastic(
    week: Week,
    seed: int,
    max_nodes: int,
    factor: float = 1.0,
    spot: bool = True,
    outage_days: float | None = None,
) -> BatchSide:
    """The autoscaled pools: on-demand and spot (``spot``), else the on-demand pool alone;
    with ``outage_days``, the spot pool out of capacity daily (:func:`spot_outages`)."""
    pools = batch_pools(max_nodes, outage_days) if spot else batch_pools(max_nodes)[:1]
    if not spot:
        label = "autoscaled on-demand only"
    else:
        label = "elastic (on-demand + spot)" + ("" if factor == 1 else f", spot rate x{factor:g}")
        if outage_days is not None:
            start, end = SPOT_OUTAGE_HOURS
            label += f", spot out of capacity {start:02.0f}:00-{end:02.0f}:00 daily"
    progress(f"seed {seed}: {label}: {len(week.workloads):,} jobs ...")
    started = time.perf_counter()
    run = run_workloads(
        [], week.workloads, POLICY, seed,
        node_faults=[spot_fault(factor)], node_pools=PoolSettings(pools),
    )  # fmt: skip
    wall = time.perf_counter() - started
    report = run.pools
    assert report is not None
    interruptions = run.interruptions
    lost = interruptions.gpu_hours_lost if interruptions is not None else 0.0
    spot_gpu_hours = sum(u.gpu_hours for u in report.pools if u.capacity_type == "spot")
    side = BatchSide(
        label,
        " + ".join(p.name for p in pools) + f", 0-{max_nodes}" + (" each" if spot else ""),
        report.cost,
        report.node_hours,
        run.replay.simulated_seconds / HOUR,
        len(week.workloads),
        completed_of(run),
        run.replay.never_ran,
        run.replay.queueing_delay.p50,
        run.replay.queueing_delay.p95,
        gpu_hours_done(run),
        lost,
        0 if interruptions is None else interruptions.spot_interruptions,
        spot_gpu_hours,
        {u.pool: u.node_hours for u in report.pools},
        peak_nodes(run),
        wall,
    )
    progress(
        f"seed {seed}: {label}: ${side.cost:,.0f}, {side.completed}/{side.jobs} done, "
        f"peak {side.peak_nodes} nodes, p95 wait {side.delay_p95:.0f} s, "
        f"{side.interruptions} interruptions, {wall:.0f} s"
    )
    return side


def run_static(week: Week, seed: int, nodes: int, billed_hours: float) -> BatchSide:
    """``nodes`` on-demand nodes all the time, paid for the period (``billed_hours``, the
    week): a fleet is bought for the period; the run's tail beyond it is the week's work
    draining, which the next week's fleet (the same nodes) carries."""
    on_demand = batch_pools(nodes)[0]
    fleet = [on_demand.node(f"static-{i:03d}") for i in range(nodes)]
    progress(f"seed {seed}: static {nodes} nodes ...")
    started = time.perf_counter()
    run = run_workloads(fleet, week.workloads, POLICY, seed)
    wall = time.perf_counter() - started
    hours = run.replay.simulated_seconds / HOUR
    side = BatchSide(
        f"static {nodes} on-demand",
        f"{nodes} x {on_demand.name} (static)",
        nodes * billed_hours * on_demand.hourly_price,
        nodes * billed_hours,
        hours,
        len(week.workloads),
        completed_of(run),
        run.replay.never_ran,
        run.replay.queueing_delay.p50,
        run.replay.queueing_delay.p95,
        gpu_hours_done(run),
        node_hours_by_pool={"static on-demand": nodes * billed_hours},
        peak_nodes=nodes,
        wall_s=wall,
    )
    progress(
        f"seed {seed}: static {nodes}: ${side.cost:,.0f}, {side.completed}/{side.jobs} done, "
        f"p95 wait {side.delay_p95:.0f} s, {wall:.0f} s"
    )
    return side


def comparable(static: BatchSide, elastic: BatchSide) -> bool:
    return static.all_done and static.delay_p95 <= elastic.delay_p95 + QUEUEING_SLACK_S


def size_static(week: Week, seed: int, elastic: BatchSide, days: float) -> list[BatchSide]:
    """Static runs of a bisection for the smallest comparable fleet (see the docstring); the
    last one tried that is comparable is the baseline (the elastic peak if none smaller is)."""
    mean_nodes = week.gpu_hours / (days * 24) / 8
    low = max(1, math.ceil(mean_nodes)) - 1  # not comparable, assumed: below the mean demand
    high = elastic.peak_nodes
    billed = days * 24
    tried = [run_static(week, seed, high, billed)]
    while high - low > 1:
        middle = (low + high) // 2
        side = run_static(week, seed, middle, billed)
        tried.append(side)
        if comparable(side, elastic):
            high = middle
        else:
            low = middle
    return tried


def baseline_of(tried: Sequence[BatchSide], elastic: BatchSide) -> BatchSide:
    good = [s for s in tried if comparable(s, elastic)]
    return min(good, key=lambda s: s.peak_nodes) if good else tried[0]


def reserved_of(static: BatchSide, days: float) -> BatchSide:
    """The same static fleet bought reserved: the same run, priced at the list's reserved
    price for the same period."""
    reserved = reserved_pool(static.peak_nodes)
    billed = days * 24
    return replace(
        static,
        label=f"static {static.peak_nodes} reserved",
        nodes=f"{static.peak_nodes} x {reserved.name} (static)",
        cost=static.peak_nodes * billed * reserved.hourly_price,
        node_hours_by_pool={"static reserved": static.peak_nodes * billed},
        wall_s=0.0,
    )


@dataclass(slots=True)
class BatchSeed:
    seed: int
    week: dict[str, Any]
    elastic: BatchSide
    static_tried: list[BatchSide]
    baseline: BatchSide
    at_peak: BatchSide
    reserved: BatchSide
    on_demand_only: BatchSide
    stress: list[BatchSide]
    outages: BatchSide | None = None

    @property
    def cost_reduction(self) -> float:
        """Elastic against the smallest adequate static on-demand fleet."""
        return 1 - self.elastic.cost / self.baseline.cost

    @property
    def cost_reduction_at_peak(self) -> float:
        return 1 - self.elastic.cost / self.at_peak.cost

    @property
    def autoscaling_reduction(self) -> float:
        """What autoscaling alone saves: on-demand only against the same static baseline."""
        return 1 - self.on_demand_only.cost / self.baseline.cost

    @property
    def five(self) -> list[BatchSide]:
        """The five ways of buying the week, side by side."""
        return [self.at_peak, self.baseline, self.reserved, self.on_demand_only, self.elastic]


def run_batch_seed(args: argparse.Namespace, table: ShapeTable, seed: int) -> BatchSeed:
    week = batch_week(table, args.days, args.jobs_per_day, seed, args.max_runtime)
    elastic = run_elastic(week, seed, args.max_nodes)
    on_demand_only = run_elastic(week, seed, args.max_nodes, spot=False)
    tried = size_static(week, seed, elastic, args.days)
    stress = (
        [run_elastic(week, seed, args.max_nodes, f) for f in STRESS_FACTORS] if args.stress else []
    )
    outages = (
        run_elastic(week, seed, args.max_nodes, outage_days=args.days)
        if args.spot_outages
        else None
    )
    summary = {
        "jobs": len(week.workloads),
        "gangs": week.gangs,
        "gpu_hours_of_work": round(week.gpu_hours, 1),
        "mean_gpus_demanded": round(week.gpu_hours / (args.days * 24), 1),
        "needs": week.needs,
    }
    baseline = baseline_of(tried, elastic)
    return BatchSeed(
        seed, summary, elastic, tried, baseline, tried[0], reserved_of(baseline, args.days),
        on_demand_only, stress, outages,
    )  # fmt: skip


# ------------------------------------------------------------------------------ inference


def traffic_points(days: float, seed: int) -> list[tuple[float, float]]:
    """Requests per second every 5 minutes over ``days`` (before the simulator's noise)."""
    points = []
    trough = PEAK_RPS * TROUGH_SHARE
    for t in np.arange(0.0, days * DAY + 1, 300.0):
        wave = (1 + math.cos(2 * math.pi * (t - PEAK_HOUR * HOUR) / DAY)) / 2
        weekend = INFERENCE_WEEKEND_FACTOR if int(t // DAY) % 7 >= 5 else 1.0
        points.append((float(t), round((trough + (PEAK_RPS - trough) * wave) * weekend, 3)))
    return points


def bursts(days: float) -> list[dict[str, str | float]]:
    """A 1.5x burst of 20 minutes at 15:00 on the second and fourth days (where they exist)."""
    return [
        {"at": f"{day * 24 + 15}h", "duration": "20m", "factor": BURST_FACTOR}
        for day in (1, 3)
        if day < days
    ]


def inference_scenario(folder: Path, days: float, seed: int, replicas: int, scaled: bool) -> Path:
    annotations = {
        "gpufleet.dev/min-replicas": str(MIN_REPLICAS),
        "gpufleet.dev/max-replicas": "96",
        "gpufleet.dev/target-queue-depth": f"{TARGET_QUEUE_DEPTH:g}",
        "gpufleet.dev/scale-down-stabilization": "15m",
        "gpufleet.dev/model-load-time": "90s",
    }
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "inference-critical"},
            "value": 1_000_000,
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "chat",
                "namespace": "serving",
                "annotations": annotations if scaled else {},
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "chat"}},
                "template": {
                    "metadata": {"labels": {"app": "chat"}},
                    "spec": {
                        "priorityClassName": "inference-critical",
                        "containers": [
                            {
                                "name": "server",
                                "image": "chat-server",
                                "resources": {
                                    "requests": {"cpu": "3", "memory": "12Gi"},
                                    "limits": {"nvidia.com/gpu": 1},
                                },
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "gpufleet.dev/v1alpha1",
            "kind": "InferenceLoad",
            "metadata": {"name": "chat-traffic", "namespace": "serving"},
            "spec": {
                "target": {"kind": "Deployment", "name": "chat"},
                "requests": {
                    "file": "traffic.csv",
                    "noise": 0.1,
                    "bursts": bursts(days),
                    "duration": f"{days * 24:g}h",
                },
                "replica": {
                    "throughput": REPLICA_THROUGHPUT,
                    "serviceTime": f"{SERVICE_TIME_S:g}s",
                    "loadTime": "90s",
                },
                "slo": {"p95": "1s"},
            },
        },
    ]
    (folder / "traffic.csv").write_text(
        "".join(f"{t:g},{rps:g}\n" for t, rps in traffic_points(days, seed))
    )
    path = folder / ("scaled.yaml" if scaled else "static.yaml")
    path.write_text("---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects))
    return path


@dataclass(slots=True)
class InferenceSide:
    label: str
    report: ServingReport
    node_gpu_hours: float
    nodes_peak: int
    cost: float
    wall_s: float


def run_inference(days: float, seed: int, scaled: bool, replicas: int) -> InferenceSide:
    g5 = pool("a10g-on-demand", "on-demand", G5, 200, MIN_REPLICAS)
    label = "autoscaled" if scaled else f"static {replicas}"
    progress(f"seed {seed}: inference {label} ...")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        scenario = read_scenario(inference_scenario(Path(folder), days, seed, replicas, scaled))
    settings = InferenceSettings(
        tuple(scenario.inference),
        {spec.target.key: spec for spec in scenario.autoscaling},
        dict(scenario.replica_templates),
        dict(scenario.replica_owner),
    )
    if scaled:
        run = run_workloads(
            [], scenario.workloads, POLICY, seed, scenario.queues, inference=settings,
            node_pools=PoolSettings((g5,)),
        )  # fmt: skip
        assert run.pools is not None
        node_gpu_hours, cost, peak = run.pools.gpu_hours, run.pools.cost, peak_nodes(run)
    else:
        fleet = [g5.node(f"static-{i:03d}") for i in range(replicas)]
        run = run_workloads(
            fleet, scenario.workloads, POLICY, seed, scenario.queues, inference=settings
        )
        hours = run.replay.simulated_seconds / HOUR
        node_gpu_hours, cost, peak = replicas * hours, replicas * hours * g5.hourly_price, replicas
    (report,) = run.serving
    wall = time.perf_counter() - started
    progress(
        f"seed {seed}: inference {label}: {report.minutes_met_pct:.2f}% of minutes met, "
        f"{node_gpu_hours:,.0f} node GPU-h, replicas {report.replicas_min}-"
        f"{report.replicas_max}, {wall:.0f} s"
    )
    return InferenceSide(label, report, node_gpu_hours, peak, cost, wall)


@dataclass(slots=True)
class InferenceSeed:
    seed: int
    scaled: InferenceSide
    static: InferenceSide

    @property
    def gpu_hour_reduction(self) -> float:
        return 1 - self.scaled.node_gpu_hours / self.static.node_gpu_hours

    @property
    def replica_gpu_hour_reduction(self) -> float:
        return 1 - self.scaled.report.gpu_hours / self.static.report.gpu_hours


def static_replicas() -> int:
    """Replicas for the highest rate of the load (bursts included) at the share of a
    replica's slots the autoscaler keeps busy: peak provisioning with the same headroom."""
    per_replica = REPLICA_THROUGHPUT * TARGET_QUEUE_DEPTH / (REPLICA_THROUGHPUT * SERVICE_TIME_S)
    return math.ceil(PEAK_RPS * BURST_FACTOR / per_replica)


def run_inference_seed(days: float, seed: int) -> InferenceSeed:
    scaled = run_inference(days, seed, True, MIN_REPLICAS)
    static = run_inference(days, seed, False, static_replicas())
    return InferenceSeed(seed, scaled, static)


# -------------------------------------------------------------------------------- report


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def hm(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def checks(batch: Sequence[BatchSeed], serving: Sequence[InferenceSeed]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if batch:
        reduction = median([b.cost_reduction for b in batch])
        all_done = all(b.elastic.all_done for b in batch)
        lost = median([b.elastic.lost_share for b in batch])
        worst_lost = max(b.elastic.lost_share for b in batch)
        out += [
            {
                "check": "batch cost >= 40% lower than the smallest adequate static on-demand "
                "fleet (both priced from gpufleet/data/prices.yaml, the fleet for the week)",
                "measured": f"median {reduction:.1%} lower (per seed: "
                + ", ".join(f"{b.cost_reduction:.1%}" for b in batch)
                + ")",
                "passed": reduction >= TARGET_COST_REDUCTION,
            },
            {
                "check": "every job completed (elastic)",
                "measured": ", ".join(f"{b.elastic.completed}/{b.elastic.jobs}" for b in batch),
                "passed": all_done,
            },
            {
                "check": "<= 5% of GPU-hours lost to interruptions",
                "measured": f"median {lost:.2%}, worst {worst_lost:.2%}",
                "passed": worst_lost <= TARGET_LOST_SHARE,
            },
        ]
    if serving:
        met = median([s.scaled.report.minutes_met_pct for s in serving])
        worst = min(s.scaled.report.minutes_met_pct for s in serving)
        fewer = median([s.gpu_hour_reduction for s in serving])
        out += [
            {
                "check": "inference p95 objective met in >= 99% of minutes (autoscaled)",
                "measured": f"median {met:.2f}%, worst {worst:.2f}%",
                "passed": worst >= TARGET_MINUTES_MET,
            },
            {
                "check": "inference >= 30% fewer GPU-hours than static peak provisioning",
                "measured": f"median {fewer:.1%} fewer (node GPU-hours)",
                "passed": fewer >= TARGET_GPU_HOUR_REDUCTION,
            },
        ]
    return out


def five_way_table(batch: Sequence[BatchSeed]) -> list[str]:
    """The five ways of buying each seed's week, side by side."""
    lines = [
        "| seed | how the week is bought | nodes | cost ($) | against the smallest adequate "
        "static on-demand fleet | against static on-demand at the peak | queueing p95 | "
        "jobs done |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    names = [
        "static on-demand at the elastic peak",
        "smallest adequate static on-demand",
        "the same fleet reserved",
        "autoscaled on-demand only",
        "elastic: autoscaled on-demand + spot",
    ]
    for b in batch:
        for name, side in zip(names, b.five, strict=True):
            lines.append(
                f"| {b.seed} | {name} | {side.nodes} | {side.cost:,.0f} | "
                f"{signed(1 - side.cost / b.baseline.cost)} | "
                f"{signed(1 - side.cost / b.at_peak.cost)} | {hm(side.delay_p95)} | "
                f"{side.completed:,}/{side.jobs:,} |"
            )
    return lines


def signed(saving: float) -> str:
    """A saving as the report says it: ``-43.1%`` cheaper, ``+12.0%`` dearer, ``0.0%``."""
    return "0.0%" if round(saving, 3) == 0 else f"{-saving:+.1%}"


def sweep_table(batch: Sequence[BatchSeed]) -> list[str]:
    """Elastic at the band's rate (its lower edge) and at the stress multiples of it."""
    lines = [
        "| seed | spot interruption rate | per node-hour | chance a node is struck in a month | "
        "interruptions | GPU-h lost (% of work done) | spot share of GPU-h | cost ($) | "
        "against the smallest adequate static |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b in batch:
        for factor, side in zip((1.0, *STRESS_FACTORS), [b.elastic, *b.stress], strict=False):
            rate = band_rate(SPOT_BAND) * factor
            what = f"{SPOT_BAND} band's lower edge" + ("" if factor == 1 else f" x{factor:g}")
            total_gpu_h = side.node_hours * 8
            lines.append(
                f"| {b.seed} | {what} | {rate:.3g} | {-math.expm1(-rate * 730):.1%} | "
                f"{side.interruptions} | {side.gpu_hours_lost:,.1f} ({side.lost_share:.2%}) | "
                f"{side.spot_gpu_hours / total_gpu_h:.0%} | {side.cost:,.0f} | "
                f"{signed(1 - side.cost / b.baseline.cost)} |"
            )
    return lines


def batch_table(batch: Sequence[BatchSeed]) -> list[str]:
    lines = [
        "| seed | run | nodes | cost ($) | node-hours paid | run length | jobs done | "
        "queueing p50 / p95 | GPU-h of work | GPU-h lost (%) | spot interruptions | "
        "spot share of GPU-h | peak nodes | wall |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b in batch:
        outages = [b.outages] if b.outages is not None else []
        sides = [b.elastic, b.on_demand_only, *b.stress, *outages, *b.static_tried, b.reserved]
        for side in sides:
            mark = " (baseline)" if side is b.baseline else ""
            total_gpu_h = side.node_hours * 8
            spot = f"{side.spot_gpu_hours / total_gpu_h:.0%}" if total_gpu_h else "-"
            lines.append(
                f"| {b.seed} | {side.label}{mark} | {side.nodes} | {side.cost:,.0f} | "
                f"{side.node_hours:,.0f} | {side.hours:,.1f} h | "
                f"{side.completed:,}/{side.jobs:,} | "
                f"{hm(side.delay_p50)} / {hm(side.delay_p95)} | {side.gpu_hours_done:,.0f} | "
                f"{side.gpu_hours_lost:,.1f} ({side.lost_share:.2%}) | {side.interruptions} | "
                f"{spot} | {side.peak_nodes} | {side.wall_s:.0f} s |"
            )
    return lines


def inference_table(serving: Sequence[InferenceSeed]) -> list[str]:
    lines = [
        "| seed | run | minutes met | p95 latency (p50 / p95 of minutes) | replicas min-max "
        "(mean) | node GPU-h | replica GPU-h | nodes peak | cost ($) | wall |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in serving:
        for side in (s.scaled, s.static):
            r = side.report
            lat = (
                f"{r.latency_p50_s:.2f} / {r.latency_p95_s:.2f} s"
                if r.latency_p50_s is not None and r.latency_p95_s is not None
                else "unbounded"
            )
            lines.append(
                f"| {s.seed} | {side.label} | {r.minutes_met_pct:.2f}% of {r.minutes:,} | {lat} | "
                f"{r.replicas_min}-{r.replicas_max} ({r.replicas_mean:.1f}) | "
                f"{side.node_gpu_hours:,.0f} | {r.gpu_hours:,.0f} | {side.nodes_peak} | "
                f"{side.cost:,.0f} | {side.wall_s:.0f} s |"
            )
    return lines


def write_markdown(
    path: Path,
    args: argparse.Namespace,
    batch: Sequence[BatchSeed],
    serving: Sequence[InferenceSeed],
    machine: dict[str, Any],
) -> None:
    od, spot = batch_pools(args.max_nodes)
    reserved = reserved_pool(1)
    g5 = pool("a10g-on-demand", "on-demand", G5, 200)
    week_h = args.days * 24
    lines = [
        "# Elastic capacity against static, reserved and autoscaled on-demand capacity",
        "",
        f"Command: `{machine['command']}`  ",
        f"Machine: {machine['machine']}; load average before {machine['load_before']}, after "
        f"{machine['load_after']}; wall time {machine['wall_s']:.0f} s.",
        "",
        "Configuration (the script's docstring says why each choice): "
        f"{args.days:g} days of GPU jobs drawn from the bundled Alibaba 2023 shape table, "
        f"{args.jobs_per_day:g} jobs a day on average (diurnal, peak at 14:00, trough a third "
        f"of it; weekends at {WEEKEND_FACTOR:.0%}), run times from the trace's quantiles capped "
        f"at {hm(args.max_runtime)}; multi-GPU pods as gangs of 2-4, "
        f"{ONE_GPU_GANG_SHARE:.0%} of one-GPU pods as gangs of 2/4/8; "
        + ", ".join(f"{v:.0%} {k}" for k, v in NEEDS.items())
        + f" (fault-tolerant: spot toleration and a {hm(CHECKPOINT_INTERVAL_S)} checkpoint).",
        "",
        f"Pools: `{od.name}` and `{spot.name}`, AWS p5.48xlarge (8 x H100), 0-{args.max_nodes} "
        f"nodes each, {hm(PROVISIONING_DELAY_S)} provisioning. Prices (gpufleet/data/prices.yaml): "
        f"on-demand ${od.hourly_price:.2f}/node-h ({od.price_source}), spot "
        f"${spot.hourly_price:.2f}/node-h ({spot.price_source}: the list's 0.6 x on-demand GPU "
        f"estimate and OpenCost's spot vCPU/memory), reserved ${reserved.hourly_price:.2f}/"
        f"node-h ({reserved.price_source}). Spot interruptions: AWS Spot Instance Advisor band "
        f"{SPOT_BAND} a month, taken at its lower edge (20% a month, the least it says) = "
        f"{band_rate(SPOT_BAND):.3g} per node-hour, 2-minute notice, nodes not coming back "
        "(the pool replaces them)"
        + (
            ", and at " + " and ".join(f"{f:g}x" for f in STRESS_FACTORS) + " that rate"
            if args.stress
            else ""
        )
        + (
            f"; with --spot-outages the spot pool is also out of capacity "
            f"{SPOT_OUTAGE_HOURS[0]:02.0f}:00-{SPOT_OUTAGE_HOURS[1]:02.0f}:00 each day (its "
            "requests fail at once; on-demand takes the work, the spot pool asked again every "
            "3 minutes)"
            if args.spot_outages
            else ""
        )
        + ". Static fleets: the smallest adequate on-demand fleet (bisection, at most the "
        "elastic run's peak of nodes at once, with every job done and p95 queueing within "
        f"{hm(QUEUEING_SLACK_S)} of the elastic run's), the same fleet bought reserved, and an "
        "on-demand fleet of the elastic run's peak; each is paid for the period, "
        f"{week_h:g} h (a fleet is bought for the period; the run's tail beyond it is the "
        "period's work draining, carried by the next period's same fleet). The autoscaled "
        "runs pay each node from its asking to its leaving, the drain included.",
        "",
        f"Inference: a chat service, 1 A10G per replica (g5.xlarge, ${g5.hourly_price:.3f}/"
        f"node-h, {g5.price_source}), {REPLICA_THROUGHPUT:g} req/s per replica, 250 ms, 90 s "
        f"model load, p95 objective 1 s; {PEAK_RPS:g} req/s weekday peak, trough "
        f"{TROUGH_SHARE:.0%}, weekends {INFERENCE_WEEKEND_FACTOR:.0%}, two 1.5x 20-minute "
        "bursts; autoscaled on requests outstanding (2 per replica, 2-96 replicas, 15-minute "
        "scale-down window) on an on-demand pool (5-minute provisioning, the pool keeping the "
        f"minimum's {MIN_REPLICAS} nodes), against {static_replicas()} static replicas (the "
        "highest rate, bursts included, at the same 2 of 3 slots per replica). A separate "
        "run from the batch part.",
        "",
        "## Targets",
        "",
        "| check | measured | result |",
        "|---|---|---|",
    ]
    for c in checks(batch, serving):
        lines.append(f"| {c['check']} | {c['measured']} | {'pass' if c['passed'] else 'FAIL'} |")
    if batch:
        spot_points = [b.autoscaling_reduction - b.cost_reduction for b in batch]
        lines += [
            "",
            "## Batch and training",
            "",
            "### Five ways to buy the week",
            "",
            "Every cost from gpufleet/data/prices.yaml; percentages against the smallest "
            "adequate static on-demand fleet (negative: cheaper) and against an on-demand fleet "
            "of the elastic peak.",
            "",
            *five_way_table(batch),
            "",
            "Where the saving comes from (medians over seeds): autoscaling on-demand alone saves "
            f"{median([b.autoscaling_reduction for b in batch]):.1%} against the smallest "
            f"adequate static on-demand fleet; spot adds {-median(spot_points) * 100:.1f} points "
            f"(at the estimated spot price) for {median([b.cost_reduction for b in batch]):.1%} "
            "in all. The same static fleet bought reserved costs "
            f"{median([1 - b.reserved.cost / b.baseline.cost for b in batch]):.1%} less than "
            "on-demand, "
            + ", ".join(
                f"seed {b.seed}: ${b.reserved.cost:,.0f} against the elastic run's "
                f"${b.elastic.cost:,.0f}"
                for b in batch
            )
            + ": at the list's reserved price (EC2 Capacity Blocks), a reserved fleet sized "
            "for the week is "
            + (
                "cheaper than elastic capacity"
                if all(b.reserved.cost < b.elastic.cost for b in batch)
                else "not cheaper than elastic capacity in every seed"
            )
            + ".",
            "",
        ]
        if args.stress:
            lines += [
                "### Spot interruption rate",
                "",
                "The elastic run at the band's lower edge and at "
                + " and ".join(f"{f:g}x" for f in STRESS_FACTORS)
                + " it (the chance a node is struck in a month: 1 - exp(-rate x 730 h)).",
                "",
                *sweep_table(batch),
                "",
            ]
        lines += [
            "### Every run",
            "",
            "Cost reduction per seed against the baseline (and against static at the elastic "
            "peak): "
            + ", ".join(
                f"seed {b.seed}: {b.cost_reduction:.1%} ({b.cost_reduction_at_peak:.1%})"
                for b in batch
            )
            + ".",
            "",
            "Workload per seed: "
            + "; ".join(
                f"seed {b.seed}: {b.week['jobs']:,} jobs ({b.week['gangs']} gangs), "
                f"{b.week['gpu_hours_of_work']:,.0f} GPU-h of work, mean "
                f"{b.week['mean_gpus_demanded']:g} GPUs demanded"
                for b in batch
            )
            + ".",
            "",
            "Node-hours per pool (elastic): "
            + "; ".join(
                f"seed {b.seed}: "
                + ", ".join(f"{k} {v:,.0f}" for k, v in b.elastic.node_hours_by_pool.items())
                for b in batch
            )
            + ".",
            "",
            *batch_table(batch),
        ]
    if serving:
        lines += [
            "",
            "## Inference",
            "",
            "Node GPU-hours reduction per seed (replica GPU-hours in brackets): "
            + ", ".join(
                f"seed {s.seed}: {s.gpu_hour_reduction:.1%} ({s.replica_gpu_hour_reduction:.1%})"
                for s in serving
            )
            + ".",
            "",
            *inference_table(serving),
        ]
    path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--jobs-per-day", type=float, default=600.0)
    parser.add_argument("--max-runtime", type=float, default=24 * HOUR, help="Seconds.")
    parser.add_argument("--max-nodes", type=int, default=64, help="Per pool.")
    parser.add_argument(
        "--stress",
        action="store_true",
        help="Also the spot rate x" + " and x".join(f"{f:g}" for f in STRESS_FACTORS) + ".",
    )
    parser.add_argument(
        "--spot-outages",
        action="store_true",
        help="Also the elastic case with the spot pool out of capacity "
        f"{SPOT_OUTAGE_HOURS[0]:02.0f}:00-{SPOT_OUTAGE_HOURS[1]:02.0f}:00 each day.",
    )
    parser.add_argument("--skip-batch", action="store_true")
    parser.add_argument("--skip-inference", action="store_true")
    parser.add_argument("--quick", action="store_true", help="One day, few jobs: a smoke run.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.days, args.jobs_per_day, args.max_runtime = 1.0, 40.0, 4 * HOUR
        args.max_nodes = min(args.max_nodes, 16)
    command = "python benchmarks/elastic.py " + " ".join(sys.argv[1:] if argv is None else argv)
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    table = bundled_shape_table()
    batch = [] if args.skip_batch else [run_batch_seed(args, table, seed) for seed in args.seeds]
    serving = [] if args.skip_inference else [run_inference_seed(args.days, s) for s in args.seeds]
    machine = {
        "command": command.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}",
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_markdown(args.out / "elastic.md", args, batch, serving, machine)
    write_json(
        args.out / "elastic.json",
        {
            "settings": vars(args) | {"out": str(args.out), "policy": POLICY},
            "machine": machine,
            "checks": checks(batch, serving),
            "batch": [_batch_json(b) for b in batch],
            "inference": [_inference_json(s) for s in serving],
        },
    )
    for c in checks(batch, serving):
        print(f"{c['check']}: {c['measured']}: {'pass' if c['passed'] else 'FAIL'}")
    print(f"wrote {args.out / 'elastic.md'}")
    return 0


def _side_json(side: BatchSide) -> dict[str, Any]:
    return {
        "label": side.label,
        "nodes": side.nodes,
        "cost": round(side.cost, 2),
        "node_hours": round(side.node_hours, 3),
        "hours": round(side.hours, 3),
        "jobs": side.jobs,
        "completed": side.completed,
        "never_ran": side.never_ran,
        "queueing_delay_p50_s": round(side.delay_p50, 1),
        "queueing_delay_p95_s": round(side.delay_p95, 1),
        "gpu_hours_done": round(side.gpu_hours_done, 3),
        "gpu_hours_lost": round(side.gpu_hours_lost, 3),
        "lost_share": round(side.lost_share, 5),
        "spot_interruptions": side.interruptions,
        "spot_gpu_hours": round(side.spot_gpu_hours, 3),
        "node_hours_by_pool": side.node_hours_by_pool,
        "peak_nodes": side.peak_nodes,
        "wall_s": round(side.wall_s, 1),
    }


def _batch_json(b: BatchSeed) -> dict[str, Any]:
    return {
        "seed": b.seed,
        "workload": b.week,
        "elastic": _side_json(b.elastic),
        "on_demand_only": _side_json(b.on_demand_only),
        "stress": [_side_json(s) for s in b.stress],
        "stress_factors": list(STRESS_FACTORS[: len(b.stress)]),
        "spot_outages": None if b.outages is None else _side_json(b.outages),
        "static_tried": [_side_json(s) for s in b.static_tried],
        "reserved": _side_json(b.reserved),
        "baseline": b.baseline.label,
        "static_at_peak": b.at_peak.label,
        "cost_reduction": round(b.cost_reduction, 5),
        "autoscaling_only_reduction": round(b.autoscaling_reduction, 5),
        "reserved_reduction": round(1 - b.reserved.cost / b.baseline.cost, 5),
        "cost_reduction_vs_static_at_elastic_peak": round(b.cost_reduction_at_peak, 5),
    }


def _inference_json(s: InferenceSeed) -> dict[str, Any]:
    def side(x: InferenceSide) -> dict[str, Any]:
        r = replace(x.report, timeline=())
        return {
            "label": x.label,
            "node_gpu_hours": round(x.node_gpu_hours, 3),
            "nodes_peak": x.nodes_peak,
            "cost": round(x.cost, 2),
            "wall_s": round(x.wall_s, 1),
            "serving": r,
        }

    return {
        "seed": s.seed,
        "autoscaled": side(s.scaled),
        "static": side(s.static),
        "node_gpu_hour_reduction": round(s.gpu_hour_reduction, 5),
        "replica_gpu_hour_reduction": round(s.replica_gpu_hour_reduction, 5),
    }


if __name__ == "__main__":
    sys.exit(main())
