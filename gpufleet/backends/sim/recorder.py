"""Measure a simulation as it runs: what arrived, what ran, what failed, and the cluster over
time (GPU allocation, fragmentation, per GPU model), then summarise it as a result.

The scheduler's own metrics are the ones every world serves (:attr:`Recorder.metrics`, from
:mod:`gpufleet.metrics`): the run's control loop counts into them, and a result carries their
values at the end under the names ``/metrics`` gives them."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import numpy.typing as npt

from gpufleet.backends.sim.fill import MAX_ARRIVED_PCT, bucket_means
from gpufleet.backends.sim.holds import HoldLog
from gpufleet.backends.sim.results import (
    ClassStats,
    DelayStats,
    FillRun,
    ReplayRun,
    Timeline,
)
from gpufleet.metrics.scheduler import SchedulerMetrics
from gpufleet.model import Placement, Pod
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.node_table import Allocation, NodeTable
from gpufleet.scheduling.target import TargetWorkload

#: Replay timelines are thinned to about this many points for reports.
MAX_TIMELINE_POINTS = 2000


class Recorder:
    """Collects the events and samples of one simulated cluster run."""

    def __init__(self, world: NodeTable, target: TargetWorkload) -> None:
        self.world = world
        self.capacity = max(world.total_gpu_milli(), 1)
        self.frag = FragmentationModel(world, target)
        self.models = list(world.model_names)
        self._model_capacity = np.zeros(len(self.models), np.int64)
        self._model_alloc = np.zeros(len(self.models), np.int64)
        self.nodes_changed()
        self.arrived_milli = 0
        self.allocated_milli = 0
        self.classes: dict[str, ClassStats] = defaultdict(ClassStats)
        self.arrival_time: dict[str, float] = {}
        self.class_of: dict[str, str] = {}
        self.delays: dict[str, list[float]] = defaultdict(list)
        self.messages: dict[str, str] = {}
        self.violations: list[str] = []
        self.pending = 0
        self.running = 0
        self._started: set[str] = set()
        #: (time, arrived, allocated, fragmentation, pending, running, capacity) in milli-GPU.
        self._samples: list[tuple[float, int, int, float, int, int, int]] = []
        #: Per sample, each GPU model's (allocated, capacity) in milli-GPU.
        self._model_samples: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        #: The scheduler's metrics: the loop observes into them; ``read`` gives its core's
        #: state (set by whoever runs the core).
        self.metrics = SchedulerMetrics()
        #: Every pod's runs, kept where a run is costed (None: not kept).
        self.holds: HoldLog | None = None

    def nodes_changed(self) -> None:
        """Nodes joined or left (a node pool's): the GPUs each model has, a model new to the
        run counted from now on (fill-up runs keep their first capacity, their buckets'
        unit)."""
        world = self.world
        self.models = list(world.model_names)
        grow = len(self.models) - self._model_alloc.size
        if grow > 0:
            self._model_alloc = np.concatenate([self._model_alloc, np.zeros(grow, np.int64)])
        n = world.size
        capacity = np.zeros(len(self.models), np.int64)
        for model_id in range(len(self.models)):
            rows = (world.model_id[:n] == model_id) & world.alive[:n]
            capacity[model_id] = int(world.gpu_count[:n][rows].sum()) * 1000
        self._model_capacity = capacity
        self.live_capacity = int(world.total_gpu_milli())

    # ----------------------------------------------------------------------------- events
    def arrived(self, pod: Pod, now: float) -> None:
        stats = self.classes[str(pod.pod_class)]
        milli = pod.gpu.total_milli
        stats.arrived += 1
        stats.arrived_gpu_milli += milli
        if self.arrived_milli + milli <= self.capacity:
            stats.arrived_by_100 += 1
        self.arrived_milli += milli
        self.arrival_time[pod.key] = now
        self.class_of[pod.key] = str(pod.pod_class)
        self.pending += 1

    def bound(self, pod: Pod, placement: Placement, allocation: Allocation, now: float) -> None:
        milli = allocation.gpu_milli
        self.allocated_milli += milli
        model = int(self.world.model_id[allocation.row])
        if model >= 0 and milli:
            self._model_alloc[model] += milli
        if pod.key not in self._started:  # a pod bound again after eviction waited once
            self._started.add(pod.key)
            self.delays[str(pod.pod_class)].append(now - self.arrival_time.get(pod.key, now))
        self.messages.pop(pod.key, None)
        self.pending -= 1
        self.running += 1
        if self.holds is not None:
            self.holds.bound(pod, placement, now)

    def finished(self, key: str, allocation: Allocation, now: float) -> None:
        milli = allocation.gpu_milli
        self.allocated_milli -= milli
        model = int(self.world.model_id[allocation.row])
        if model >= 0 and milli:
            self._model_alloc[model] -= milli
        self.running -= 1
        if self.holds is not None:
            self.holds.stopped(key, now)

    def evicted(self, key: str, allocation: Allocation, now: float) -> None:
        """A running pod stopped and waits again."""
        self.finished(key, allocation, now)
        self.pending += 1

    def unschedulable(self, pod: Pod, message: str, now: float) -> None:
        self.messages[pod.key] = message

    def dropped(self, pod: Pod, now: float) -> None:
        stats = self.classes[str(pod.pod_class)]
        stats.failed += 1
        stats.failed_gpu_milli += pod.gpu.total_milli
        if self.arrived_milli <= self.capacity:
            stats.failed_by_100 += 1
        self.messages.pop(pod.key, None)
        self.pending -= 1

    def violation(self, pod: Pod, message: str, now: float) -> None:
        self.violations.append(f"{pod.key}: {message}")

    def sample(self, now: float) -> None:
        self._samples.append(
            (
                now,
                self.arrived_milli,
                self.allocated_milli,
                self.frag.cluster_frag(),
                self.pending,
                self.running,
                self.live_capacity,
            )
        )
        self._model_samples.append((self._model_alloc.copy(), self._model_capacity))

    # ----------------------------------------------------------------------------- results
    def _columns(self) -> tuple[npt.NDArray[np.float64], ...]:
        data = np.asarray(self._samples, np.float64).reshape(-1, 7)
        return tuple(data[:, i] for i in range(7))

    def _model_pct(self) -> npt.NDArray[np.float64]:
        """Per sample and GPU model, the share of its GPUs allocated then (a model that joined
        later reads 0 before)."""
        width = len(self.models)
        allocs = np.zeros((len(self._model_samples), width), np.float64)
        capacity = np.ones((len(self._model_samples), width), np.float64)
        for i, (alloc, cap) in enumerate(self._model_samples):
            allocs[i, : alloc.size] = alloc
            capacity[i, : cap.size] = np.maximum(cap, 1)
        return 100.0 * allocs / capacity

    def fill_result(
        self, policy: str, seed: int, seconds: float, pods: int, impossible: int
    ) -> FillRun:
        _, arrived, allocated, frag, _, _, _ = self._columns()
        arrived_i = arrived.astype(np.int64)
        allocated_pct = bucket_means(arrived_i, 100.0 * allocated / self.capacity, self.capacity)
        frag_pct = bucket_means(arrived_i, 100.0 * frag / self.capacity, self.capacity)
        model_pct = self._model_pct()
        by_model = {
            name: _rounded(bucket_means(arrived_i, model_pct[:, i], self.capacity))
            for i, name in enumerate(self.models)
        }
        return FillRun(
            policy=policy,
            seed=seed,
            seconds=round(seconds, 4),
            nodes=self.world.size,
            pods=pods,
            capacity_gpu_milli=self.capacity,
            unallocated_gpu_pct=_rounded(100.0 - allocated_pct),
            fragmentation_pct=_rounded(frag_pct),
            allocated_pct_by_model=by_model,
            classes=dict(self.classes),
            impossible_pods=impossible,
            bind_violations=len(self.violations),
            metrics=self.metrics.samples(),
        )

    def replay_result(
        self, policy: str, seed: int, seconds: float, pods: int, never_ran: dict[str, str]
    ) -> ReplayRun:
        time, _, allocated, frag, pending, running, live = self._columns()
        live = np.maximum(live, 1.0)  # a node pool's cluster grows and shrinks
        keep = _thin(time.size, MAX_TIMELINE_POINTS)
        model_pct = self._model_pct()
        timeline = Timeline(
            time=_rounded(time[keep]),
            allocated_gpu_pct=_rounded(100.0 * allocated[keep] / live[keep]),
            fragmentation_pct=_rounded(100.0 * frag[keep] / live[keep]),
            pending=[int(v) for v in pending[keep]],
            running=[int(v) for v in running[keep]],
            allocated_pct_by_model={
                name: _rounded(model_pct[keep, i]) for i, name in enumerate(self.models)
            },
        )
        all_delays = np.asarray([d for ds in self.delays.values() for d in ds], np.float64)
        for key in never_ran:
            self.classes[self.class_of[key]].failed += 1
        examples = [{"pod": k, "reason": v} for k, v in list(never_ran.items())[:50]]
        return ReplayRun(
            policy=policy,
            seed=seed,
            seconds=round(seconds, 4),
            nodes=self.world.size,
            pods=pods,
            capacity_gpu_milli=self.capacity,
            queueing_delay=delay_stats(all_delays),
            queueing_delay_by_class={
                cls: delay_stats(np.asarray(ds, np.float64)) for cls, ds in self.delays.items()
            },
            delays=_rounded(np.sort(all_delays)[_thin(all_delays.size, MAX_TIMELINE_POINTS)]),
            timeline=timeline,
            never_ran=len(never_ran),
            never_ran_examples=examples,
            classes=dict(self.classes),
            simulated_seconds=float(time[-1]) if time.size else 0.0,
            bind_violations=len(self.violations),
            metrics=self.metrics.samples(),
        )


def delay_stats(delays: npt.NDArray[np.float64]) -> DelayStats:
    if delays.size == 0:
        return DelayStats()
    p50, p95 = np.percentile(delays, [50, 95])
    return DelayStats(
        round(float(p50), 3),
        round(float(p95), 3),
        round(float(delays.max()), 3),
        round(float(delays.mean()), 3),
        int(delays.size),
    )


def _thin(size: int, points: int) -> npt.NDArray[np.int64]:
    if size <= points:
        return np.arange(size, dtype=np.int64)
    return np.unique(np.linspace(0, size - 1, points).round().astype(np.int64))


def _rounded(values: npt.NDArray[np.float64]) -> list[float]:
    return [round(float(v), 4) for v in values]


__all__ = ["MAX_ARRIVED_PCT", "Recorder", "delay_stats"]
