"""How much of what it held each pod of a simulated run used: its mean GPU utilisation.

Owns :class:`UsageMeter`, a :class:`~gpufleet.control.backend.ClusterBackend` around the world
that samples each running pod's GPU utilisation from the usage profiles
(:class:`~gpufleet.backends.sim.telemetry.SimTelemetry`, ``gpufleet_workload_gpu_util`` as the
idle policies read it: the mean of the devices it holds) every ``every_s`` of simulated time,
and gives each pod's mean over its samples. What the pods held is
:mod:`gpufleet.backends.sim.holds`.

The meter never wakes the control loop: the world jumps from one event to the next, and
nothing placed changes in between, so after each wait it catches up on the sample times the
jump went over (``[before, after)``) with the pods placed as they were. The run's scheduling is
the same with or without it. A pod never running at a sample time (a run shorter than the
step) has no sample and stays unmeasured, never 0 %. It prices nothing
(:mod:`gpufleet.backends.sim.costs` does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpufleet.backends.sim.cluster import SimulatedCluster
from gpufleet.backends.sim.telemetry import SimTelemetry
from gpufleet.control.backend import Clock, ClusterBackend, ClusterState
from gpufleet.model.actions import Action
from gpufleet.model.events import ClusterEvent

#: How often a run's utilisation is sampled, in simulated seconds (as the idle policies do).
EVERY_S = 60.0


class UsageMeter:
    """See the module docstring. ``inner``: the backend the control loop would drive (the world,
    or the idle policies' ticking around it); ``telemetry``: the world's (the idle policies',
    where they run, so that both read the same numbers)."""

    def __init__(
        self,
        inner: ClusterBackend,
        sim: SimulatedCluster,
        telemetry: SimTelemetry | None = None,
        every_s: float = EVERY_S,
    ) -> None:
        if not every_s > 0:
            raise ValueError(f"the sampling step must be more than 0 s, got {every_s}")
        self.inner = inner
        self.sim = sim
        self.telemetry = telemetry or SimTelemetry(sim)
        self.every_s = every_s
        self.samples = 0
        self._sums: dict[tuple[str, str], float] = {}
        self._counts: dict[tuple[str, str], int] = {}

    # ------------------------------------------------------------------- ClusterBackend
    @property
    def clock(self) -> Clock:
        return self.inner.clock

    def list_state(self) -> ClusterState:
        return self.inner.list_state()

    def poll_events(self) -> Sequence[ClusterEvent]:
        return self.inner.poll_events()

    def apply(self, actions: Sequence[Action]) -> None:
        self.inner.apply(actions)

    def wait(self, deadline: float) -> None:
        before = self.clock.now()
        self.inner.wait(deadline)
        self.catch_up(before, self.clock.now())

    @property
    def done(self) -> bool:
        return self.inner.done

    # ----------------------------------------------------------------------------- samples
    def catch_up(self, start: float, end: float) -> None:
        """Sample at each multiple of the step in ``[start, end)``, the pods placed as now."""
        if not end > start or next(self.sim.placed(), None) is None:
            return
        step = self.every_s
        index = math.ceil(start / step)
        while index * step < end:
            self.record(self.telemetry.pod_utilisation(index * step))
            index += 1

    def record(self, values: dict[tuple[str, str], float]) -> None:
        """One sample: (namespace, pod) -> utilisation in percent."""
        self.samples += 1
        for pod, value in values.items():
            self._sums[pod] = self._sums.get(pod, 0.0) + value
            self._counts[pod] = self._counts.get(pod, 0) + 1

    def mean_utilisation(self) -> dict[tuple[str, str], float]:
        """Each sampled pod's mean utilisation over its samples, 0 to 1, by (namespace, pod);
        pods never sampled are absent (unmeasured)."""
        return {
            pod: min(max(total / self._counts[pod] / 100.0, 0.0), 1.0)
            for pod, total in self._sums.items()
        }
