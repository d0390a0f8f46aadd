"""What a live plane's parts share: the book, the world, the core, and the bookkeeping between
them.

Owns :class:`LiveState`, given to each part of a :class:`~gpufleet.service.live_plane.
LivePlane` (what each turn writes down: :mod:`~gpufleet.service.live_recording`; the store
taken back and the core rebuilt: :mod:`~gpufleet.service.live_restore`; an owner's changes:
:mod:`~gpufleet.service.owner_changes`; the idle policies' steps: :mod:`~gpufleet.service.
live_idle`), as the local machine's parts share its ``MachineState``: the plane's
:class:`~gpufleet.service.plane_book.PlaneBook`, the live world, the scheduler's core and the
catalog it was built from, which workload each pod belongs to, who each evicted pod was
evicted for, the workloads held out of the world (their queue set aside) and what the current
turn wrote down (:class:`TurnNotes`); and the bookkeeping several parts do: indexing a record,
reading its jobs' progress from the world, the workload a pod runs as, cancelling a workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.io.live_objects import LiveCatalog
from gpufleet.model.times import TimeFormat
from gpufleet.model.workload import Workload
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.service.live_world import LiveWorld
from gpufleet.service.plane_book import Change, PlaneBook
from gpufleet.service.records import POD_CANCELLED, POD_PENDING, POD_RUNNING, WorkloadRecord
from gpufleet.service.sim_records import progress_of
from gpufleet.service.states import ChangeKind, WorkloadState
from gpufleet.service.store import StoredEvent


@dataclass(slots=True)
class TurnNotes:
    """What one turn wrote down: changes and events to publish once committed, and the
    workloads whose pods it changed (settled at the end of the turn)."""

    changes: list[Change] = field(default_factory=list)
    events: list[StoredEvent] = field(default_factory=list)
    touched: dict[str, WorkloadRecord] = field(default_factory=dict)
    world_changed: bool = False


class LiveState:
    """See the module docstring."""

    def __init__(
        self,
        book: PlaneBook,
        world: LiveWorld,
        instants: TimeFormat,
        catalog: LiveCatalog,
        core: SchedulerCore,
    ) -> None:
        self.book = book
        #: The live world: simulated, or this machine's processes.
        self.world = world
        #: How the world's instants read (its clock: simulated, or the wall clock).
        self.instants = instants
        #: The Queues and PriorityClasses scheduled under, and the reader of requests by them.
        self.catalog = catalog
        self.catalog_builder = catalog.request_builder()
        self.core = core
        #: Pod key -> its workload's key.
        self.owner: dict[str, str] = {}
        #: Who each pod evicted and not yet gone was evicted for (its workload's key).
        self.evicted_for: dict[str, str | None] = {}
        #: Workloads whose queue is set aside (a bad stored Queue): they wait, outside the
        #: world, until the queue is fixed. Key -> their queue.
        self.held: dict[str, str] = {}
        #: What the current turn wrote down.
        self.notes = TurnNotes()

    def use_catalog(self, catalog: LiveCatalog) -> None:
        self.catalog = catalog
        self.catalog_builder = catalog.request_builder()

    def index(self, record: WorkloadRecord) -> None:
        """Keep ``record`` in the book, each of its pods filed under it."""
        self.book.records[record.key] = record
        for key in record.pods:
            self.owner[key] = record.key

    def record_of(self, pod_key: str) -> WorkloadRecord | None:
        """The record of the workload the pod belongs to (None: none known)."""
        return self.book.records.get(self.owner.get(pod_key, ""))

    def ran_as(self, pod_key: str) -> Workload | None:
        """The workload a pod of a record runs as (given to the core when it is told again of
        running pods, so that they keep their queue and key)."""
        record = self.record_of(pod_key)
        return None if record is None else record.timed.workload

    def progress(self, record: WorkloadRecord) -> None:
        """The record's jobs and pods as their controllers in the world see them."""
        for run in self.world.jobs.of(record.key):
            record.jobs[run.spec.name] = progress_of(run)
            for name in run.spec.pod_names:
                pod_record = record.pods.get(f"{run.namespace}/{name}")
                if pod_record is not None:
                    pod_record.restarts = run.restarts_of(name)
                    pod_record.index = run.task(name) if run.spec.indexed else None

    def cancel_active(self, record: WorkloadRecord, who: str) -> bool:
        """Cancel a waiting or running workload: its pods leave the world, it stays listed.
        False when it had ended meanwhile."""
        book, key = self.book, record.key
        with book.lock:
            if not record.active:
                return False
            now = self.world.clock.now()
            event = StoredEvent(now, key, "Normal", "Cancelled", who)
            with book.store.transaction():
                for pod_record in record.pods.values():
                    if pod_record.state in (POD_PENDING, POD_RUNNING):
                        pod_record.state = POD_CANCELLED
                        book.store.set_pod_state(pod_record.pod.key, POD_CANCELLED)
                record.state = WorkloadState.CANCELLED
                record.finished = now
                book.store.set_workload_state(key, record.state.value, finished=now)
                book.store.add_events([event])
            record.events.append(event)
            self.world.cancel(record.pods)
            self.held.pop(key, None)
        book.publish([Change(ChangeKind.WORKLOAD, key, now, {"state": "Cancelled"})], [event])
        return True
