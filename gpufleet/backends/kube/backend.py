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

The parts, each in its own module: what the backend holds and the informers' changes taken in
(state.py), Nodes told to the core (reconcile_nodes.py), bound pods told to it (reconcile_pods.py),
waiting pods assembled into workloads (workloads.py), gangs sent away from ending nodes
(node_ends.py) and binds and evictions through the API (actions.py). This module owns
:class:`KubeBackend`, their sum: its lifecycle (informers started, synced, closed) and the
ClusterBackend protocol, whose poll runs the parts in order."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence

from gpufleet.backends.kube.actions import EVICTION_RETRY_S, ApiActions
from gpufleet.backends.kube.device_ledger import DeviceLedger
from gpufleet.backends.kube.node_ends import NodeEndEvictions
from gpufleet.backends.kube.pods import PodState, is_preemptible
from gpufleet.backends.kube.reconcile_nodes import NodeReconciliation
from gpufleet.backends.kube.reconcile_pods import PodReconciliation
from gpufleet.backends.kube.state import (
    CONFIG_KINDS,
    Counters,
    NullReporter,
    Reporter,
    Told,
    WallClock,
)
from gpufleet.backends.kube.workloads import GROUP_KINDS, WorkloadAssembly
from gpufleet.control.backend import ClusterState
from gpufleet.io.errors import InputError
from gpufleet.kube_client.api import NODES, PODS, Resource
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


class KubeBackend(
    NodeReconciliation, PodReconciliation, WorkloadAssembly, NodeEndEvictions, ApiActions
):
    """See the module docstring."""

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
        nodes returned (by name), which the new core is to be built with. A new term starts:
        nothing an earlier core decided is sent after this (calls.py)."""
        self.drain()
        with self._lock:
            self.term += 1
            # Binds sent are facts for the new core too: it must not place those pods again.
            # One not sent yet never will be now, and its pod waits for the new core.
            sent = [t.call for t in self._told.values() if t.call is not None and t.call.sent]
            self._evictions_due.clear()
            self._evict_after_bind.clear()
            self._checks_due.clear()
        self._nodes.clear()
        self._ledger = DeviceLedger()
        self._told = {}
        self._regroup.clear()
        self._replay_binds = sent
        for call in sent:
            if call.answered and not call.bound:  # its outcome was unknown: read the pod
                self._check_later(call, 0.0)
        self._ends.clear()
        self._sent_away.clear()
        for name in sorted(self.objects[NODES]):
            self._note_ends(name)
            node = self.parse_node(self.objects[NODES][name])
            if node is not None:
                self._nodes[name] = node
        self._dirty_pods = set(self.objects[PODS])
        self._rebuild_catalog()
        return list(self._nodes.values())

    def poll_events(self) -> Sequence[ClusterEvent]:
        self.drain()
        out: list[ClusterEvent] = []
        for call in self._replay_binds:
            key, placement = call.key, call.placement
            obj = self.objects[PODS].get(key)
            pod = self.parse_pod(obj)
            if obj is not None and pod is not None and key not in self._told:
                self._told[key] = Told(PodState.BOUND, placement, in_flight=True, call=call)
                self._ledger.take(placement)
                out.append(PodBound(pod, placement, is_preemptible(obj)))
        self._replay_binds = []
        self._take_results(out)
        nodes_changed = bool(self._dirty_nodes)
        for name in sorted(self._dirty_nodes):
            self._note_ends(name)
            self._reconcile_node(name, out)
        self._dirty_nodes.clear()
        # A pod may have come onto (or off) an ending node.
        self._ends_changed |= bool(self._dirty_pods)
        waiting: set[str] = set()
        orphans: set[str] = set()
        for key in sorted(self._dirty_pods):
            if self._reconcile_pod(key, out, orphans):
                waiting.add(key)
        self._dirty_pods = orphans
        self._assemble(waiting, out)
        if nodes_changed or any(isinstance(e, PodBound | PodDeleted) for e in out):
            self._report_withdrawn()
        self._send_gangs_away(out)
        self._send_deferred_evictions(out)
        self._retry_evictions()
        self._run_checks()
        return out

    def _report_withdrawn(self) -> None:
        """Find the bound pods holding GPUs their node no longer lists (the device plugin
        withdrew them; the core keeps them counted) and report each new one on the pod and
        the node."""
        listed: dict[str, set[int] | None] = {}
        found: dict[str, tuple[int, ...]] = {}
        for key, told in self._told.items():
            placement = told.placement
            if placement is None or told.state is not PodState.BOUND:
                continue
            if placement.node not in listed:
                node = self._nodes.get(placement.node)
                listed[placement.node] = None if node is None else {g.index for g in node.gpus}
            indices = listed[placement.node]
            if indices is None:
                continue
            gone = tuple(i for i in placement.gpu_indices if i not in indices)
            if gone:
                found[key] = gone
        for key, gone in found.items():
            if self.on_withdrawn_devices.get(key) == gone:
                continue
            obj = self.objects[PODS].get(key)
            placement = self._told[key].placement
            if obj is None or placement is None:
                continue
            message = (
                f"node {placement.node} no longer lists GPU(s) "
                f"{', '.join(map(str, gone))} that pod {key} holds: the pod is kept and its "
                "GPUs stay counted; nothing new goes there until usage fits the node again"
            )
            self.reporter.devices_withdrawn(obj, self.objects[NODES].get(placement.node), message)
        self.on_withdrawn_devices = found

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out a cycle's actions, if this replica still leads (else the term ends, and
        none of them is)."""
        if actions and not self.leading():
            self.abandon(f"no longer leading: {len(actions)} actions of a turn not carried out")
            return
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
        timeout = min(deadline - self.clock.now(), self.ends_due_in())
        for due in (self._evictions_due, self._checks_due):
            if due:
                timeout = min(timeout, due[0][0] - time.monotonic())
        if timeout > 0 and not self._wake.is_set():
            self._wake.wait(min(timeout, 1.0) if math.isfinite(timeout) else 1.0)
        self._wake.clear()

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
