"""What the Kubernetes backend holds, and the informers' changes taken into it.

Owns :class:`BackendState`, the state :class:`~gpufleet.backends.kube.backend.KubeBackend`
gives each of its parts and they share: the objects as the API last showed them, which of them
changed since the last poll (nodes, pods, the pods of a PodGroup that changed), the pods of each
gang and those to assemble again, the Queues, PriorityClasses and ResourceQuotas read into the
:class:`LiveCatalog` (and its version, bumped when they change), invalid objects reported once
per version, and the record of what the core has been told (:class:`Told` per pod, the nodes,
the device ledger), which the reconcilers keep.
Every attribute the parts share is made here, in one place (the binder pool and the calls in
flight are the calls' own: calls.py). Also the :class:`Reporter` protocol and the counters the
backend keeps.

Does not decide what the core is told (reconcile_nodes, reconcile_pods, workloads) nor call the
API (actions); the lifecycle and the ClusterBackend protocol are the backend's (backend.py).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.device_ledger import DeviceLedger
from gpufleet.backends.kube.pods import PodState
from gpufleet.backends.kube.readings import PodReadings
from gpufleet.io.kube.binding_signature import BindingKey
from gpufleet.io.kube.node_ends import NodeEnd
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.kube_client.api import (
    NODES,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    RESOURCE_QUOTAS,
    WATCHED,
    KubeApi,
    Obj,
    Resource,
)
from gpufleet.kube_client.informer import DELETED, Change, Informers, object_key
from gpufleet.model import Node, Placement
from gpufleet.model.workload import TimedPod

#: Kinds whose change means a new core (queues, priorities and quotas are fixed in one).
CONFIG_KINDS = frozenset({QUEUES, PRIORITY_CLASSES, RESOURCE_QUOTAS})


class WallClock:
    def now(self) -> float:
        return time.time()


class Reporter(Protocol):
    """Tells users what happened and why (pod conditions, Events, object status)."""

    def scheduled(self, pod: Obj, placement: Placement) -> None: ...
    def unschedulable(self, pod: Obj, message: str, reason: str = "Unschedulable") -> None:
        """``pod`` waits: its PodScheduled condition says why (``reason``: kube-scheduler's
        ``Unschedulable``, or ``SchedulingGated`` for a pod or gang held by its gates)."""
        ...

    def preempted(self, pod: Obj, preemptor: str | None, reason: str) -> None: ...
    def eviction_blocked(self, pod: Obj, message: str) -> None: ...
    def gang_evicted(self, pod: Obj, reason: str) -> None:
        """``pod`` is evicted with its whole gang: a node of the gang goes away."""
        ...

    def invalid(self, kind: str, obj: Obj, message: str) -> None: ...
    def devices_withdrawn(self, pod: Obj, node: Obj | None, message: str) -> None:
        """``pod`` holds GPUs its node (``node``) no longer lists: kept and counted."""
        ...

    def forget(self, pod_key: str) -> None:
        """``pod_key`` is gone: drop what was remembered to rate-limit its reports."""
        ...


class NullReporter:
    def scheduled(self, pod: Obj, placement: Placement) -> None: ...
    def unschedulable(self, pod: Obj, message: str, reason: str = "Unschedulable") -> None: ...
    def preempted(self, pod: Obj, preemptor: str | None, reason: str) -> None: ...
    def eviction_blocked(self, pod: Obj, message: str) -> None: ...
    def gang_evicted(self, pod: Obj, reason: str) -> None:
        """``pod`` is evicted with its whole gang: a node of the gang goes away."""

    def invalid(self, kind: str, obj: Obj, message: str) -> None: ...
    def devices_withdrawn(self, pod: Obj, node: Obj | None, message: str) -> None: ...
    def forget(self, pod_key: str) -> None: ...


@dataclass(slots=True, eq=False)
class BindCall:
    """One Binding of one pod, decided in ``term`` (see :attr:`BackendState.term`)."""

    key: str
    uid: str
    placement: Placement
    term: int
    #: Set under the backend's lock by the fence just before the POST goes out: a call not
    #: sent when its term ended never will be.
    sent: bool = False
    #: An outcome of it was taken in (by the loop's thread).
    answered: bool = False
    #: The API server answered it 2xx (or the pod was read bound to its node): it is bound.
    bound: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a binder learnt of a :class:`BindCall`, in the term it was learnt for.

    ``kind``: ``bound``; ``failed`` (known not bound: refused, or the pod read without it);
    ``unknown`` (no answer, a timeout, a reset, 409 or 5xx: it may have been carried out);
    ``dropped`` (never sent: the fence said no). ``checked``: learnt by reading the pod."""

    kind: str
    call: BindCall
    detail: str
    term: int
    checked: bool = False


@dataclass(frozen=True, slots=True)
class PlannedEviction:
    """An eviction the core decided in ``term``, of the pod of ``uid`` bound to ``node``."""

    key: str
    uid: str
    node: str
    preemptor: str | None
    reason: str
    term: int


@dataclass(slots=True)
class Told:
    """What the core knows of one pod."""

    state: PodState
    placement: Placement | None = None
    ready: bool = False
    in_flight: bool = False  # a bind we issued that the API has not confirmed yet
    demoted: bool = False  # the core was told to lower its workload (its preemptible label)
    #: Our bind of it while the informers have not shown it bound (None: none, or confirmed).
    call: BindCall | None = None
    #: The pods of the gang workload it waits in (one set shared by them all); None: it waits
    #: as a workload of its own, or is bound.
    gang: frozenset[str] | None = None


@dataclass(slots=True)
class Counters:
    binds: int = 0
    bind_failures: int = 0
    evictions: int = 0
    evictions_blocked: int = 0
    invalid_objects: int = 0


class BackendState:
    """The objects, what changed in them, and what the core has been told (see the module
    docstring)."""

    def __init__(
        self,
        api: KubeApi,
        scheduler_name: str = "gpufleet",
        reporter: Reporter | None = None,
        watch_timeout_s: int = 300,
        informers: Informers | None = None,
        guard_gangs: bool = True,
        binding_key: BindingKey | None = None,
    ) -> None:
        """``guard_gangs``: write the autoscalers' do-not-disrupt annotations on the pods of
        the gangs it binds (:func:`gpufleet.io.kube.disruption.gang_guard`). ``binding_key``: sign
        each binding's device annotations with it (None: unsigned, which node agents holding
        a key refuse)."""
        self.api = api
        self.scheduler_name = scheduler_name
        self.guard_gangs = guard_gangs
        self.binding_key = binding_key
        self.reporter: Reporter = reporter or NullReporter()
        self.clock = WallClock()
        self.counters = Counters()
        #: Told the seconds each Binding call took, answered or refused (from binder threads).
        self.bind_answered: Callable[[float], None] = _ignore
        self.watching = informers or Informers(api, WATCHED, watch_timeout_s)
        self.stop = self.watching.stop
        self.wake = self.watching.wake
        self.changes = self.watching.changes
        self.results: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self.informers = self.watching.by_resource
        #: Objects as the API last showed them.
        self.objects: dict[Resource, dict[str, Obj]] = {r: {} for r in WATCHED}
        self.config_version = 0
        self.catalog = LiveCatalog()
        self._reported_invalid: dict[tuple[str, str], str] = {}
        # What the core has been told.
        self.nodes: dict[str, Node] = {}
        self.told: dict[str, Told] = {}
        self.ledger = DeviceLedger()
        self.dirty_nodes: set[str] = set()
        self.dirty_pods: set[str] = set()
        self.group_members: dict[tuple[str, str], set[str]] = defaultdict(set)
        #: Waiting pods of gangs to assemble again at the next poll: those whose gang the core
        #: dropped (a member left it) and those waiting for their gang to start.
        self.regroup: set[str] = set()
        self.replay_binds: list[BindCall] = []
        #: Evictions a PodDisruptionBudget refused, by when to try them again.
        self.evictions_due: list[tuple[float, PlannedEviction]] = []
        #: Evictions of pods whose bind has no known outcome yet: sent once it is bound.
        self.evict_after_bind: dict[str, PlannedEviction] = {}
        #: Binds whose outcome is unknown, by when to read their pod (again).
        self.checks_due: list[tuple[float, BindCall]] = []
        self.lock = threading.Lock()
        #: The term: bumped by each resync (a new core) and each loss of leadership. What is
        #: queued is tagged with the term that decided it, and nothing of an earlier term is
        #: sent or handed to the core as it is (actions.py).
        self.term = 0
        #: Whether this replica may act now (the scheduler's leader election; asked before
        #: each turn's actions are applied and before each bind and eviction is sent).
        self.leading: Callable[[], bool] = _always
        #: Pods read once per shape; nodes once per resourceVersion (None: does not read);
        #: objects changed but not read yet.
        self.readings = PodReadings()
        self.node_readings: dict[str, tuple[str, Node | None]] = {}
        self.unread: set[str] = set()
        self.unread_nodes: set[str] = set()
        #: Nodes that announce their end: their ends, and when they were first seen.
        self.ends: dict[str, tuple[tuple[NodeEnd, ...], float]] = {}
        #: Whether ends or the pods on nodes changed since gangs were last sent away.
        self.ends_changed = False
        #: When the next pod must leave an ending node (Unix seconds; inf: none waits).
        self.ends_due = math.inf
        #: Pods the core was told to evict with their gang (each told once).
        self.sent_away: set[str] = set()
        #: Bound pods holding GPUs their node no longer lists -> those GPUs (reported once
        #: per change; the core keeps them counted).
        self.on_withdrawn_devices: dict[str, tuple[int, ...]] = {}

    # ----------------------------------------------------------------------------- changes in
    def drain(self) -> None:
        """Take the informers' changes into the objects (a standby replica keeps warm so)."""
        while True:
            try:
                change = self.changes.get_nowait()
            except queue.Empty:
                return
            self._take_change(change)

    def _take_change(self, change: Change) -> None:
        resource, obj = change.resource, change.obj
        key = object_key(obj)
        store = self.objects[resource]
        old = store.get(key)
        if change.type == DELETED:
            store.pop(key, None)
        else:
            store[key] = obj
        if resource is PODS:
            if change.type == DELETED:
                self.readings.forget(key)
                self.unread.discard(key)
            else:
                self.unread.add(key)
            self._index_group(key, old, None if change.type == DELETED else obj)
            self.dirty_pods.add(key)
        elif resource is NODES:
            self.dirty_nodes.add(key)
            if change.type == DELETED:
                self.node_readings.pop(key, None)
                self.unread_nodes.discard(key)
            else:
                self.unread_nodes.add(key)
        elif resource in CONFIG_KINDS:
            # Status writes (ours on Queues, the quota controller's on ResourceQuotas) change
            # nothing the core is built from.
            new = None if change.type == DELETED else obj
            if _config_part(old) != _config_part(new):
                self.config_version += 1
        else:  # a PodGroup: its pods may now be complete
            namespace = podinfo.namespace_of(obj)
            name = str((obj.get("metadata") or {}).get("name", ""))
            self.dirty_pods.update(self.group_members.get((namespace, name), ()))

    def _index_group(self, key: str, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            group = podinfo.pod_group(obj)
            if group is None:
                continue
            members = self.group_members[(podinfo.namespace_of(obj), group)]
            if add:
                members.add(key)
            else:
                members.discard(key)

    def rebuild_catalog(self) -> None:
        self.catalog = LiveCatalog(
            self.objects[QUEUES].values(),
            self.objects[PRIORITY_CLASSES].values(),
            self.objects[RESOURCE_QUOTAS].values(),
        )
        for rejected in self.catalog.rejected:
            resource = {"Queue": QUEUES, "PriorityClass": PRIORITY_CLASSES}.get(
                rejected.kind, RESOURCE_QUOTAS
            )
            obj = self.objects[resource].get(rejected.key)
            if obj is not None:
                self.report_invalid(rejected.kind, obj, rejected.message)

    def report_invalid(self, kind: str, obj: Obj, message: str) -> None:
        version = repr(_config_part(obj)) if kind != "Pod" else resource_version(obj)
        key = (kind, object_key(obj))
        if self._reported_invalid.get(key) == version:
            return
        self._reported_invalid[key] = version
        self.counters.invalid_objects += 1
        self.reporter.invalid(kind, obj, message)

    def timed_pod(self, obj: Obj) -> TimedPod:
        """``obj`` read as a pod, once per resourceVersion: the core's build, bound pods and
        the workloads of waiting ones all use one reading. Raises :class:`InputError`."""
        return self.readings.timed_pod(obj)


def _always() -> bool:
    return True


def _ignore(seconds: float) -> None:
    """No one is told how long binds take."""


def _config_part(obj: Obj | None) -> object:
    """What the core is built from: everything but metadata and status."""
    if obj is None:
        return None
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
