"""Workloads held out of their queues: pods with scheduling gates, suspended Jobs.

Owns :class:`HeldWorkloads`: a workload that :func:`~gpufleet.model.workload.held_reason` holds
(any of its pods has ``spec.schedulingGates``: a gang waits whole; a Job with
``spec.suspend: true``) is kept here, never tried, until its owner releases it (a
``WorkloadReleased`` with fewer gates, or resumed) or its pods go. kube-scheduler keeps gated
pods out of its active queue the same way, and Kueue admits no suspended Job's pods; explain
says why each waits (``SchedulingGated``, ``Suspended``).

What it does not do: queue, admit or place anything (the lifecycle queues what is released).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.workload import Workload, held_message, held_reason


@dataclass(frozen=True, slots=True)
class Held:
    """A held workload, since when (the core's clock), and why."""

    workload: Workload
    since: float
    reason: str
    message: str


class HeldWorkloads:
    """See the module docstring."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        #: Pod key -> the key of the held workload it belongs to.
        self._pod_owner: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: str) -> bool:
        return key in self._held

    def hold(self, workload: Workload, now: float) -> bool:
        """Keep ``workload`` if something holds it (True); False when it may be queued."""
        reason = held_reason(workload)
        if reason is None:
            return False
        self._held[workload.key] = Held(workload, now, reason, held_message(workload))
        for pod in workload.pods:
            self._pod_owner[pod.key] = workload.key
        return True

    def release(self, workload: Workload, now: float) -> Workload | None:
        """``workload`` replaces the held one of its key: the workload to queue when nothing
        holds it any more, else None (still held, told anew; or not held at all)."""
        held = self.drop(workload.key)
        if held is None:
            return None
        if self.hold(workload, held.since):
            return None
        return workload

    def drop(self, key: str) -> Held | None:
        """Forget the held workload ``key`` (its pods went)."""
        held = self._held.pop(key, None)
        if held is not None:
            for pod in held.workload.pods:
                self._pod_owner.pop(pod.key, None)
        return held

    def owner_of(self, pod_key: str) -> str | None:
        return self._pod_owner.get(pod_key)

    def all(self) -> list[Held]:
        """Every held workload, by queue then arrival."""
        return sorted(
            self._held.values(), key=lambda h: (h.workload.queue, h.since, h.workload.key)
        )
