"""The simulated cluster in real time: the world behind ``gpufleet serve``'s embedded mode.

:class:`LiveSimCluster` is the replay world of :mod:`gpufleet.backends.sim.cluster` (ground-truth
node table, every bind checked, evicted pods resume from their last checkpoint) with three
differences: its clock follows the wall clock, scaled by ``speed`` (60: a simulated minute per
second); work arrives while it runs (:meth:`submit`) and may be cancelled (:meth:`cancel`); and
a restarted server puts back what was running exactly where it ran (:meth:`restore`); faults
(:class:`~gpufleet.model.faults.GpuFault`, and the spot interruptions and node failures of
:class:`~gpufleet.model.node_faults.NodeFault`) count their times from its start. Its
:meth:`wait` sleeps for real, until the next simulated event, the scheduler's next timer or a
:meth:`wake` from another thread.

What happens to each pod comes back as events, as from every world, binds done included
(``PodBound``), for the control plane to record. It does no persistence itself, and it is not
thread-safe: the control plane calls it under its lock (except :meth:`wake`, which any thread
may call).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.model import Node, Placement, Pod
from gpufleet.model.events import DeviceHealthChanged
from gpufleet.model.faults import GpuFault
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.workload import TimedWorkload
from gpufleet.scheduling.target import TargetWorkload

#: The longest a wait sleeps without looking again (so a stop is noticed promptly).
MAX_SLEEP_S = 0.5


class ScaledClock:
    """Simulated seconds that pass ``speed`` times as fast as the wall clock, from ``start``."""

    def __init__(
        self, speed: float, start: float = 0.0, wall: Callable[[], float] = time.monotonic
    ) -> None:
        if not speed > 0 or not math.isfinite(speed):
            raise ValueError(f"speed must be a positive number, not {speed}")
        self.speed = speed
        self._wall = wall
        self._origin_wall = wall()
        self._origin = start

    def now(self) -> float:
        return self._origin + (self._wall() - self._origin_wall) * self.speed

    def seconds_until(self, time_: float) -> float:
        """Wall seconds until the simulated time ``time_`` (0 when it has passed)."""
        return max(0.0, (time_ - self.now()) / self.speed)


class LiveSimCluster(SimulatedCluster):
    """See the module docstring."""

    keep_job_runs = False
    report_binds = True

    def __init__(
        self,
        nodes: Sequence[Node],
        target: TargetWorkload,
        speed: float = 1.0,
        start: float = 0.0,
        wall: Callable[[], float] = time.monotonic,
        faults: Sequence[GpuFault] = (),
        node_faults: Sequence[NodeFault] = (),
        seed: int = 0,
    ) -> None:
        shifted = [dataclasses.replace(fault, at=start + fault.at) for fault in faults]
        struck = [
            dataclasses.replace(fault, times=tuple(start + at for at in fault.times))
            for fault in node_faults
        ]
        super().__init__(
            nodes,
            [],
            Mode.REPLAY,
            target,
            faults=shifted,
            node_faults=struck,
            seed=seed,
            start=start,
        )
        self._scaled = ScaledClock(speed, start, wall)
        # The base class only calls now() and, in its own wait (overridden here), advance_to.
        self.clock = self._scaled  # type: ignore[assignment]
        self._wake = threading.Event()
        self._stopped = False

    # ----------------------------------------------------------------------------- inputs
    def submit(self, timed: TimedWorkload) -> None:
        """A workload arrives now, or at ``timed.created`` when that is later (a scenario's
        ``gpufleet.dev/submit-at``); it runs for ``timed.duration`` simulated seconds once
        bound."""
        self.arrive(timed, max(self.clock.now(), timed.created))
        self.wake()

    def cancel(self, pod_keys: Iterable[str]) -> list[str]:
        """Stop and forget these pods, waiting or running; returns those that were here."""
        gone = self.remove(pod_keys)
        self.wake()
        return gone

    def demote(self, pod_keys: Iterable[str], reason: str) -> bool:
        """See :meth:`SimulatedCluster.demote`; the loop is woken to tell the core now."""
        found = super().demote(pod_keys, reason)
        self.wake()
        return found

    def release(self, timed: TimedWorkload) -> None:
        """See :meth:`SimulatedCluster.release`; the loop is woken to tell the core now."""
        super().release(timed)
        self.wake()

    def restore(
        self,
        pod: Pod,
        placement: Placement,
        remaining: float | None,
        checkpoint: float | None,
        in_gang: bool,
        started: float,
        timed: TimedWorkload | None = None,
    ) -> None:
        """Put back a pod that ran before a restart (see :meth:`SimulatedCluster.put_back`)."""
        self.put_back(pod, placement, remaining, checkpoint, in_gang, started, timed)

    def wake(self) -> None:
        """Cut a :meth:`wait` short (thread-safe)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self.wake()

    # ----------------------------------------------------------------------------- protocol
    def wait(self, deadline: float = math.inf) -> None:
        if self.events_waiting or self._stopped:
            return
        wake_at = min(deadline, self.next_event_at)
        seconds = min(self._scaled.seconds_until(wake_at), MAX_SLEEP_S)
        if seconds > 0 and self._wake.wait(seconds):
            self._wake.clear()

    @property
    def done(self) -> bool:
        return self._stopped


def health_message(event: DeviceHealthChanged) -> str:
    """``node n1: GPU 2 unhealthy (XID 79: GPU has fallen off the bus)``, or ``node n1: all
    GPUs healthy``: a fault beginning or ending, for the log."""
    if not event.unhealthy:
        return f"node {event.node}: all GPUs healthy"
    gpus = ", ".join(
        f"{index}" + (f" ({why})" if (why := event.reason(index)) else "")
        for index in event.unhealthy
    )
    return f"node {event.node}: GPU {gpus} unhealthy"
