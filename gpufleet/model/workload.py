"""Pods with times (trace replay), and shape tables (the distribution of pod shapes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.model.jobs import JobSpec, RestartPolicy, SimFailures
from gpufleet.model.pod import GpuRequest, Pod
from gpufleet.model.tenancy import Workload


@dataclass(frozen=True, slots=True)
class TimedPod:
    """A pod of a trace or workload file, with its times in seconds (None when unknown), its
    template's restart policy (None: not given) and its simulated failures."""

    pod: Pod
    created: float | None = None
    deleted: float | None = None
    scheduled: float | None = None
    restart_policy: RestartPolicy | None = None
    failures: SimFailures = field(default_factory=SimFailures)

    @property
    def runtime(self) -> float | None:
        """How long it ran: deletion - scheduling, or deletion - creation if never scheduled."""
        if self.deleted is None:
            return None
        start = self.scheduled if self.scheduled is not None else self.created
        if start is None:
            return None
        return max(0.0, self.deleted - start)


@dataclass(frozen=True, slots=True)
class ShapeRow:
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str
    count: int

    def pod(self, name: str) -> Pod:
        gpu = GpuRequest(self.num_gpu, self.gpu_milli) if self.num_gpu else GpuRequest()
        models = frozenset(self.gpu_spec.split("|")) if self.gpu_spec else None
        return Pod(name, "default", self.cpu_milli, self.memory_mib, gpu, gpu_models=models)


@dataclass(frozen=True, slots=True)
class ShapeTable:
    """Pod shapes with counts, and run-time quantiles (seconds) per pod class."""

    shapes: tuple[ShapeRow, ...]
    runtime_quantiles: dict[str, tuple[float, ...]]

    @property
    def total(self) -> int:
        return sum(s.count for s in self.shapes)


@dataclass(frozen=True, slots=True)
class TimedWorkload:
    """A workload of a simulation: when it is submitted, how much work each of its pods has
    (seconds of running; None: it runs until the simulation ends), and what the controllers of
    the objects its pods came from do when a pod ends (a pod no :class:`JobSpec` names is done
    when its work is)."""

    workload: Workload
    created: float = 0.0
    duration: float | None = None
    jobs: tuple[JobSpec, ...] = ()
