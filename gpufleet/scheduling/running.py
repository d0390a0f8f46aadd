"""What the core knows of an admitted workload: its pods' placements, its quota usage, when it
started, which pods are ready, and what preempting it would cost."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpufleet.model.tenancy import Workload
from gpufleet.scheduling.engine import Bound


@dataclass(slots=True)
class RunningWorkload:
    workload: Workload
    bound: dict[str, Bound]
    usage: dict[str, int]
    started: float
    #: When it arrived in its queue (Kueue's queue order timestamp; see the core's _enqueue).
    queued: float = 0.0
    #: Pods still to report ready, and when the gang must be ready by (None: it is).
    unready: set[str] = field(default_factory=set)
    ready_by: float | None = None
    #: Set when it is being evicted: why, and for whom.
    evicted_for: str | None = None
    attempts: int = 0

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def gpu_milli(self) -> int:
        return sum(b.allocation.gpu_milli for b in self.bound.values())

    def expected_end(self, default_runtime: float) -> float:
        runtime = self.workload.expected_runtime
        return self.started + (runtime if runtime is not None else default_runtime)

    def work_lost(self, now: float) -> float:
        """GPU-milli-seconds a preemption now would throw away (since the last checkpoint)."""
        ran = max(0.0, now - self.started)
        interval = self.workload.checkpoint_interval
        since = ran - math.floor(ran / interval) * interval if interval else ran
        return since * max(self.gpu_milli, 1)
