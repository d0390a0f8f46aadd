"""What the core is told about bound pods.

Owns :class:`PodReconciliation`: a pod read as the core counts it (one whose affinity or spread
constraints do not read is counted without them), every pod of the cluster as shapes for the target,
and one pod's change compared with what the core was told of it (:class:`Told`): a pod gone (told
twice, see the backend's docstring; so is a bound pod found waiting again: a new pod of its name),
bound by anyone (on the devices its annotations name, or the ledger's guess; preemptible or not, as
its annotations say), bound elsewhere than we bound it, ready, labelled to lower its workload to
preemptible (once); the device ledger taken and given back as it goes. A pod that leaves a
gang waiting in the core (gone, or bound by someone else) takes the gang out of the core with
it: its other pods are no longer told, and are assembled again (workloads).

Does not turn waiting pods into workloads (workloads) nor bind them (actions).
"""

from __future__ import annotations

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.pods import PodState
from gpufleet.backends.kube.state import BackendState, Told
from gpufleet.io.errors import InputError
from gpufleet.io.kube.annotations import placement_from_annotations
from gpufleet.io.live_objects import timed_pod
from gpufleet.kube_client.api import PODS, Obj
from gpufleet.model import Pod
from gpufleet.model.events import ClusterEvent, PodBound, PodDeleted, PodReady, WorkloadDemoted
from gpufleet.model.idle import PREEMPTIBLE_LABEL
from gpufleet.model.workload import SCHEDULING_GATED


class PodReconciliation:
    """Bound pods read and told to the core (see the module docstring)."""

    def __init__(self, state: BackendState) -> None:
        self.state = state

    def parse_pod(self, obj: Obj | None) -> Pod | None:
        """A bound pod as the core counts it (or a pod whose shape the target learns from).
        One whose affinity or spread constraints cannot be read (a namespaceSelector on labels
        gpufleet does not know) is reported and counted without them: what it holds on its
        node still counts, as kube-scheduler would count it."""
        if obj is None:
            return None
        try:
            return self.state.timed_pod(obj).pod
        except InputError as error:
            self.state.report_invalid("Pod", obj, str(error))
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
        pods, counts, broken = self.state.readings.shapes(self.state.objects[PODS].values())
        for obj in broken:
            pod = self.parse_pod(obj)  # read without the rules it could not read, or not
            if pod is not None:
                pods.append(pod)
                counts.append(1.0)
        return pods, counts

    def reconcile_pod(self, key: str, out: list[ClusterEvent], orphans: set[str]) -> bool:
        """Report what changed for one pod; True when it waits for assembly. A bound pod new
        to the core whose node the core does not know yet goes to ``orphans``: it is tried
        again when the node comes."""
        obj = self.state.objects[PODS].get(key)
        state = podinfo.pod_state(obj, self.state.scheduler_name)
        told = self.state.told.get(key)
        if state is PodState.GONE:
            self.state.reporter.forget(key)
            if told is not None:
                self._gone(key, told, out)
            return False
        assert obj is not None
        if state is PodState.WAITING:
            if told is not None and told.state is PodState.BOUND and not told.in_flight:
                # A bound pod never loses its node: this is a new pod under the old one's
                # name (an operator makes a gang's pods again so), and the old one is gone.
                self._gone(key, told, out)
                return True
            if told is None and podinfo.scheduling_gates(obj):
                # Never offered while gated; its owner's update removing the last gate
                # brings it back here (kube-scheduler's PreEnqueue: SchedulingGated).
                gates = ", ".join(podinfo.scheduling_gates(obj))
                message = f"Scheduling is blocked due to non-empty scheduling gates ({gates})"
                self.state.reporter.unschedulable(obj, message, SCHEDULING_GATED)
                return False
            return told is None
        # Bound (by us or anyone).
        node = podinfo.node_name(obj)
        if told is not None and told.state is PodState.BOUND:
            assert told.placement is not None
            if told.placement.node != node:  # someone else bound it first: take their word
                self.state.ledger.give_back(told.placement)
                del self.state.told[key]
                out.append(PodDeleted(key))
                return self.reconcile_pod(key, out, orphans)
            told.in_flight, told.call = False, None
            if not told.ready and podinfo.is_ready(obj):
                told.ready = True
                out.append(PodReady(key))
            self._tell_demoted(key, obj, told, out)
            return False
        if node not in self.state.nodes:
            if told is None:
                orphans.add(key)
            return False
        pod = self.parse_pod(obj)
        if pod is None:
            return False
        if told is not None:  # it waited in the core: bound elsewhere meanwhile
            self._release_gang(key, told)
            out.append(PodDeleted(key))
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        placement = placement_from_annotations(node, annotations)
        if placement is None:
            placement = self.state.ledger.guess(pod, self.state.nodes[node])
        self.state.ledger.take(placement)
        ready = podinfo.is_ready(obj)
        told = self.state.told[key] = Told(PodState.BOUND, placement, ready)
        out.append(PodBound(pod, placement, podinfo.is_preemptible(obj)))
        if ready:
            out.append(PodReady(key))
        self._tell_demoted(key, obj, told, out)
        return False

    def _gone(self, key: str, told: Told, out: list[ClusterEvent]) -> None:
        del self.state.told[key]
        self._release_gang(key, told)
        self.state.sent_away.discard(key)
        if told.placement is not None and told.state is PodState.BOUND:
            self.state.ledger.give_back(told.placement)
        out.extend((PodDeleted(key), PodDeleted(key)))

    def _release_gang(self, key: str, told: Told) -> None:
        """``key`` no longer waits in the core: if it waited in a gang, the core drops that
        whole gang (a gang without all its pods cannot start), so its other waiting pods are
        the core's no more: they are assembled again, with any replacement, at this poll."""
        if told.state is not PodState.WAITING or told.gang is None:
            return
        for mate in told.gang - {key}:
            mate_told = self.state.told.get(mate)
            if mate_told is None or mate_told.gang is not told.gang:
                continue  # gone, or in a gang offered since
            if mate_told.state is PodState.WAITING:
                del self.state.told[mate]
                self.state.regroup.add(mate)

    @staticmethod
    def _tell_demoted(key: str, obj: Obj, told: Told, out: list[ClusterEvent]) -> None:
        """A bound pod newly labelled preemptible: its workload is lowered (told once; the
        core lowers a workload for good, so a label taken off again changes nothing)."""
        if not told.demoted and podinfo.is_demoted(obj):
            told.demoted = True
            out.append(WorkloadDemoted(key, f"pod {key} is labelled {PREEMPTIBLE_LABEL}=true"))
