"""What ``gpufleet serve --local`` takes back at a start: the workloads and their runs.

Owns :class:`LocalRunsTakenBack`, how the local plane takes back what the store holds (its
:class:`~gpufleet.service.live_restore.TakesBack`, given the plane's
:class:`~gpufleet.service.live_restore.LiveRestorer`): the runs are found again by the
machine (:meth:`~gpufleet.backends.local.machine.LocalMachine.recover`, by PID and start
time) for every pod the store says runs or waits; a run found running is running (even one
the store had not yet seen start), and the rest wait again; the runs that ended meanwhile
(or were lost: their shim vanished) are taken in by the machine as if the server had been up
(:meth:`~gpufleet.backends.local.machine.LocalMachine.resume`: a Job's retries, a gang's
failure stopping the rest): no run is started twice, and no gang is left part running. A
workload whose processes were not stored, or that the machine cannot run again, fails.
Holding a queue set aside and rebuilding the core are every live plane's
(:mod:`~gpufleet.service.live_restore`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gpufleet.backends.local.machine import LocalMachine, SubmitRefusedError
from gpufleet.backends.local.supervisor import RunStatus
from gpufleet.control.loop import sync
from gpufleet.model import Placement
from gpufleet.service.live_restore import LiveRestorer
from gpufleet.service.local_recording import count_restarts, job_row
from gpufleet.service.local_world import LiveLocalMachine
from gpufleet.service.records import (
    POD_FAILED,
    POD_PENDING,
    POD_RUNNING,
    POD_SUCCEEDED,
    POD_TERMINAL,
    WorkloadRecord,
)
from gpufleet.service.states import WorkloadState
from gpufleet.service.store import StoredEvent

log = logging.getLogger(__name__)


class LocalRunsTakenBack:
    """See the module docstring."""

    def __init__(
        self, restorer: LiveRestorer, machine: LocalMachine, world: LiveLocalMachine
    ) -> None:
        self.restorer = restorer
        self.state = restorer.state
        self.book = restorer.book
        self.machine = machine
        #: The machine's world (its processes), as the state holds it.
        self.world = world

    def restore(self) -> None:
        """Take back what the store holds: every workload with its processes, the runs found
        again by the machine, the rest waiting again (see the module docstring)."""
        processes = self.book.store.processes()
        active: list[WorkloadRecord] = []
        for stored in self.book.store.workloads():
            if stored.key in processes:
                self.world.give_processes(stored.key, processes[stored.key])
            record = self.restorer.restored_record(stored)
            if record is None:
                continue
            if stored.key not in processes:
                self._fail_restored(record, "its processes were not stored")
                continue
            for stored_pod in stored.pods:
                pod_record = record.pods[stored_pod.key]
                pod_record.state = stored_pod.state
                pod_record.placement = stored_pod.placement
                pod_record.started = stored_pod.started
            active.append(record)
        waiting_or_running = {
            key: pod_record.pod
            for record in active
            for key, pod_record in record.pods.items()
            if pod_record.state not in POD_TERMINAL
        }
        found = self.machine.recover(waiting_or_running)
        placements = {pod.key: placement for pod, placement in self.machine.list_state().running}
        with self.book.store.transaction():
            for record in active:
                self._take_back(record, found, placements)
        sync(self.state.core, self.world.list_state(), self.world.clock.now(), self.state.ran_as)

    def _take_back(
        self,
        record: WorkloadRecord,
        found: Mapping[str, RunStatus],
        placements: Mapping[str, Placement],
    ) -> None:
        """Put one stored workload back: its running pods as found, the rest waiting again;
        the runs that ended meanwhile are taken in by the machine (retries, a gang's failure)
        as if the server had been up."""
        waiting = []
        alive = ended = False
        for key, pod_record in record.pods.items():
            if pod_record.state in POD_TERMINAL:
                continue
            status = found.get(key)
            if key in placements:
                if pod_record.state != POD_RUNNING:  # started before the store saw it
                    pod_record.state, pod_record.placement = POD_RUNNING, placements[key]
                    pod_record.started = pod_record.started or self.world.clock.now()
                    self.book.store.set_pod(key, POD_RUNNING, placements[key], pod_record.started)
                alive = True
            elif status in (RunStatus.ENDED, RunStatus.LOST) and not (
                pod_record.state == POD_PENDING and self.machine.end_taken_in(key)
            ):
                ended = True  # what follows its end comes as events in the first turn
            else:
                if pod_record.state == POD_RUNNING:
                    log.warning("pod %s was running and has no run here: it waits again", key)
                pod_record.state, pod_record.placement = POD_PENDING, None
                self.book.store.set_pod(key, POD_PENDING)
                waiting.append(pod_record.pod)
        if not alive and not waiting and not ended:
            return
        specs = self.world.processes(record.key) or {}
        # Counted before the restart (those counted now come as events).
        failures = self.machine.failures_of(record.key)
        succeeded = [k for k, p in record.pods.items() if p.state == POD_SUCCEEDED]
        failed = [k for k, p in record.pods.items() if p.state == POD_FAILED]
        try:
            self.machine.resume(record.timed.workload, specs, waiting, succeeded, failed)
        except SubmitRefusedError as error:
            self._fail_restored(record, str(error))
            return
        if failures:
            job_row(self.world, record).failed_pods = failures
        failed_indexes = self.machine.failed_indexes_of(record.key)
        if failed_indexes:
            job_row(self.world, record).failed_indexes = failed_indexes
        done = self.machine.completions_done(record.key)
        if done:
            job_row(self.world, record).completed = done
        count_restarts(self.machine, record)

    def _fail_restored(self, record: WorkloadRecord, why: str) -> None:
        now = self.world.clock.now()
        event = StoredEvent(now, record.key, "Warning", "Failed", f"cannot run it again: {why}")
        with self.book.store.transaction():
            for pod_record in record.pods.values():
                if pod_record.state not in POD_TERMINAL:
                    pod_record.state, pod_record.placement = POD_FAILED, None
                    self.book.store.set_pod_state(pod_record.pod.key, POD_FAILED)
            record.state, record.finished = WorkloadState.FAILED, now
            self.book.store.set_workload_state(record.key, record.state.value, finished=now)
            self.book.store.add_events([event])
        record.events.append(event)
        log.error("workload %s: %s", record.key, event.message)
