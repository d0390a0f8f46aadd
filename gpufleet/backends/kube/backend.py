"""The Kubernetes cluster behind the ClusterBackend protocol.

Owns the translation between the API's objects and the scheduling core's events and actions,
level-triggered: informers feed raw objects in; each :meth:`KubeBackend.poll_events` compares every
object that changed with what the core has been told about it and reports the difference (a node
added or gone, a pod bound by anyone, ready, deleted or finished, a workload complete enough to
admit). A node whose devices changed health (its agent's inventory annotation) is told as
``DeviceHealthChanged`` at once, and one cordoned, tainted or announcing its end (being removed by
an autoscaler, about to be terminated, not ready) as ``NodeSchedulingChanged``, pods running there
or not; any other change to a node (allocatable, devices) at once too, as the node leaving and
joining again, the pods running there counted on it throughout. When a node's end reaches a
gang running there, every pod of the gang is told as ``WorkloadDisrupted`` (node_ends.py): the core
evicts the gang whole. A new core (a restart, a leader change, changed Queues) is told everything
again by :meth:`KubeBackend.resync`, from the same objects, so it rebuilds exactly the state the API
holds: bound pods on the devices their annotations name, binds still in flight included, nothing
pending forgotten.

Actions are carried out through the API: Bind through the Binding subresource (a pool of
binder threads; the devices chosen go onto the pod as annotations in the same write), Evict
through the Eviction API (a PodDisruptionBudget that forbids it is retried later), and why a
pod waits through the :class:`Reporter`.

Gangs: pods labelled with a pod group (ours, scheduler-plugins') or annotated with a Volcano
group name (as KubeRay and the Kubeflow operators do with their gang-scheduling integration)
wait until their PodGroup object exists and minMember of them exist, then go to the core as
one workload; pods of a group that arrive once the gang runs
are workloads of their own, and a gang that waits is all or nothing whatever order its pods
come and go in (workloads.py). An evicted pod does not come back in Kubernetes (its controller
makes a new one), so a deleted pod is reported twice: the first report ends its run, the second
drops the copy the core requeues after an eviction.

What the backend holds and the informers' changes taken in are its :class:`BackendState`
(state.py, :attr:`KubeBackend.state`), given to each of its parts, each in its own module: Nodes
told to the core (reconcile_nodes.py), bound pods told to it (reconcile_pods.py), waiting pods
assembled into workloads (workloads.py), gangs sent away from ending nodes (node_ends.py), the
fenced calls on the binder threads (calls.py) and, given those, binds (actions.py) and
evictions (evictions.py) through the API. This module owns :class:`KubeBackend`, which holds the
parts: its lifecycle (informers started, synced, closed) and the ClusterBackend protocol, whose
poll runs the parts in order; its settings (the clock, whether it leads...) are its state's,
read and set through it."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence

from gpufleet.backends.kube.actions import ApiActions
from gpufleet.backends.kube.calls import ApiCalls
from gpufleet.backends.kube.device_ledger import DeviceLedger
from gpufleet.backends.kube.evictions import EVICTION_RETRY_S, ApiEvictions
from gpufleet.backends.kube.node_ends import NodeEndEvictions
from gpufleet.backends.kube.pods import PodState, is_preemptible
from gpufleet.backends.kube.reconcile_nodes import NodeReconciliation
from gpufleet.backends.kube.reconcile_pods import PodReconciliation
from gpufleet.backends.kube.state import (
    CONFIG_KINDS,
    BackendState,
    Counters,
    NullReporter,
    Reporter,
    Told,
    WallClock,
)
from gpufleet.backends.kube.workloads import GROUP_KINDS, WorkloadAssembly
from gpufleet.control.backend import ClusterState
from gpufleet.io.errors import InputError
from gpufleet.io.kube.binding_signature import BindingKey
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.kube_client.api import NODES, PODS, KubeApi, Obj, Resource
from gpufleet.kube_client.informer import Informer, Informers
from gpufleet.model import Node, Placement, Pod
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import ClusterEvent, PodBound, PodDeleted

__all__ = [
    "CONFIG_KINDS",
    "EVICTION_RETRY_S",
    "GROUP_KINDS",
    "Counters",
    "KubeBackend",
    "NullReporter",
    "Reporter",
    "WallClock",
]


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
        guard_gangs: bool = True,
        binding_key: BindingKey | None = None,
    ) -> None:
        """``binders``: the threads that send binds and evictions (:class:`ApiCalls`); the
        other arguments are :class:`BackendState`'s."""
        self.state = BackendState(
            api,
            scheduler_name,
            reporter,
            watch_timeout_s,
            informers,
            guard_gangs=guard_gangs,
            binding_key=binding_key,
        )
        self.calls = ApiCalls(self.state, binders)
        self.binds = ApiActions(self.state, self.calls)
        self.evictions = ApiEvictions(self.state, self.calls)
        self.node_changes = NodeReconciliation(self.state)
        self.pod_changes = PodReconciliation(self.state)
        self.workloads = WorkloadAssembly(self.state)
        self.node_ends = NodeEndEvictions(self.state)

    # ----------------------------------------------------------------------------- the state's
    @property
    def api(self) -> KubeApi:
        return self.state.api

    @property
    def clock(self) -> WallClock:
        return self.state.clock

    @property
    def objects(self) -> dict[Resource, dict[str, Obj]]:
        """Objects as the API last showed them."""
        return self.state.objects

    @property
    def informers(self) -> dict[Resource, Informer]:
        return self.state.informers

    @property
    def catalog(self) -> LiveCatalog:
        return self.state.catalog

    @property
    def config_version(self) -> int:
        return self.state.config_version

    @property
    def term(self) -> int:
        return self.state.term

    @property
    def counters(self) -> Counters:
        return self.state.counters

    @property
    def on_withdrawn_devices(self) -> dict[str, tuple[int, ...]]:
        return self.state.on_withdrawn_devices

    @property
    def guard_gangs(self) -> bool:
        return self.state.guard_gangs

    @guard_gangs.setter
    def guard_gangs(self, guard: bool) -> None:
        self.state.guard_gangs = guard

    @property
    def leading(self) -> Callable[[], bool]:
        return self.state.leading

    @leading.setter
    def leading(self, leading: Callable[[], bool]) -> None:
        self.state.leading = leading

    @property
    def bind_answered(self) -> Callable[[float], None]:
        return self.state.bind_answered

    @bind_answered.setter
    def bind_answered(self, told: Callable[[float], None]) -> None:
        self.state.bind_answered = told

    def drain(self) -> None:
        """Take the informers' changes into the objects (a standby replica keeps warm so)."""
        self.state.drain()

    def parse_node(self, obj: Obj) -> Node | None:
        return self.node_changes.parse_node(obj)

    def known_pods(self) -> tuple[list[Pod], list[float]]:
        return self.pod_changes.known_pods()

    def abandon(self, why: str) -> None:
        self.calls.abandon(why)

    def wait_calls_answered(self, timeout: float) -> bool:
        return self.calls.wait_calls_answered(timeout)

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.state.watching.start()

    def wait_synced(self, timeout: float) -> bool:
        """Whether every informer has its first listing within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for informer in self.state.informers.values():
            if not informer.synced.wait(max(deadline - time.monotonic(), 0)):
                return False
        return True

    def wait_until_seen(
        self, resource: Resource, key: str, version: str | None, timeout: float
    ) -> bool:
        """Whether, within ``timeout`` seconds, the informers show object ``key`` of
        ``resource`` at ``version`` or later (None: gone): a write of ours has come back (the
        next :meth:`drain` takes it in)."""
        return self.state.informers[resource].wait_until_seen(key, version, timeout)

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.state.informers.values())

    def close(self, timeout: float = 5.0) -> None:
        """Stop the informers (ending their open watches) and wait for them and the binders,
        so that nothing talks to the API server after this returns (``timeout`` for all the
        informers together)."""
        self.state.stop.set()
        self.state.wake.set()
        for informer in self.state.informers.values():
            informer.close()
        deadline = time.monotonic() + timeout
        for informer in self.state.informers.values():
            informer.join(max(deadline - time.monotonic(), 0.0))
        self.calls.shutdown()

    # ----------------------------------------------------------------------------- protocol
    @property
    def done(self) -> bool:
        return self.state.stop.is_set()

    def list_state(self) -> ClusterState:
        """The nodes and bound pods as the API shows them now (pending work comes as
        workloads from :meth:`poll_events` after :meth:`resync`)."""
        self.state.drain()
        nodes = [
            n
            for n in (self.node_changes.parse_node(o) for o in self.state.objects[NODES].values())
            if n
        ]
        running: list[tuple[Pod, Placement]] = []
        for key, told in self.state.told.items():
            if told.state is PodState.BOUND and told.placement is not None:
                pod = self.pod_changes.parse_pod(self.state.objects[PODS].get(key))
                if pod is not None:
                    running.append((pod, told.placement))
        return ClusterState(nodes, (), running)

    def resync(self) -> list[Node]:
        """Forget what the core was told: the next poll tells a new core everything but the
        nodes returned (by name), which the new core is to be built with. A new term starts:
        nothing an earlier core decided is sent after this (calls.py)."""
        self.state.drain()
        with self.state.lock:
            self.state.term += 1
            # Binds sent are facts for the new core too: it must not place those pods again.
            # One not sent yet never will be now, and its pod waits for the new core.
            sent = [t.call for t in self.state.told.values() if t.call is not None and t.call.sent]
            self.state.evictions_due.clear()
            self.state.evict_after_bind.clear()
            self.state.checks_due.clear()
        self.state.nodes.clear()
        self.state.ledger = DeviceLedger()
        self.state.told = {}
        self.state.regroup.clear()
        self.state.replay_binds = sent
        for call in sent:
            if call.answered and not call.bound:  # its outcome was unknown: read the pod
                self.binds.check_later(call, 0.0)
        self.state.ends.clear()
        self.state.sent_away.clear()
        for name in sorted(self.state.objects[NODES]):
            self.node_ends.note_ends(name)
            node = self.node_changes.parse_node(self.state.objects[NODES][name])
            if node is not None:
                self.state.nodes[name] = node
        self.state.dirty_pods = set(self.state.objects[PODS])
        self.state.rebuild_catalog()
        return list(self.state.nodes.values())

    def poll_events(self) -> Sequence[ClusterEvent]:
        self.state.drain()
        out: list[ClusterEvent] = []
        for call in self.state.replay_binds:
            key, placement = call.key, call.placement
            obj = self.state.objects[PODS].get(key)
            pod = self.pod_changes.parse_pod(obj)
            if obj is not None and pod is not None and key not in self.state.told:
                self.state.told[key] = Told(PodState.BOUND, placement, in_flight=True, call=call)
                self.state.ledger.take(placement)
                out.append(PodBound(pod, placement, is_preemptible(obj)))
        self.state.replay_binds = []
        self.binds.take_results(out)
        nodes_changed = bool(self.state.dirty_nodes)
        for name in sorted(self.state.dirty_nodes):
            self.node_ends.note_ends(name)
            self.node_changes.reconcile_node(name, out)
        self.state.dirty_nodes.clear()
        # A pod may have come onto (or off) an ending node.
        self.state.ends_changed |= bool(self.state.dirty_pods)
        waiting: set[str] = set()
        orphans: set[str] = set()
        for key in sorted(self.state.dirty_pods):
            if self.pod_changes.reconcile_pod(key, out, orphans):
                waiting.add(key)
        self.state.dirty_pods = orphans
        self.workloads.assemble(waiting, out)
        if nodes_changed or any(isinstance(e, PodBound | PodDeleted) for e in out):
            self._report_withdrawn()
        self.node_ends.send_gangs_away(out)
        self.evictions.send_deferred_evictions(out)
        self.evictions.retry_evictions()
        self.binds.run_checks()
        return out

    def _report_withdrawn(self) -> None:
        """Find the bound pods holding GPUs their node no longer lists (the device plugin
        withdrew them; the core keeps them counted) and report each new one on the pod and
        the node."""
        listed: dict[str, set[int] | None] = {}
        found: dict[str, tuple[int, ...]] = {}
        for key, told in self.state.told.items():
            placement = told.placement
            if placement is None or told.state is not PodState.BOUND:
                continue
            if placement.node not in listed:
                node = self.state.nodes.get(placement.node)
                listed[placement.node] = None if node is None else {g.index for g in node.gpus}
            indices = listed[placement.node]
            if indices is None:
                continue
            gone = tuple(i for i in placement.gpu_indices if i not in indices)
            if gone:
                found[key] = gone
        for key, gone in found.items():
            if self.state.on_withdrawn_devices.get(key) == gone:
                continue
            obj = self.state.objects[PODS].get(key)
            placement = self.state.told[key].placement
            if obj is None or placement is None:
                continue
            message = (
                f"node {placement.node} no longer lists GPU(s) "
                f"{', '.join(map(str, gone))} that pod {key} holds: the pod is kept and its "
                "GPUs stay counted; nothing new goes there until usage fits the node again"
            )
            self.state.reporter.devices_withdrawn(
                obj, self.state.objects[NODES].get(placement.node), message
            )
        self.state.on_withdrawn_devices = found

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out a cycle's actions, if this replica still leads (else the term ends, and
        none of them is)."""
        if actions and not self.state.leading():
            self.calls.abandon(
                f"no longer leading: {len(actions)} actions of a turn not carried out"
            )
            return
        for action in actions:
            if isinstance(action, Bind):
                self.binds.bind(action.pod, action.placement)
            elif isinstance(action, Evict):
                self.evictions.evict(action.pod.key, action.preemptor, action.reason)
            elif isinstance(action, MarkUnschedulable):
                obj = self.state.objects[PODS].get(action.pod.key)
                if obj is not None:
                    self.state.reporter.unschedulable(obj, action.message)

    def wait(self, deadline: float) -> None:
        timeout = min(deadline - self.state.clock.now(), self.node_ends.ends_due_in())
        for due in (self.state.evictions_due, self.state.checks_due):
            if due:
                timeout = min(timeout, due[0][0] - time.monotonic())
        if timeout > 0 and not self.state.wake.is_set():
            self.state.wake.wait(min(timeout, 1.0) if math.isfinite(timeout) else 1.0)
        self.state.wake.clear()

    def read_ahead(self) -> int:
        """Take in the informers' changes and read the pods and nodes among them now, while
        the informers still list (a start with thousands of pods then decides sooner);
        returns how many objects were read."""
        self.state.drain()
        read = 0
        for key in list(self.state.unread):
            obj = self.state.objects[PODS].get(key)
            if obj is not None:
                with contextlib.suppress(InputError):
                    self.state.readings.read(obj)
                    read += 1
        for name in self.state.unread_nodes:
            obj = self.state.objects[NODES].get(name)
            if obj is not None:
                self.node_changes.parse_node(obj)
                read += 1
        self.state.unread.clear()
        self.state.unread_nodes.clear()
        return read
