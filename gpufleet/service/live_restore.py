"""A live plane's world and core kept in step with the store and the catalog.

Owns :class:`LiveRestorer`, the part of every
:class:`~gpufleet.service.live_plane.LivePlane` (embedded and local), given the plane's
:class:`~gpufleet.service.live_state.LiveState`, that reads a stored workload back into its
record (:meth:`~LiveRestorer.restored_record`), holds the workloads of a queue set aside (a
bad stored Queue) out of the world until it is fixed, and builds the core (:func:`new_core`;
again, told everything, when queues or priority classes change). How a start takes back what
the store holds is the world's (:class:`TakesBack`): the simulated cluster's
:class:`PodsTakenBack` puts every workload back, running pods on exactly their devices (a
:class:`~gpufleet.service.live_world.PodByPodWorld`), how far their jobs were, the rest
waiting again; this machine finds its runs again (:mod:`~gpufleet.service.local_restore`).

It does not handle requests or run turns (:mod:`gpufleet.service.live_plane`), nor record
the world's events (:mod:`gpufleet.service.live_recording`).
"""

from __future__ import annotations

import logging
from typing import Protocol

from gpufleet.control.factory import build_core
from gpufleet.control.loop import sync
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.model.events import WorkloadAdded
from gpufleet.model.times import TimeFormat
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.service.live_state import LiveState
from gpufleet.service.live_world import LiveWorld, PodByPodWorld
from gpufleet.service.plane_book import QUEUE, ServeOptions
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


def new_core(
    world: LiveWorld, options: ServeOptions, catalog: LiveCatalog, instants: TimeFormat
) -> SchedulerCore:
    """A core for ``world`` now (with the GPUs a fault withholds now), under ``catalog``, its
    quota warnings logged."""
    core = build_core(
        world.current_nodes(),
        options.policy,
        options.seed,
        queues=catalog.queues,
        config=options.admission,
        time_format=instants,  # the world's clock: simulated, or the wall clock
        profile=options.profile,
    )
    for message in core.quota_warnings():
        log.warning("%s", message)
    return core


class LiveRestorer:
    """See the module docstring."""

    def __init__(self, state: LiveState) -> None:
        self.state = state
        self.book = state.book

    def restored_record(self, stored: StoredWorkload) -> WorkloadRecord | None:
        """The record of a stored workload, indexed, with its events; returned when it is to
        be put back in the world (None: it has finished, or its queue is set aside and it is
        held)."""
        record = WorkloadRecord.new(
            stored.seq, stored.tenant, stored.kind, stored.timed, stored.submitted
        )
        record.state = WorkloadState(stored.state)
        record.started, record.finished = stored.started, stored.finished
        for event in self.book.store.events(stored.key, limit=50):
            record.events.append(event)
        self.state.index(record)
        if record.active and record.timed.workload.queue not in self.state.core.quotas.queues:
            self.hold(record)
            return None
        if not record.active:
            for pod_record in record.pods.values():
                pod_record.state = next(
                    (p.state for p in stored.pods if p.key == pod_record.pod.key),
                    POD_SUCCEEDED,
                )
            return None
        return record

    def hold(self, record: WorkloadRecord) -> None:
        """Keep a workload whose queue is set aside out of the world (its pods wait, stored as
        waiting) until the queue is fixed; say why in its events."""
        queue = record.timed.workload.queue
        why = next(
            (
                r.error.reason
                for r in self.state.catalog.rejected
                if r.kind == QUEUE and r.key == queue
            ),
            "it is not defined",
        )
        now = self.state.world.clock.now()
        event = StoredEvent(
            now, record.key, "Warning", "QueueInvalid",
            f"queue {queue} is set aside ({why}); the workload waits until it is fixed",
        )  # fmt: skip
        with self.book.store.transaction():
            for pod_record in record.pods.values():
                pod_record.state, pod_record.placement = POD_PENDING, None
                self.book.store.set_pod(
                    pod_record.pod.key, POD_PENDING, remaining=record.timed.duration
                )
            record.state = WorkloadState.PENDING
            self.book.store.set_workload_state(record.key, record.state.value)
            self.book.store.add_events([event])
        record.events.append(event)
        self.state.held[record.key] = queue
        log.error("workload %s waits: %s", record.key, event.message)

    def release_held(self) -> None:
        """Give the world the held workloads whose queue is good again."""
        for key, queue in list(self.state.held.items()):
            if queue in self.state.core.quotas.queues:
                del self.state.held[key]
                record = self.book.records[key]
                self.state.world.jobs.adopt(record.timed, self.book.store.job_states().get(key, {}))
                self.state.world.submit(record.timed)

    # ----------------------------------------------------------------------------- core
    def rebuild_core(self) -> None:
        """A new core for new queues or classes, told everything again (under the lock)."""
        core = new_core(
            self.state.world, self.book.options, self.state.catalog, self.state.instants
        )
        core.now = self.state.world.clock.now()
        sync(core, self.state.world.list_state(), core.now, self.state.ran_as)
        waiting = self.state.world.pending
        for record in sorted(self.book.records.values(), key=lambda r: r.seq):
            # (a failed pod waiting out its back-off is not waiting yet: it comes as a new pod)
            pods = [p for p in record.pending_pods() if p.key in waiting]
            if record.active and pods and record.key not in core.running:
                core.handle(
                    WorkloadAdded(remaining_part(record.timed, [(p, None) for p in pods]).workload)
                )
        carry_usage(self.state.core, core)
        self.state.core = core


class TakesBack(Protocol):
    """How a world's plane takes back what the store holds at a start."""

    def restore(self) -> None: ...


class PodsTakenBack:
    """The start of a world whose running pods are put back one by one (the simulated
    cluster): every stored workload, its running pods on exactly their devices with the work
    they had left (one that cannot be waits again), the rest waiting, and how far its jobs
    were."""

    def __init__(self, restorer: LiveRestorer, world: PodByPodWorld) -> None:
        self.restorer = restorer
        self.state = restorer.state
        self.book = restorer.book
        self.world = world

    def restore(self) -> None:
        """Take back what the store holds: every workload, running pods on their devices, and
        how far their jobs were."""
        job_states = self.book.store.job_states()
        for stored in self.book.store.workloads():
            record = self.restorer.restored_record(stored)
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
            self.state.progress(record)
        sync(
            self.state.core,
            self.world.list_state(),
            self.world.clock.now(),
            self.state.ran_as,
        )
