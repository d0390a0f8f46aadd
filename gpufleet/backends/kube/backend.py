"""The Kubernetes cluster behind the ClusterBackend protocol.

Owns the translation between the API's objects and the scheduling core's events and actions,
level-triggered: informers feed raw objects in; each :meth:`KubeBackend.poll_events` compares
every object that changed with what the core has been told about it and reports the difference
(a node added or gone, a pod bound by anyone, ready, deleted or finished, a workload complete
enough to admit). A node whose devices changed health (its agent's inventory annotation) is told
as ``DeviceHealthChanged`` at once, pods running there or not; any other change to a node is
taken in once no pod runs there. A new core (a restart, a leader change, changed Queues) is
told everything again by :meth:`KubeBackend.resync`, from the same objects, so it rebuilds
exactly the state the API holds: bound pods on the devices their annotations name, binds still
in flight included, nothing pending forgotten.

Actions are carried out through the API: Bind through the Binding subresource (a pool of
binder threads; the devices chosen go onto the pod as annotations in the same write), Evict
through the Eviction API (a PodDisruptionBudget that forbids it is retried later), and why a
pod waits through the :class:`Reporter`.

Gangs: pods labelled with a pod group (ours, scheduler-plugins') or annotated with a Volcano
group name (as KubeRay and the Kubeflow operators do with their gang-scheduling integration)
wait until their PodGroup object exists and minMember of them exist, then go to the core as
one workload; pods of a group that arrive once the gang runs
are workloads of their own. An evicted pod does not come back in Kubernetes (its controller
makes a new one), so a deleted pod is reported twice: the first report ends its run, the second
drops the copy the core requeues after an eviction.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.api import (
    COSCHEDULING_POD_GROUPS,
    NODES,
    POD_GROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    RESOURCE_QUOTAS,
    VOLCANO_POD_GROUPS,
    WATCHED,
    ApiError,
    KubeApi,
    Obj,
    Resource,
)
from gpufleet.backends.kube.devices import (
    DeviceLedger,
    placement_annotations,
    placement_from_annotations,
)
from gpufleet.backends.kube.informer import DELETED, Change, Informers, object_key
from gpufleet.backends.kube.pods import PodState
from gpufleet.backends.kube.readings import PodReadings
from gpufleet.control.backend import ClusterState
from gpufleet.io.errors import InputError
from gpufleet.io.inventory import INVENTORY_ANNOTATION, inventory_from_json
from gpufleet.io.kube_nodes import node_from_object
from gpufleet.io.live_objects import SOURCE, LiveCatalog, live_manifest, timed_pod, with_min_member
from gpufleet.model import Node, Placement, Pod
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import (
    BindFailed,
    ClusterEvent,
    DeviceHealthChanged,
    NodeAdded,
    NodeRemoved,
    PodBound,
    PodDeleted,
    PodReady,
    WorkloadAdded,
)
from gpufleet.model.node import same_but_health, with_gpu_health
from gpufleet.model.workload import TimedPod

log = logging.getLogger(__name__)

#: Where a gang's minMember may come from: our PodGroups, scheduler-plugins', Volcano's.
GROUP_KINDS = (POD_GROUPS, COSCHEDULING_POD_GROUPS, VOLCANO_POD_GROUPS)
#: Kinds whose change means a new core (queues, priorities and quotas are fixed in one).
CONFIG_KINDS = frozenset({QUEUES, PRIORITY_CLASSES, RESOURCE_QUOTAS})
EVICTION_RETRY_S = 5.0


class WallClock:
    def now(self) -> float:
        return time.time()


class Reporter(Protocol):
    """Tells users what happened and why (pod conditions, Events, object status)."""

    def scheduled(self, pod: Obj, placement: Placement) -> None: ...
    def unschedulable(self, pod: Obj, message: str) -> None: ...
    def preempted(self, pod: Obj, preemptor: str | None, reason: str) -> None: ...
    def eviction_blocked(self, pod: Obj, message: str) -> None: ...
    def invalid(self, kind: str, obj: Obj, message: str) -> None: ...
    def forget(self, pod_key: str) -> None:
        """``pod_key`` is gone: drop what was remembered to rate-limit its reports."""
        ...


class NullReporter:
    def scheduled(self, pod: Obj, placement: Placement) -> None: ...
    def unschedulable(self, pod: Obj, message: str) -> None: ...
    def preempted(self, pod: Obj, preemptor: str | None, reason: str) -> None: ...
    def eviction_blocked(self, pod: Obj, message: str) -> None: ...
    def invalid(self, kind: str, obj: Obj, message: str) -> None: ...
    def forget(self, pod_key: str) -> None: ...


@dataclass(slots=True)
class _Told:
    """What the core knows of one pod."""

    state: PodState
    placement: Placement | None = None
    ready: bool = False
    in_flight: bool = False  # a bind we issued that the API has not confirmed yet


@dataclass(slots=True)
class Counters:
    binds: int = 0
    bind_failures: int = 0
    evictions: int = 0
    evictions_blocked: int = 0
    invalid_objects: int = 0


class KubeBackend:
    """See the module docstring."""

    def __init__(
        self,
        api: KubeApi,
        scheduler_name: str = "gpufleet",
        reporter: Reporter | None = None,
        binders: int = 64,
        watch_timeout_s: int = 300,
        informers: Informers | None = None,
    ) -> None:
        self.api = api
        self.scheduler_name = scheduler_name
        self.reporter: Reporter = reporter or NullReporter()
        self.clock = WallClock()
        self.counters = Counters()
        #: Told the seconds each Binding call took, answered or refused (from binder threads).
        self.bind_answered: Callable[[float], None] = _ignore
        self.watching = informers or Informers(api, WATCHED, watch_timeout_s)
        self._stop = self.watching.stop
        self._wake = self.watching.wake
        self._changes = self.watching.changes
        self._results: queue.SimpleQueue[tuple[str, str, str]] = queue.SimpleQueue()
        self.informers = self.watching.by_resource
        self._binders = ThreadPoolExecutor(max_workers=binders, thread_name_prefix="binder")
        #: API calls (binds, evictions) sent to the binders and not answered yet.
        self._calls_open = 0
        self._calls_answered = threading.Condition()
        #: Objects as the API last showed them.
        self.objects: dict[Resource, dict[str, Obj]] = {r: {} for r in WATCHED}
        self.config_version = 0
        self.catalog = LiveCatalog()
        self._reported_invalid: dict[tuple[str, str], str] = {}
        # What the core has been told.
        self._nodes: dict[str, Node] = {}
        self._told: dict[str, _Told] = {}
        self._ledger = DeviceLedger()
        self._dirty_nodes: set[str] = set()
        self._dirty_pods: set[str] = set()
        #: Nodes changed while pods ran on them: taken in once they are empty.
        self._deferred_nodes: set[str] = set()
        self._group_members: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._replay_binds: list[tuple[str, Placement]] = []
        self._evictions_due: list[tuple[float, str, str | None, str]] = []
        self._lock = threading.Lock()
        #: Pods read once per shape; nodes once per resourceVersion (None: does not read);
        #: objects changed but not read yet.
        self.readings = PodReadings()
        self._node_readings: dict[str, tuple[str, Node | None]] = {}
        self._unread: set[str] = set()
        self._unread_nodes: set[str] = set()

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.watching.start()

    def wait_synced(self, timeout: float) -> bool:
        """Whether every informer has its first listing within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for informer in self.informers.values():
            if not informer.synced.wait(max(deadline - time.monotonic(), 0)):
                return False
        return True

    def wait_until_seen(
        self, resource: Resource, key: str, version: str | None, timeout: float
    ) -> bool:
        """Whether, within ``timeout`` seconds, the informers show object ``key`` of
        ``resource`` at ``version`` or later (None: gone): a write of ours has come back (the
        next :meth:`drain` takes it in)."""
        return self.informers[resource].wait_until_seen(key, version, timeout)

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    def close(self, timeout: float = 5.0) -> None:
        """Stop the informers (ending their open watches) and wait for them and the binders,
        so that nothing talks to the API server after this returns (``timeout`` for all the
        informers together)."""
        self._stop.set()
        self._wake.set()
        for informer in self.informers.values():
            informer.close()
        deadline = time.monotonic() + timeout
        for informer in self.informers.values():
            informer.join(max(deadline - time.monotonic(), 0.0))
        self._binders.shutdown(wait=True, cancel_futures=False)

    # ----------------------------------------------------------------------------- protocol
    @property
    def done(self) -> bool:
        return self._stop.is_set()

    def list_state(self) -> ClusterState:
        """The nodes and bound pods as the API shows them now (pending work comes as
        workloads from :meth:`poll_events` after :meth:`resync`)."""
        self.drain()
        nodes = [n for n in (self.parse_node(o) for o in self.objects[NODES].values()) if n]
        running: list[tuple[Pod, Placement]] = []
        for key, told in self._told.items():
            if told.state is PodState.BOUND and told.placement is not None:
                pod = self.parse_pod(self.objects[PODS].get(key))
                if pod is not None:
                    running.append((pod, told.placement))
        return ClusterState(nodes, (), running)

    def resync(self) -> list[Node]:
        """Forget what the core was told: the next poll tells a new core everything but the
        nodes returned (by name), which the new core is to be built with."""
        self.drain()
        with self._lock:
            in_flight = {k: t for k, t in self._told.items() if t.in_flight}
        self._nodes.clear()
        self._deferred_nodes.clear()
        self._ledger = DeviceLedger()
        self._told = {}
        # Binds in flight are facts for the new core too: it must not place those pods again.
        self._replay_binds = [(k, t.placement) for k, t in in_flight.items() if t.placement]
        for name in sorted(self.objects[NODES]):
            node = self.parse_node(self.objects[NODES][name])
            if node is not None:
                self._nodes[name] = node
        self._dirty_pods = set(self.objects[PODS])
        self._rebuild_catalog()
        return list(self._nodes.values())

    def poll_events(self) -> Sequence[ClusterEvent]:
        self.drain()
        out: list[ClusterEvent] = []
        for key, placement in self._replay_binds:
            pod = self.parse_pod(self.objects[PODS].get(key))
            if pod is not None and key not in self._told:
                self._told[key] = _Told(PodState.BOUND, placement, in_flight=True)
                self._ledger.take(placement)
                out.append(PodBound(pod, placement))
        self._replay_binds = []
        self._take_results(out)
        for name in sorted(self._dirty_nodes):
            self._reconcile_node(name, out)
        self._dirty_nodes.clear()
        waiting: set[str] = set()
        orphans: set[str] = set()
        for key in sorted(self._dirty_pods):
            if self._reconcile_pod(key, out, orphans):
                waiting.add(key)
        self._dirty_pods = orphans
        self._assemble(waiting, out)
        for name in [n for n in self._deferred_nodes if not self._node_busy(n)]:
            self._deferred_nodes.discard(name)
            self._reconcile_node(name, out)
        self._retry_evictions()
        return out

    def apply(self, actions: Sequence[Action]) -> None:
        for action in actions:
            if isinstance(action, Bind):
                self._bind(action.pod, action.placement)
            elif isinstance(action, Evict):
                self._evict(action.pod.key, action.preemptor, action.reason)
            elif isinstance(action, MarkUnschedulable):
                obj = self.objects[PODS].get(action.pod.key)
                if obj is not None:
                    self.reporter.unschedulable(obj, action.message)

    def wait(self, deadline: float) -> None:
        timeout = deadline - self.clock.now()
        if self._evictions_due:
            timeout = min(timeout, self._evictions_due[0][0] - time.monotonic())
        if timeout > 0 and not self._wake.is_set():
            self._wake.wait(min(timeout, 1.0) if math.isfinite(timeout) else 1.0)
        self._wake.clear()

    # ----------------------------------------------------------------------------- changes in
    def drain(self) -> None:
        """Take the informers' changes into the objects (a standby replica keeps warm so)."""
        while True:
            try:
                change = self._changes.get_nowait()
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
                self._unread.discard(key)
            else:
                self._unread.add(key)
            self._index_group(key, old, None if change.type == DELETED else obj)
            self._dirty_pods.add(key)
        elif resource is NODES:
            self._dirty_nodes.add(key)
            if change.type == DELETED:
                self._node_readings.pop(key, None)
                self._unread_nodes.discard(key)
            else:
                self._unread_nodes.add(key)
        elif resource in CONFIG_KINDS:
            # Status writes (ours on Queues, the quota controller's on ResourceQuotas) change
            # nothing the core is built from.
            new = None if change.type == DELETED else obj
            if _config_part(old) != _config_part(new):
                self.config_version += 1
        else:  # a PodGroup: its pods may now be complete
            namespace = podinfo.namespace_of(obj)
            name = str((obj.get("metadata") or {}).get("name", ""))
            self._dirty_pods.update(self._group_members.get((namespace, name), ()))

    def _index_group(self, key: str, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            group = podinfo.pod_group(obj)
            if group is None:
                continue
            members = self._group_members[(podinfo.namespace_of(obj), group)]
            if add:
                members.add(key)
            else:
                members.discard(key)

    def _rebuild_catalog(self) -> None:
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
                self._report_invalid(rejected.kind, obj, rejected.message)

    def _report_invalid(self, kind: str, obj: Obj, message: str) -> None:
        version = repr(_config_part(obj)) if kind != "Pod" else _resource_version(obj)
        key = (kind, object_key(obj))
        if self._reported_invalid.get(key) == version:
            return
        self._reported_invalid[key] = version
        self.counters.invalid_objects += 1
        self.reporter.invalid(kind, obj, message)

    # ----------------------------------------------------------------------------- nodes
    def parse_node(self, obj: Obj) -> Node | None:
        """``obj`` read as a node, once per resourceVersion (a resync, the poll after it and
        the read-ahead while listing and the control plane's node map all need it); None when it
        does not read (reported)."""
        name, version = object_key(obj), _resource_version(obj)
        seen = self._node_readings.get(name)
        if seen is not None and version and seen[0] == version:
            return seen[1]
        try:
            node: Node | None = node_from_object(obj, SOURCE, live_manifest(obj).location)
        except InputError as error:
            self._report_invalid("Node", obj, str(error))
            node = None
        self._node_readings[name] = (version, node)
        return node

    def _reconcile_node(self, name: str, out: list[ClusterEvent]) -> None:
        obj = self.objects[NODES].get(name)
        node = None if obj is None else self.parse_node(obj)
        known = self._nodes.get(name)
        if known is not None and node is not None and _same_node(known, node):
            return
        if known is not None and node is not None and obj is not None:
            health_only = same_but_health(known, node)
            if health_only or self._node_busy(name):
                # Device health is applied at once, pods running there or not.
                self._tell_health(name, known, node, obj, out)
            if health_only:
                self._nodes[name] = node
                return
        if known is not None:
            if obj is not None and self._node_busy(name):
                # The core keeps a node's rows while pods hold them; a changed node is taken
                # in once it is empty (or at the next resync). So is one that does not read
                # for now (reported): its pods still hold what they hold on it.
                self._deferred_nodes.add(name)
                return
            del self._nodes[name]
            out.append(NodeRemoved(name))
        if node is not None:
            self._nodes[name] = node
            out.append(NodeAdded(node))
            self._dirty_pods.update(
                k for k, o in self.objects[PODS].items() if podinfo.node_name(o) == name
            )

    def _tell_health(
        self, name: str, known: Node, node: Node, obj: Obj, out: list[ClusterEvent]
    ) -> None:
        """Tell the core which of the devices it knows on ``name`` are unhealthy now, if that
        changed (the rest of a changed node waits until the node is empty)."""
        indices = {g.index for g in known.gpus}
        unhealthy = tuple(i for i in node.unhealthy_gpus if i in indices)
        if unhealthy == known.unhealthy_gpus:
            return
        self._nodes[name] = with_gpu_health(known, unhealthy)
        reasons = tuple((i, why) for i, why in _health_reasons(obj) if i in unhealthy)
        out.append(DeviceHealthChanged(name, unhealthy, reasons))

    def _node_busy(self, name: str) -> bool:
        return any(
            t.placement is not None and t.placement.node == name for t in self._told.values()
        )

    # ----------------------------------------------------------------------------- pods
    def parse_pod(self, obj: Obj | None) -> Pod | None:
        """A bound pod as the core counts it (or a pod whose shape the target learns from).
        One whose affinity or spread constraints cannot be read (a namespaceSelector on labels
        gpufleet does not know) is reported and counted without them: what it holds on its
        node still counts, as kube-scheduler would count it."""
        if obj is None:
            return None
        try:
            return self.timed_pod(obj).pod
        except InputError as error:
            self._report_invalid("Pod", obj, str(error))
        spec = obj.get("spec")
        if not isinstance(spec, dict) or not {"affinity", "topologySpreadConstraints"} & set(spec):
            return None
        bare = {k: v for k, v in spec.items() if k not in ("affinity", "topologySpreadConstraints")}
        try:
            return timed_pod({**obj, "spec": bare}).pod
        except InputError:
            return None

    def known_pods(self) -> tuple[list[Pod], list[float]]:
        """Every pod of the cluster as the core counts it, as (pods, how many of each): one
        pod per shape of many replicas (what a target workload is made of)."""
        pods, counts, broken = self.readings.shapes(self.objects[PODS].values())
        for obj in broken:
            pod = self.parse_pod(obj)  # read without the rules it could not read, or not
            if pod is not None:
                pods.append(pod)
                counts.append(1.0)
        return pods, counts

    def timed_pod(self, obj: Obj) -> TimedPod:
        """``obj`` read as a pod, once per resourceVersion: the core's build, bound pods and
        the workloads of waiting ones all use one reading. Raises :class:`InputError`."""
        return self.readings.timed_pod(obj)

    def read_ahead(self) -> int:
        """Take in the informers' changes and read the pods and nodes among them now, while
        the informers still list (a start with thousands of pods then decides sooner);
        returns how many objects were read."""
        self.drain()
        read = 0
        for key in list(self._unread):
            obj = self.objects[PODS].get(key)
            if obj is not None:
                with contextlib.suppress(InputError):
                    self.readings.read(obj)
                    read += 1
        for name in self._unread_nodes:
            obj = self.objects[NODES].get(name)
            if obj is not None:
                self.parse_node(obj)
                read += 1
        self._unread.clear()
        self._unread_nodes.clear()
        return read

    def _reconcile_pod(self, key: str, out: list[ClusterEvent], orphans: set[str]) -> bool:
        """Report what changed for one pod; True when it waits for assembly. A bound pod new
        to the core whose node the core does not know yet goes to ``orphans``: it is tried
        again when the node comes."""
        obj = self.objects[PODS].get(key)
        state = podinfo.pod_state(obj, self.scheduler_name)
        told = self._told.get(key)
        if state is PodState.GONE:
            self.reporter.forget(key)
            if told is not None:
                del self._told[key]
                if told.placement is not None and told.state is PodState.BOUND:
                    self._ledger.give_back(told.placement)
                out.extend((PodDeleted(key), PodDeleted(key)))
            return False
        assert obj is not None
        if state is PodState.WAITING:
            return told is None
        # Bound (by us or anyone).
        node = podinfo.node_name(obj)
        if told is not None and told.state is PodState.BOUND:
            assert told.placement is not None
            if told.placement.node != node:  # someone else bound it first: take their word
                self._ledger.give_back(told.placement)
                del self._told[key]
                out.append(PodDeleted(key))
                return self._reconcile_pod(key, out, orphans)
            told.in_flight = False
            if not told.ready and podinfo.is_ready(obj):
                told.ready = True
                out.append(PodReady(key))
            return False
        if node not in self._nodes:
            if told is None:
                orphans.add(key)
            return False
        pod = self.parse_pod(obj)
        if pod is None:
            return False
        if told is not None:  # it waited in the core: bound elsewhere meanwhile
            out.append(PodDeleted(key))
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        placement = placement_from_annotations(node, annotations)
        if placement is None:
            placement = self._ledger.guess(pod, self._nodes[node])
        self._ledger.take(placement)
        ready = podinfo.is_ready(obj)
        self._told[key] = _Told(PodState.BOUND, placement, ready)
        out.append(PodBound(pod, placement))
        if ready:
            out.append(PodReady(key))
        return False

    def _assemble(self, waiting: Iterable[str], out: list[ClusterEvent]) -> None:
        """Workloads for waiting pods the core does not have yet: lone pods and complete gangs,
        in order of creation (then name), as a queue sees arrivals."""
        offers: dict[tuple[str, str], tuple[str, str] | None] = {}
        offered_groups: set[tuple[str, str]] = set()
        pod_objects = self.objects[PODS]
        for key in waiting:
            obj = pod_objects[key]
            group = podinfo.pod_group(obj)
            metadata = obj.get("metadata") or {}
            order = (str(metadata.get("creationTimestamp") or ""), key)
            if group is None:
                offers[order] = None
                continue
            target = (podinfo.namespace_of(obj), group)
            if target not in offered_groups:
                offered_groups.add(target)
                offers[order] = target
        for order in sorted(offers):
            group_of = offers[order]
            if group_of is None:
                self._offer([pod_objects[order[1]]], None, 0, out)
            else:
                self._offer_group(*group_of, out)

    def _offer_group(self, namespace: str, group: str, out: list[ClusterEvent]) -> None:
        members = sorted(self._group_members.get((namespace, group), ()))
        pod_objects = self.objects[PODS]
        waiting = [
            pod_objects[k]
            for k in members
            if k not in self._told
            and podinfo.pod_state(pod_objects.get(k), self.scheduler_name) is PodState.WAITING
        ]
        if not waiting:
            return
        running = [k for k in members if k in self._told]
        if running:  # the gang has started: later pods are workloads of their own
            for obj in waiting:
                self._offer([obj], None, 0, out)
            return
        spec = next(
            (
                found
                for kind in GROUP_KINDS
                if (found := self.objects[kind].get(f"{namespace}/{group}"))
            ),
            None,
        )
        needed = None if spec is None else podinfo.min_member(spec)
        if needed is None:
            message = (
                f"waiting for PodGroup {namespace}/{group} (gpufleet.dev/v1alpha1, "
                "scheduling.x-k8s.io/v1alpha1 or scheduling.volcano.sh/v1beta1) with "
                "spec.minMember >= 1"
            )
            for obj in waiting:
                self.reporter.unschedulable(obj, message)
            return
        if len(waiting) < needed:
            message = f"waiting for gang {namespace}/{group}: {len(waiting)}/{needed} pods exist"
            for obj in waiting:
                self.reporter.unschedulable(obj, message)
            return
        self._offer(waiting, group, needed, out)

    def _offer(
        self, objs: list[Obj], group: str | None, needed: int, out: list[ClusterEvent]
    ) -> None:
        try:
            if group is None and len(objs) == 1:
                workload = self.readings.workload(self.catalog, objs[0])
            else:
                workload = self.catalog.workload(objs, group, self.timed_pod)
        except InputError as error:
            for obj in objs:
                self._report_invalid("Pod", obj, str(error))
            return
        if group is not None:
            workload = with_min_member(workload, needed)
        for pod in workload.pods:
            self._told[pod.key] = _Told(PodState.WAITING)
        out.append(WorkloadAdded(workload))

    # ----------------------------------------------------------------------------- actions
    def _bind(self, pod: Pod, placement: Placement) -> None:
        key = pod.key
        told = self._told.get(key)
        if told is None:  # the pod left between the cycle and now: let the core know
            self._results.put(("failed", key, "the pod no longer exists"))
            return
        told.state, told.placement, told.in_flight = PodState.BOUND, placement, True
        self._ledger.take(placement)
        self._call(self._bind_call, pod, placement)

    def _bind_call(self, pod: Pod, placement: Placement) -> None:
        sent = time.perf_counter()
        try:
            self.api.bind(pod.namespace, pod.name, placement.node, placement_annotations(placement))
        except ApiError as error:
            self._results.put(("failed", pod.key, error.message or str(error)))
        except Exception as error:  # never lose a bind outcome
            self._results.put(("failed", pod.key, repr(error)))
        else:
            self._results.put(("bound", pod.key, placement.node))
        self.bind_answered(time.perf_counter() - sent)
        self._wake.set()

    def _take_results(self, out: list[ClusterEvent]) -> None:
        while True:
            try:
                outcome, key, detail = self._results.get_nowait()
            except queue.Empty:
                return
            told = self._told.get(key)
            if outcome == "bound":
                self.counters.binds += 1
                obj = self.objects[PODS].get(key)
                if obj is not None and told is not None and told.placement is not None:
                    self.reporter.scheduled(obj, told.placement)
                continue
            self.counters.bind_failures += 1
            log.info("bind of %s failed: %s", key, detail)
            if told is not None and told.in_flight:
                assert told.placement is not None
                self._ledger.give_back(told.placement)
                self._told[key] = _Told(PodState.WAITING)
                self._dirty_pods.add(key)  # if it was bound by someone else, say so next
            out.append(BindFailed(key, detail))

    def _evict(self, key: str, preemptor: str | None, reason: str) -> None:
        obj = self.objects[PODS].get(key)
        if obj is None:
            return
        self.reporter.preempted(obj, preemptor, reason)
        self._call(self._evict_call, key, preemptor, reason)

    def _evict_call(self, key: str, preemptor: str | None, reason: str) -> None:
        namespace, name = key.split("/", 1)
        try:
            self.api.evict(namespace, name)
            self.counters.evictions += 1
        except ApiError as error:
            if error.status == 404:
                return
            self.counters.evictions_blocked += 1
            obj = self.objects[PODS].get(key)
            if obj is not None:
                self.reporter.eviction_blocked(obj, error.message or str(error))
            with self._lock:
                due = time.monotonic() + EVICTION_RETRY_S
                self._evictions_due.append((due, key, preemptor, reason))
                self._evictions_due.sort()
            self._wake.set()

    def _retry_evictions(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [e for e in self._evictions_due if e[0] <= now]
            self._evictions_due = [e for e in self._evictions_due if e[0] > now]
        for _, key, preemptor, reason in due:
            if key in self._told:
                self._call(self._evict_call, key, preemptor, reason)

    def _call(self, call: Callable[..., None], *args: object) -> None:
        """``call`` on a binder thread, counted until it has its answer."""
        with self._calls_answered:
            self._calls_open += 1
        self._binders.submit(self._counted, call, *args)

    def _counted(self, call: Callable[..., None], *args: object) -> None:
        try:
            call(*args)
        finally:
            with self._calls_answered:
                self._calls_open -= 1
                self._calls_answered.notify_all()

    def wait_calls_answered(self, timeout: float) -> bool:
        """Whether every bind and eviction sent so far has its answer within ``timeout``
        seconds (its outcome queued for the next poll): a turn's writes are done."""
        with self._calls_answered:
            return self._calls_answered.wait_for(lambda: self._calls_open == 0, timeout)


def _ignore(seconds: float) -> None:
    """No one is told how long binds take."""


def _config_part(obj: Obj | None) -> object:
    """What the core is built from: everything but metadata and status."""
    if obj is None:
        return None
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _health_reasons(obj: Obj) -> tuple[tuple[int, str], ...]:
    """(device index, why it is unhealthy) from a Node's inventory annotation, as far as it
    reads (the node itself read, so it does)."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(INVENTORY_ANNOTATION)
    if not isinstance(text, str):
        return ()
    try:
        inventory = inventory_from_json(text)
    except ValueError:
        return ()
    return tuple((d.index, d.reason) for d in inventory.devices if not d.healthy and d.reason)


def _same_node(a: Node, b: Node) -> bool:
    return a == b and dict(a.labels) == dict(b.labels)
