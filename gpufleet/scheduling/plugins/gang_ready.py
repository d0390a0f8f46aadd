"""The default permit plugin: every pod of an admitted gang ready within a timeout.

A gang binds all at once; if its pods are not all ready ``timeout`` seconds after it was
admitted (a node that cannot pull the image, a pod that crashes at start), the gang holds
devices it cannot use: its permit ends, and the core evicts it and retries it after a backoff.
The timeout is the ``timeout`` argument of the profile, or ``AdmissionConfig.gang_ready_timeout``.

What it does not do: watch pods (the core tells it when each is ready) or evict.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpufleet.model.times import format_duration
from gpufleet.scheduling.running import RunningWorkload

if TYPE_CHECKING:
    from gpufleet.model.workload import Workload
    from gpufleet.scheduling.state import CoreState


class GangReadyTimeout:
    """See the module docstring."""

    name = "gang-ready-timeout"

    def __init__(self, state: CoreState, timeout: float) -> None:
        self.state = state
        self.timeout = timeout
        #: (deadline, gang key), for every gang admitted; stale ones are skipped when met.
        self._deadlines: list[tuple[float, str]] = []

    def started(self, running: RunningWorkload) -> None:
        if len(running.bound) > 1:
            running.unready = set(running.bound)
            running.ready_by = self.state.now + self.timeout
            heapq.heappush(self._deadlines, (running.ready_by, running.key))

    def shrunk(self, running: RunningWorkload, freed: Mapping[str, int]) -> None:
        """(A pod that ended no longer counts: its gang's deadline stays.)"""

    def stopped(self, running: RunningWorkload) -> None:
        """(Its deadline is skipped when met: the gang is no longer running.)"""

    def retagged(self, running: RunningWorkload, before: Workload) -> None:
        """(Its deadline stays: it is the same gang.)"""

    def pod_ready(self, running: RunningWorkload, pod_key: str) -> None:
        running.unready.discard(pod_key)
        if not running.unready:
            running.ready_by = None

    def revoked(self, now: float) -> list[tuple[RunningWorkload, str]]:
        out = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            deadline, key = heapq.heappop(deadlines)
            running = self.state.running.get(key)
            if running is None or running.ready_by != deadline or not running.unready:
                continue  # ready, gone, or admitted again since
            out.append((running, f"gang not ready within {format_duration(self.timeout)}"))
        return out

    def next_deadline(self) -> float | None:
        deadlines = self._deadlines
        while deadlines:
            running = self.state.running.get(deadlines[0][1])
            if running is not None and running.ready_by == deadlines[0][0] and running.unready:
                return deadlines[0][0]
            heapq.heappop(deadlines)  # ready, gone or evicted since
        return None
