"""What a turn writes down on ``gpufleet serve --local``, beyond what every live plane does.

Owns :class:`LocalTurnRecorder`, the local plane's :class:`~gpufleet.service.live_recording.
TurnRecorder`: it records what the shared recorder does, and what this machine's processes
tell besides:

* each pod's end as an ``Exited`` event: the exit code (or signal) and how long it ran; a lost
  run is a failure (retried only as a Job's failure is); a run that ended while the server
  was down is dated (and billed) to its end, and so is its workload's;
* the job row of a workload the machine ended (its time limit passed: ``Failed
  (DeadlineExceeded)``; its failures its backoff limit: ``Failed (BackoffLimitExceeded)``),
  retried (its failed pods) or ran completions of (those done; an Indexed Job's failed
  indexes), kept here as there are no job controllers to keep it (:func:`job_row`);
* restarts in place (a restart policy's): a ``BackOff`` event saying how the run ended and how
  long the back-off is, counted on the workload's pods (:func:`count_restarts`), each pod
  ``CrashLoopBackOff`` while it waits out the back-off.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.backends.local.machine import LocalMachine
from gpufleet.control.loop import Turn
from gpufleet.job_controller.decisions import BACKOFF_LIMIT_EXCEEDED
from gpufleet.model.events import ClusterEvent, JobEnded, PodDeleted, PodEnd, PodRestarted
from gpufleet.model.jobs import RestartPolicy
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.framework import CheckWorld
from gpufleet.service.live_recording import TurnRecorder
from gpufleet.service.live_state import LiveState
from gpufleet.service.local_world import LiveLocalMachine
from gpufleet.service.records import (
    POD_SUCCEEDED,
    POD_TERMINAL,
    JobProgress,
    PodRecord,
    WorkloadRecord,
)
from gpufleet.service.store import StoredEvent

#: The restart policies that restart a process in place.
_IN_PLACE = (RestartPolicy.ALWAYS, RestartPolicy.ON_FAILURE)


class LocalTurnRecorder(TurnRecorder):
    """See the module docstring."""

    def __init__(
        self,
        state: LiveState,
        check_world: CheckWorld,
        machine: LocalMachine,
        world: LiveLocalMachine,
    ) -> None:
        super().__init__(state, check_world)
        self.machine = machine
        #: The machine's world (its processes), as the state holds it.
        self.world = world
        #: When the runs of a workload that ended this turn ended (their shims' record).
        self._ended_at: dict[str, float] = {}

    def _record_news(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        event: ClusterEvent,
        evicted_for: str | None,
        now: float,
    ) -> None:
        """As every live plane records it; a job the machine ended (its time limit passed, or
        its failures its backoff limit) or retried is kept as the workload's job row too (there
        are no job controllers here to keep it): its failed pods and how it ended. A restart
        in place (a restart policy's) is counted on the workload's pods, with a ``BackOff``
        event saying how the run ended and how long the back-off is."""
        if isinstance(event, PodRestarted) and self._restarts_in_place(record.key):
            count_restarts(self.machine, record)
            self.book.counters["restarted"] += 1
            self.state.notes.events.append(
                StoredEvent(now, record.key, "Warning", "BackOff",
                            f"pod {pod_record.pod.name} {event.message}")
            )  # fmt: skip
            return
        if self._per_index(record.key):
            self._index_news(record, event)
        elif isinstance(event, PodRestarted) and event.completion is not None:
            job_row(self.world, record).completed = self.machine.completions_done(record.key)
        elif isinstance(event, PodRestarted) and event.completion is None:
            job_row(self.world, record).failed_pods += 1
        elif isinstance(event, JobEnded):
            row = job_row(self.world, record)
            if event.reason == BACKOFF_LIMIT_EXCEEDED:
                row.failed_pods += 1
            row.outcome, row.reason, row.message = event.outcome, event.reason, event.message
        super()._record_news(record, pod_record, event, evicted_for, now)

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        """As every live plane records a turn; each pod that waits out the back-off of a
        restart in place is ``CrashLoopBackOff`` (get, describe), as kubectl shows it."""
        for record in self.book.records.values():
            for key, pod_record in record.pods.items():
                backing_off = record.active and self.machine.backing_off(key)
                pod_record.reason = "CrashLoopBackOff" if backing_off else ""
        super().turn_done(core, turn)

    def _per_index(self, workload_key: str) -> bool:
        """Whether the workload is an Indexed Job with a ``backoffLimitPerIndex``."""
        specs = self.world.processes(workload_key) or {}
        return any(spec.backoff_limit_per_index is not None for spec in specs.values())

    def _index_news(self, record: WorkloadRecord, event: ClusterEvent) -> None:
        """An Indexed Job's row with a limit per index: its failed runs and indexes as the
        machine counts them (an index retried is a failed pod too), and how it ended."""
        row = job_row(self.world, record)
        row.failed_pods = self.machine.failures_of(record.key)
        row.failed_indexes = self.machine.failed_indexes_of(record.key)
        if isinstance(event, PodRestarted) and event.completion is not None:
            row.completed = self.machine.completions_done(record.key)
        elif isinstance(event, JobEnded):
            row.outcome, row.reason, row.message = event.outcome, event.reason, event.message

    def _restarts_in_place(self, workload_key: str) -> bool:
        """Whether the workload's processes restart in place (``Always``, ``OnFailure``)."""
        specs = self.world.processes(workload_key) or {}
        return any(spec.restart_policy in _IN_PLACE for spec in specs.values())

    def _record_end(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        gone: PodDeleted,
        evicted_for: str | None,
        remaining: float | None,
        now: float,
    ) -> None:
        """A process that ended: as the shared plane records it, and an ``Exited`` event with
        its exit code and run time. A lost run is a failure here (one the machine retried or
        restarted in place is not reported as ended)."""
        if gone.end is PodEnd.LOST:
            gone = PodDeleted(gone.key, PodEnd.FAILED, gone.message)
        started = pod_record.started
        # When it ended as its shim recorded it: a run that ended while the server was down
        # is dated (and billed) to its end, not to the restart.
        at = now if gone.ended_at is None else min(now, gone.ended_at)
        if gone.ended_at is not None:
            self._ended_at[record.key] = max(at, self._ended_at.get(record.key, at))
        super()._record_end(record, pod_record, gone, evicted_for, remaining, now)
        if all(p.state == POD_SUCCEEDED for p in record.pods.values()):
            for row in record.jobs.values():  # retried, then done
                row.completed = row.completions
                row.outcome = row.outcome or "Succeeded"
        if gone.end in (PodEnd.SUCCEEDED, PodEnd.FAILED):
            self._exited(record, pod_record, gone, started, at)

    def _exited(
        self,
        record: WorkloadRecord,
        pod_record: PodRecord,
        gone: PodDeleted,
        started: float | None,
        at: float,
    ) -> None:
        """The ``Exited`` event of a pod's run that ended at ``at``: how, and how long it ran."""
        ran = "" if started is None else f" after {_duration(max(0.0, at - started))}"
        self.state.notes.events.append(
            StoredEvent(
                at,
                record.key,
                "Warning" if gone.end is PodEnd.FAILED else "Normal",
                "Exited",
                f"pod {pod_record.pod.name}: {gone.message or 'ended'}{ran}",
            )
        )

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        """As every live plane takes them in; the end of a cancelled pod's run (recorded
        cancelled when asked, so the shared plane passes it over) is its ``Exited`` event."""
        super().events_in(events)
        for event in events:
            if not isinstance(event, PodDeleted) or event.end is not PodEnd.DELETED:
                continue
            if event.ended_at is None:  # no run had started (or it was lost)
                continue
            record = self.state.record_of(event.key)
            pod_record = None if record is None else record.pods.get(event.key)
            if record is None or pod_record is None:
                continue
            at = min(self.world.clock.now(), event.ended_at)
            self._exited(record, pod_record, event, pod_record.started, at)

    def _settle(self, record: WorkloadRecord, now: float) -> None:
        """As every live plane settles it; a workload whose last run ended before ``now``
        (while the server was down) finished when that run did."""
        ended_at = self._ended_at.pop(record.key, None)
        if ended_at is not None and all(p.state in POD_TERMINAL for p in record.pods.values()):
            now = ended_at
        super()._settle(record, now)


def count_restarts(machine: LocalMachine, record: WorkloadRecord) -> None:
    """Each pod of the workload restarts with it: its count is the machine's."""
    restarts = machine.restarts_of(record.key)
    for pod_record in record.pods.values():
        pod_record.restarts = restarts


def job_row(world: LiveLocalMachine, record: WorkloadRecord) -> JobProgress:
    """The workload's job row, kept here (there are no job controllers to keep it)."""
    name = record.key.partition("/")[2] or record.key
    row = record.jobs.get(name)
    if row is None:
        specs = (world.processes(record.key) or {}).values()
        completions = max((s.completions or 0 for s in specs), default=0)
        completions = max(completions, len(record.pods))
        row = record.jobs[name] = JobProgress(record.kind, completions=completions)
    return row


def _duration(seconds: float) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``2h07m``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
