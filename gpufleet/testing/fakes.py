"""A fake cluster for tests of the scheduling core: it carries out actions at once and reports
their outcomes as events, so tests drive the core the way a backend does, without a clock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.model import Node, Placement
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import ClusterEvent, PodDeleted, PodReady, WorkloadAdded
from gpufleet.model.queues import Queue, ResourceQuota
from gpufleet.model.times import TimeFormat, simulated_time
from gpufleet.model.workload import Workload
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile
from gpufleet.scheduling.registry import Registry
from gpufleet.scheduling.target import TargetWorkload


def make_core(
    nodes: Iterable[Node],
    queues: Iterable[Queue] = (),
    policy: str = "bestfit",
    resource_quotas: Iterable[ResourceQuota] = (),
    profile: Profile = DEFAULT_PROFILE,
    registry: Registry | None = None,
    time_format: TimeFormat = simulated_time,
    **config: object,
) -> SchedulerCore:
    """A core over ``nodes`` with ``queues``; ``config`` sets :class:`AdmissionConfig` fields;
    ``profile`` names its plugins, looked up in ``registry`` (by default the built-in ones).
    ``time_format`` says which world's clock ``now`` is: a simulated cluster's (seconds since
    it started, the default) or the wall clock's (:func:`~gpufleet.model.times.wall_clock_time`:
    Unix seconds), as its messages read instants."""
    registry = registry or Registry.default()
    table = NodeTable(list(nodes))
    return SchedulerCore(
        table,
        make_policy(policy, table, PolicyContext(TargetWorkload((), ())), registry.policies),
        queues={q.name: q for q in queues},
        resource_quotas=resource_quotas,
        config=AdmissionConfig(**config),  # type: ignore[arg-type]
        profile=profile,
        registry=registry,
        time_format=time_format,
    )


class EchoCluster:
    """Every Bind succeeds (its pod is ready at once unless ``ready`` is False); every Evict
    ends its pod at once. Records what runs where, and every action."""

    def __init__(self, core: SchedulerCore, ready: bool = True) -> None:
        self.core = core
        self.ready = ready
        self.running: dict[str, Placement] = {}
        self.actions: list[Action] = []
        self.evicted: list[str] = []
        self.told: dict[str, str] = {}

    def submit(self, *workloads: Workload, now: float | None = None) -> list[Action]:
        """Add workloads and let the core settle."""
        self.core.handle_all(WorkloadAdded(w) for w in workloads)
        return self.settle(now)

    def settle(self, now: float | None = None, max_rounds: int = 10_000) -> list[Action]:
        """Cycles and echoed events until the core has nothing more to do now."""
        out: list[Action] = []
        for _ in range(max_rounds):
            actions = self.core.run_until_idle(now)
            out.extend(actions)
            events = self.apply(actions)
            if not events:
                return out
            self.core.handle_all(events)
        raise AssertionError("the core did not settle")

    def apply(self, actions: Iterable[Action]) -> list[ClusterEvent]:
        events: list[ClusterEvent] = []
        for action in actions:
            self.actions.append(action)
            key = action.pod.key
            if isinstance(action, Bind):
                assert key not in self.running, f"{key} bound twice"
                self.running[key] = action.placement
                if self.ready:
                    events.append(PodReady(key))
            elif isinstance(action, Evict):
                if self.running.pop(key, None) is not None:
                    self.evicted.append(key)
                    events.append(PodDeleted(key))
            elif isinstance(action, MarkUnschedulable):
                self.told[key] = action.message
        return events

    def finish(self, *pod_keys: str, now: float | None = None) -> list[Action]:
        """Pods end (their work is done); the core settles."""
        for key in pod_keys:
            del self.running[key]
        self.core.handle_all(PodDeleted(k) for k in pod_keys)
        return self.settle(now)

    def finish_workload(self, workload: Workload, now: float | None = None) -> list[Action]:
        return self.finish(*(p.key for p in workload.pods if p.key in self.running), now=now)

    def running_workloads(self) -> set[str]:
        return set(self.core.running)

    def gpus_of(self, queue_of: Mapping[str, str]) -> dict[str, int]:
        """Whole GPUs held per queue, with ``queue_of`` mapping pod key to queue."""
        held: dict[str, int] = {}
        for key, placement in self.running.items():
            queue = queue_of[key]
            held[queue] = held.get(queue, 0) + len(placement.gpu_indices)
        return held
