"""The simulated cluster's books of its pods, which its parts are given and share.

Owns :class:`PodBooks`: which pods wait, which run (and their allocations on the ground truth,
:mod:`gpufleet.backends.sim.ground_truth`), what is left of each one's work
(:class:`~gpufleet.backends.sim.work.PodWork`), the event queue and the events to report at the
next poll, the jobs' controllers, the recorders, and the counts the telemetry reads (arrivals,
runs started again in place). :class:`~gpufleet.backends.sim.cluster.SimulatedCluster` makes it
and gives it to its parts, :class:`~gpufleet.backends.sim.pod_runs.PodRuns` (the pods' ordinary
moves) and :class:`~gpufleet.backends.sim.pod_losses.PodLosses` (the pods it loses). It moves
nothing itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from gpufleet.backends.sim.controllers import JobControllers
from gpufleet.backends.sim.event_queue import EventQueue
from gpufleet.backends.sim.ground_truth import GroundTruth
from gpufleet.backends.sim.queue_recorder import QueueRecorder
from gpufleet.backends.sim.recorder import Recorder
from gpufleet.backends.sim.work import PodWork
from gpufleet.model import Node, Pod
from gpufleet.model.events import ClusterEvent
from gpufleet.scheduling.node_table import Allocation
from gpufleet.scheduling.target import TargetWorkload


class Mode(StrEnum):
    """How the world runs (:mod:`gpufleet.backends.sim.cluster` says what each does)."""

    FILL = "fill"
    REPLAY = "replay"


class PodBooks:
    """See the module docstring."""

    def __init__(
        self,
        nodes: Sequence[Node],
        mode: Mode,
        target: TargetWorkload,
        queue_recorder: QueueRecorder | None,
        keep_job_runs: bool = True,
    ) -> None:
        """``keep_job_runs``: keep every job's controller for the run's report (a long-lived
        world does not)."""
        self.mode = mode
        self.truth = GroundTruth(nodes)
        self.world = self.truth.table
        self.recorder = Recorder(self.world, target)
        self.queue_recorder = queue_recorder
        self.arrivals_seen = 0
        self.jobs = JobControllers(keep=keep_job_runs)
        #: The last XID on each device (a fault records it; the telemetry reads it).
        self.xids = self.truth.xids
        self.events = EventQueue()
        #: Events to report at the next poll, whatever the time.
        self.immediate: list[ClusterEvent] = []
        self.running: dict[str, Allocation] = {}
        #: Bumped when a placed pod's run starts again where it is (a restart in place, a
        #: Job's next completion): with the ground truth's clock (every placement and release),
        #: it says whether what runs where changed (telemetry keeps what it derives until then).
        self.run_starts = 0
        #: Every pod here (waiting, running, or away to come back) and what is left of its work.
        self.works: dict[str, PodWork] = {}
        self.pending: dict[str, Pod] = {}

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node that was in the cluster, up or gone (nodes that joined too)."""
        return self.truth.nodes
