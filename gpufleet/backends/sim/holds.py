"""What each pod of a simulated run held: its runs, from its bind to its stop.

Owns :class:`HoldLog`, told by the world's :class:`~gpufleet.backends.sim.recorder.Recorder`
as pods are bound and stop (finished, evicted, failed, stopped by an idle policy, removed):
each run of a pod, on which node and devices (its :class:`~gpufleet.model.Placement`), from
when to when. A run's cost is read from it (:mod:`gpufleet.backends.sim.costs`); it keeps
nothing else and is kept only where a run is costed.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model import Placement, Pod


@dataclass(frozen=True, slots=True)
class Hold:
    """One run of a pod: where it ran, from ``start`` to ``end`` (None: it still runs)."""

    pod: Pod
    placement: Placement
    start: float
    end: float | None = None


class HoldLog:
    """See the module docstring."""

    def __init__(self) -> None:
        self.ended: list[Hold] = []
        self._running: dict[str, Hold] = {}

    def bound(self, pod: Pod, placement: Placement, now: float) -> None:
        self._running[pod.key] = Hold(pod, placement, now)

    def stopped(self, key: str, now: float) -> None:
        held = self._running.pop(key, None)
        if held is not None:
            self.ended.append(Hold(held.pod, held.placement, held.start, max(held.start, now)))

    def holds(self) -> list[Hold]:
        """Every run: those that ended, then those still running (``end`` None)."""
        return [*self.ended, *self._running.values()]
