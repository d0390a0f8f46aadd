"""Gangs sent away whole from nodes that announce their end.

Owns :class:`NodeEndEvictions`: the taints of each Node that send its pods away
(:mod:`gpufleet.io.kube.node_ends`: being removed by the cluster autoscaler or Karpenter, about to
be terminated by GKE or AWS, out of service, and unreachable or not ready past what a pod
tolerates), and, once a pod of a gang running there must leave, the core told to evict every
pod of its gang, wherever they run (``WorkloadDisrupted`` per bound pod of the pod group: the
core evicts each one's workload whole through the Eviction API, as its preemption does, and
the gang's controller makes it again, to be placed elsewhere: the node takes no new pods). Each
pod is told once; the time the next pod must leave is kept for the backend's wait.

Why whole gangs: the drainers (Cluster Autoscaler, Karpenter, the node termination handlers,
the taint-based eviction controller) evict pod by pod, so a gang spread over nodes would lose
one member and run on broken (or hold its GPUs waiting for it). Lone pods are left to them:
they evict those at the same moment, and a lone pod's controller starts it again elsewhere;
evicting it twice would change nothing.

Does not decide what a taint means (``io.node_ends``) nor carry evictions out (actions), and
does not keep new pods off such nodes: the node reading makes them unschedulable.
"""

from __future__ import annotations

import logging
import math

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.pods import PodState
from gpufleet.backends.kube.state import BackendState
from gpufleet.io.kube.node_ends import NodeEnd, leave_at, node_ends, pod_tolerations
from gpufleet.kube_client.api import NODES, PODS, Obj
from gpufleet.model.events import ClusterEvent, WorkloadDisrupted

log = logging.getLogger(__name__)


class NodeEndEvictions:
    """See the module docstring."""

    def __init__(self, state: BackendState) -> None:
        self.state = state

    def note_ends(self, name: str) -> None:
        """Read the ends of node ``name`` as the API shows it now (kept with the time they
        were first seen, for taints without ``timeAdded``)."""
        obj = self.state.objects[NODES].get(name)
        ends = () if obj is None else node_ends(obj)
        known = self.state.ends.get(name)
        if not ends:
            if known is not None:
                del self.state.ends[name]
            return
        if known is None or known[0] != ends:
            seen = known[1] if known is not None else self.state.clock.now()
            self.state.ends[name] = (ends, seen)
            self.state.ends_changed = True

    def send_gangs_away(self, out: list[ClusterEvent]) -> None:
        """Tell the core to evict the gangs that must leave an ending node now (see the
        module docstring)."""
        if not self.state.ends:
            self.state.ends_due = math.inf
            return
        now = self.state.clock.now()
        if not self.state.ends_changed and now < self.state.ends_due:
            return
        self.state.ends_changed = False
        self.state.sent_away.intersection_update(self.state.told)
        due = math.inf
        for key, told in list(self.state.told.items()):
            placement = told.placement
            if (
                placement is None
                or placement.node not in self.state.ends
                or key in self.state.sent_away
            ):
                continue
            ending = self.state.ends[placement.node]
            obj = self.state.objects[PODS].get(key)
            if told.state is not PodState.BOUND or obj is None:
                continue
            group = podinfo.pod_group(obj)
            if group is None:
                continue  # a lone pod: left to Kubernetes' own eviction (module docstring)
            ends, seen = ending
            at = leave_at(ends, pod_tolerations(obj), seen)
            if at is None:
                continue
            if at > now:
                due = min(due, at)
                continue
            self._send_group_away(podinfo.namespace_of(obj), group, placement.node, out)
        self.state.ends_due = due

    def _send_group_away(
        self, namespace: str, group: str, node: str, out: list[ClusterEvent]
    ) -> None:
        ends, _ = self.state.ends[node]
        end: NodeEnd = ends[0]
        reason = (
            f"node {node} {end.signal.what} ({end.taint.key}:{end.taint.effect.value}): "
            f"gang {namespace}/{group} evicted whole, to be placed again elsewhere"
        )
        members = sorted(self.state.group_members.get((namespace, group), ()))
        # Members already terminating (a drainer took them first) need no eviction.
        sent = [
            key
            for key in members
            if key not in self.state.sent_away
            and (told := self.state.told.get(key)) is not None
            and told.state is PodState.BOUND
            and not _terminating(self.state.objects[PODS].get(key))
        ]
        log.info("%s (%d pods)", reason, len(sent))
        for key in sent:
            self.state.sent_away.add(key)
            out.append(WorkloadDisrupted(key, reason))

    def ends_due_in(self) -> float:
        """Seconds until the next pod must leave an ending node (inf: none waits)."""
        return self.state.ends_due - self.state.clock.now()


def _terminating(obj: Obj | None) -> bool:
    return obj is None or bool((obj.get("metadata") or {}).get("deletionTimestamp"))
