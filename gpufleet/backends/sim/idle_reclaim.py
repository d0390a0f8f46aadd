"""Idle policies in the batch simulator: every minute of simulated time, judge and act.

Owns :class:`IdleTicking`, a :class:`~gpufleet.control.backend.ClusterBackend` around a
:class:`~gpufleet.backends.sim.cluster.SimulatedCluster` that wakes the control loop every
``every_s`` of simulated time (the world's own events go on as before) and, at each tick,
reads the world's GPU telemetry (:class:`~gpufleet.backends.sim.telemetry.SimTelemetry`: the
usage profiles), records each running pod's mean utilisation over the GPUs it holds
(``gpufleet_workload_gpu_util``, in :class:`PodUtilisation`), asks the
:class:`~gpufleet.telemetry.idle.IdleEngine` which steps are due, and carries them out:

* Notify, Checkpoint: recorded (the simulated workloads have no owner to tell; work a
  checkpointing workload did is not lost by a Stop, as the Stop ends it);
* Stop: its pods are evicted for good (``PodDeleted`` as evicted, the reason the decision's
  message) and the GPU-hours it would still have held are counted as reclaimed;
* ScaleToZero: the simulator has no replica sets (a Deployment's replicas are workloads of
  their own), so it stops the workload, noted as such;
* Preemptible: the workload is lowered to preemptible at the lowest priority
  (``WorkloadDemoted``): what waits may preempt it, and if preempted it waits so lowered.

What was done comes back as an :class:`IdleReport`. A dry run records the decisions and acts on
none. It decides nothing itself (the engine does).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.backends.sim.cluster import SimulatedCluster
from gpufleet.backends.sim.telemetry import SimTelemetry
from gpufleet.control.backend import Clock, ClusterState
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.actions import Action
from gpufleet.model.alerts import LabelSet
from gpufleet.model.events import ClusterEvent
from gpufleet.model.idle import (
    TRAINING_KINDS,
    IdleAction,
    IdleCandidate,
    IdleDecision,
    IdlePolicy,
)
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.telemetry.idle import WORKLOAD_UTIL, IdleEngine
from gpufleet.telemetry.profiles import USAGE_PROFILE_ANNOTATION, UsageProfile

#: How often the policies run, in simulated seconds.
EVERY_S = 60.0


class PodUtilisation:
    """Each pod's utilisation samples for as long as the longest window needs: a
    :class:`~gpufleet.telemetry.rules.SeriesQuery` of ``gpufleet_workload_gpu_util``
    (``avg`` only) with labels ``namespace`` and ``pod``."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self.samples: dict[tuple[str, str], deque[tuple[float, float]]] = {}

    def record(self, now: float, values: Mapping[tuple[str, str], float]) -> None:
        for pod in [p for p in self.samples if p not in values]:
            del self.samples[pod]  # gone: a pod of the same name later starts afresh
        for pod, value in values.items():
            kept = self.samples.setdefault(pod, deque())
            kept.append((now, value))
            while kept and kept[0][0] <= now - self.keep_s:
                kept.popleft()

    def query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None = None,
    ) -> dict[LabelSet, float]:
        if metric != WORKLOAD_UTIL or fn != "avg":
            raise ValueError(f"only avg of {WORKLOAD_UTIL} is kept here, not {fn} of {metric}")
        found: dict[LabelSet, float] = {}
        for (namespace, pod), kept in self.samples.items():
            labels = {"namespace": namespace, "pod": pod}
            if any(labels.get(k) != v for k, v in matchers.items()):
                continue
            values = [v for t, v in kept if now - window_s < t <= now]
            if values:
                found[(("namespace", namespace), ("pod", pod))] = sum(values) / len(values)
        return found


@dataclass(slots=True)
class IdleReport:
    """What the policies did in a run."""

    decisions: list[IdleDecision] = field(default_factory=list)
    #: GPU-hours the stopped workloads would still have held (their work left, or until the
    #: end of the run for work that runs until stopped).
    gpu_hours_reclaimed: float = 0.0
    #: Workload keys stopped, and those of them that were training.
    stopped: list[str] = field(default_factory=list)
    stopped_training: list[str] = field(default_factory=list)
    #: Workload keys lowered to preemptible.
    demoted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def actions(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for decision in self.decisions:
            counts[decision.action.value] = counts.get(decision.action.value, 0) + 1
        return counts


class IdleTicking:
    """See the module docstring."""

    def __init__(
        self,
        sim: SimulatedCluster,
        policies: Sequence[IdlePolicy],
        workloads: Sequence[TimedWorkload],
        kinds: Mapping[str, str] | None = None,
        telemetry: SimTelemetry | None = None,
        every_s: float = EVERY_S,
        dry_run: bool = False,
    ) -> None:
        self.sim = sim
        self.engine = IdleEngine(policies, dry_run=dry_run)
        self.telemetry = telemetry or SimTelemetry(sim)
        self.every_s = every_s
        self.report = IdleReport()
        self.kinds = dict(kinds or {})
        self.workload_of: dict[str, Workload] = {
            pod.key: t.workload for t in workloads for pod in t.workload.pods
        }
        keep = max((p.window_s for p in policies), default=every_s)
        self.utilisation = PodUtilisation(keep + every_s)
        self.next_tick = sim.clock.now() + every_s
        self._reclaim_until: list[tuple[float, float, float | None]] = []

    # ------------------------------------------------------------------- ClusterBackend
    @property
    def clock(self) -> Clock:
        return self.sim.clock

    def list_state(self) -> ClusterState:
        return self.sim.list_state()

    def poll_events(self) -> Sequence[ClusterEvent]:
        now = self.sim.clock.now()
        if now >= self.next_tick:
            self.tick(now)
            self.next_tick = (math.floor(now / self.every_s) + 1) * self.every_s
        return self.sim.poll_events()

    def apply(self, actions: Sequence[Action]) -> None:
        self.sim.apply(actions)

    def wait(self, deadline: float) -> None:
        self.sim.wait(min(deadline, self.next_tick))

    @property
    def done(self) -> bool:
        return self.sim.done

    # ----------------------------------------------------------------------------- ticks
    def tick(self, now: float) -> None:
        """Record utilisation, decide, act."""
        self.utilisation.record(now, self.pod_utilisation())
        decisions = self.engine.decide(now, self.candidates(), self.utilisation)
        for decision in decisions:
            self.report.decisions.append(decision)
            if decision.dry_run:
                continue
            if decision.action in (IdleAction.STOP, IdleAction.SCALE_TO_ZERO):
                self._stop(decision, now)
            elif decision.action is IdleAction.PREEMPTIBLE:
                keys = [f"{decision.namespace}/{pod}" for pod in decision.pods]
                demoted = self.report.demoted
                if self.sim.demote(keys, decision.message) and decision.workload not in demoted:
                    demoted.append(decision.workload)

    def pod_utilisation(self) -> dict[tuple[str, str], float]:
        """(namespace, pod) -> the mean utilisation of the devices it holds now."""
        return self.telemetry.pod_utilisation()

    def candidates(self) -> list[IdleCandidate]:
        """The running workloads holding GPUs."""
        pods: dict[str, list[str]] = {}
        gpus: dict[str, float] = {}
        started: dict[str, float] = {}
        owners: dict[str, Workload] = {}
        for key, allocation in self.sim.running.items():
            workload = self.workload_of.get(key)
            if workload is None or allocation.gpu_milli <= 0:
                continue
            owners[workload.key] = workload
            pods.setdefault(workload.key, []).append(key.partition("/")[2])
            gpus[workload.key] = gpus.get(workload.key, 0.0) + allocation.gpu_milli / MILLI_PER_GPU
            work = self.sim.work_of(key)
            began = work[0] if work is not None else 0.0
            started[workload.key] = min(started.get(workload.key, began), began)
        found = []
        for key, names in pods.items():
            workload = owners[key]
            kind = self.kinds.get(key) or workload.kind or "Pod"
            training = is_training(workload, kind)
            found.append(
                IdleCandidate(
                    key=key,
                    namespace=workload.namespace,
                    name=workload.name,
                    queue=workload.queue,
                    kind=kind,
                    pods=tuple(names),
                    started_at=started[key],
                    gpus=gpus[key],
                    labels=workload.labels,
                    training=training,
                    checkpointable=workload.checkpoint_interval is not None,
                    preemptible=workload.preemptible,
                )
            )
        return found

    def _stop(self, decision: IdleDecision, now: float) -> None:
        if decision.action is IdleAction.SCALE_TO_ZERO:
            self.report.notes.append(
                f"{decision.workload}: ScaleToZero stopped it (the simulator has no replica sets)"
            )
        keys = [f"{decision.namespace}/{pod}" for pod in decision.pods]
        held: list[tuple[float, float | None]] = []
        for key in keys:
            allocation = self.sim.running.get(key)
            work = self.sim.work_of(key)
            if allocation is None or work is None:
                continue
            started, remaining = work
            left = None if remaining is None else max(0.0, remaining - (now - started))
            held.append((allocation.gpu_milli / MILLI_PER_GPU, left))
        if not self.sim.stop_running(keys, decision.message):
            return
        self.report.stopped.append(decision.workload)
        workload = self.workload_of.get(keys[0])
        if workload is not None and is_training(workload, decision.kind):
            self.report.stopped_training.append(decision.workload)
        for gpus, left in held:
            self._reclaim_until.append((now, gpus, left))

    def finish(self, end: float) -> IdleReport:
        """The report, its reclaimed GPU-hours counted up to ``end`` (the run's last moment)."""
        total = 0.0
        for at, gpus, left in self._reclaim_until:
            until = end if left is None else min(end, at + left)
            total += gpus * max(0.0, until - at) / 3600.0
        self.report.gpu_hours_reclaimed = total
        return self.report


def is_training(workload: Workload, kind: str) -> bool:
    """A training job: a PyTorchJob or MPIJob, or pods whose usage profile says training."""
    return kind in TRAINING_KINDS or any(
        pod.annotations.get(USAGE_PROFILE_ANNOTATION) == UsageProfile.TRAINING
        for pod in workload.pods
    )
