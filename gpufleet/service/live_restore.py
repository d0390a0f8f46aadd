"""A live plane's world and core kept in step with the store and the catalog.

Owns :class:`RestoringPlane`, the layer of every
:class:`~gpufleet.service.live_plane.LivePlane` (embedded and local) that, at start, takes back
what the store holds (every workload; running pods put back on exactly their devices; how far their
jobs were; the rest waiting again), holds the workloads of a queue set aside (a bad stored
Queue) out of the world until it is fixed, and builds the core (again, told everything, when
queues or priority classes change).

It does not handle requests or run turns (:mod:`gpufleet.service.live_plane`), nor record
the world's events (:mod:`gpufleet.service.live_recording`).
"""

from __future__ import annotations

import logging

from gpufleet.control.factory import build_core
from gpufleet.control.loop import sync
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.model.events import WorkloadAdded
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.service.live_recording import RecordingPlane
from gpufleet.service.plane_book import QUEUE
from gpufleet.service.records import (
    POD_PENDING,
    POD_RUNNING,
    POD_SUCCEEDED,
    POD_TERMINAL,
    WorkloadRecord,
)
from gpufleet.service.sim_records import remaining_part
from gpufleet.service.states import WorkloadState
from gpufleet.service.store import StoredEvent, StoredWorkload
from gpufleet.service.usage_store import carry_usage

log = logging.getLogger(__name__)


class RestoringPlane(RecordingPlane):
    """See the module docstring."""

    core: SchedulerCore
    catalog: LiveCatalog
    #: Workloads whose queue is set aside (a bad stored Queue): they wait, outside the
    #: world, until the queue is fixed. Key -> their queue.
    held: dict[str, str]

    # ----------------------------------------------------------------------------- restore
    def _restore(self) -> None:
        """Take back what the store holds: every workload, running pods on their devices, and
        how far their jobs were."""
        job_states = self.store.job_states()
        for stored in self.store.workloads():
            record = self._restored_record(stored)
            if record is None:
                continue
            pending = []
            self.world.jobs.adopt(stored.timed, job_states.get(stored.key, {}))
            for stored_pod in stored.pods:
                pod_record = record.pods[stored_pod.key]
                if stored_pod.state == POD_RUNNING and stored_pod.placement is not None:
                    try:
                        self.world.restore(
                            pod_record.pod,
                            stored_pod.placement,
                            stored_pod.remaining,
                            stored.timed.workload.checkpoint_interval,
                            len(record.pods) > 1,
                            stored_pod.started or 0.0,
                            stored.timed,
                        )
                    except ValueError as error:
                        log.error("cannot put back %s (%s): it waits again", stored_pod.key, error)
                        pending.append((pod_record.pod, stored_pod.remaining))
                        continue
                    pod_record.state = POD_RUNNING
                    pod_record.placement = stored_pod.placement
                    pod_record.started = stored_pod.started
                elif stored_pod.state in POD_TERMINAL:
                    pod_record.state = stored_pod.state
                else:
                    pending.append((pod_record.pod, stored_pod.remaining))
            if pending:
                self.world.submit(remaining_part(record.timed, pending))
            self._progress(record)
        sync(self.core, self.world.list_state(), self.world.clock.now(), self._ran_as)

    def _restored_record(self, stored: StoredWorkload) -> WorkloadRecord | None:
        """The record of a stored workload, indexed, with its events; returned when it is to
        be put back in the world (None: it has finished, or its queue is set aside and it is
        held)."""
        record = WorkloadRecord.new(
            stored.seq, stored.tenant, stored.kind, stored.timed, stored.submitted
        )
        record.state = WorkloadState(stored.state)
        record.started, record.finished = stored.started, stored.finished
        for event in self.store.events(stored.key, limit=50):
            record.events.append(event)
        self._index(record)
        if record.active and record.timed.workload.queue not in self.core.quotas.queues:
            self._hold(record)
            return None
        if not record.active:
            for pod_record in record.pods.values():
                pod_record.state = next(
                    (p.state for p in stored.pods if p.key == pod_record.pod.key),
                    POD_SUCCEEDED,
                )
            return None
        return record

    def _hold(self, record: WorkloadRecord) -> None:
        """Keep a workload whose queue is set aside out of the world (its pods wait, stored as
        waiting) until the queue is fixed; say why in its events."""
        queue = record.timed.workload.queue
        why = next(
            (r.error.reason for r in self.catalog.rejected if r.kind == QUEUE and r.key == queue),
            "it is not defined",
        )
        now = self.world.clock.now()
        event = StoredEvent(
            now, record.key, "Warning", "QueueInvalid",
            f"queue {queue} is set aside ({why}); the workload waits until it is fixed",
        )  # fmt: skip
        with self.store.transaction():
            for pod_record in record.pods.values():
                pod_record.state, pod_record.placement = POD_PENDING, None
                self.store.set_pod(pod_record.pod.key, POD_PENDING, remaining=record.timed.duration)
            record.state = WorkloadState.PENDING
            self.store.set_workload_state(record.key, record.state.value)
            self.store.add_events([event])
        record.events.append(event)
        self.held[record.key] = queue
        log.error("workload %s waits: %s", record.key, event.message)

    def _release_held(self) -> None:
        """Give the world the held workloads whose queue is good again."""
        for key, queue in list(self.held.items()):
            if queue in self.core.quotas.queues:
                del self.held[key]
                record = self.records[key]
                self.world.jobs.adopt(record.timed, self.store.job_states().get(key, {}))
                self.world.submit(record.timed)

    def _index(self, record: WorkloadRecord) -> None:
        self.records[record.key] = record
        for key in record.pods:
            self._owner[key] = record.key

    # ----------------------------------------------------------------------------- core
    def _new_core(self) -> SchedulerCore:
        core = build_core(
            self.world.current_nodes(),  # with the GPUs a fault withholds now
            self.options.policy,
            self.options.seed,
            queues=self.catalog.queues,
            config=self.options.admission,
            time_format=self.instants,  # the world's clock: simulated, or the wall clock
            profile=self.options.profile,
        )
        for message in core.quota_warnings():
            log.warning("%s", message)
        return core

    def _rebuild_core(self) -> None:
        """A new core for new queues or classes, told everything again (under the lock)."""
        core = self._new_core()
        core.now = self.world.clock.now()
        sync(core, self.world.list_state(), core.now, self._ran_as)
        waiting = self.world.pending
        for record in sorted(self.records.values(), key=lambda r: r.seq):
            # (a failed pod waiting out its back-off is not waiting yet: it comes as a new pod)
            pods = [p for p in record.pending_pods() if p.key in waiting]
            if record.active and pods and record.key not in core.running:
                core.handle(
                    WorkloadAdded(remaining_part(record.timed, [(p, None) for p in pods]).workload)
                )
        carry_usage(self.core, core)
        self.core = core
