"""Workloads made of the pods that wait for gpufleet.

Owns :class:`WorkloadAssembly`: waiting pods the core does not have yet offered as workloads in
order of creation (then name), as a queue sees arrivals: a lone pod as its own workload, a gang
(pods of one pod group) once its PodGroup (ours, scheduler-plugins' or Volcano's) exists and
minMember of its pods exist, and pods of a gang that already runs as workloads of their own.
A gang is all or nothing whatever order its pods come and go in, as the coscheduling plugin's
Permit: a pod that arrives while its gang waits in the core waits for the gang to start; when
a pod leaves a gang waiting in the core, the core drops the gang and its other pods are
assembled again, with any replacement (reconcile_pods), never started short of minMember.
A pod with ``spec.schedulingGates`` is never offered (its gang waits whole, its other pods
told so, with kube-scheduler's reason ``SchedulingGated``) until an update removes them.
Why a gang still waits is reported on its pods; pods that do not read are reported invalid.

Does not tell the core about bound pods (reconcile_pods).
"""

from __future__ import annotations

from gpufleet.backends.kube import pods as podinfo
from gpufleet.backends.kube.pods import PodState
from gpufleet.backends.kube.state import BackendState, Told
from gpufleet.io.errors import InputError
from gpufleet.io.live_objects import with_min_member
from gpufleet.kube_client.api import (
    COSCHEDULING_POD_GROUPS,
    POD_GROUPS,
    PODS,
    VOLCANO_POD_GROUPS,
    Obj,
)
from gpufleet.kube_client.informer import object_key
from gpufleet.model.events import ClusterEvent, WorkloadAdded
from gpufleet.model.workload import SCHEDULING_GATED

#: Where a gang's minMember may come from: our PodGroups, scheduler-plugins', Volcano's.
GROUP_KINDS = (POD_GROUPS, COSCHEDULING_POD_GROUPS, VOLCANO_POD_GROUPS)


class WorkloadAssembly:
    """Waiting pods offered to the core as workloads (see the module docstring)."""

    def __init__(self, state: BackendState) -> None:
        self.state = state

    def assemble(self, waiting: set[str], out: list[ClusterEvent]) -> None:
        """Workloads for waiting pods the core does not have yet: lone pods and complete gangs,
        in order of creation (then name), as a queue sees arrivals; with them, the pods of
        gangs to assemble again."""
        regroup, self.state.regroup = self.state.regroup, set()
        pod_objects = self.state.objects[PODS]
        waiting = waiting | {
            key
            for key in regroup
            if key not in self.state.told
            and podinfo.pod_state(pod_objects.get(key), self.state.scheduler_name)
            is PodState.WAITING
        }
        offers: dict[tuple[str, str], tuple[str, str] | None] = {}
        offered_groups: set[tuple[str, str]] = set()
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
        members = sorted(self.state.group_members.get((namespace, group), ()))
        pod_objects = self.state.objects[PODS]
        waiting = [
            pod_objects[k]
            for k in members
            if k not in self.state.told
            and podinfo.pod_state(pod_objects.get(k), self.state.scheduler_name) is PodState.WAITING
        ]
        if not waiting:
            return
        gated = [obj for obj in waiting if podinfo.scheduling_gates(obj)]
        if gated:  # a gang with one gated pod waits whole
            names = ", ".join(object_key(obj) for obj in gated[:3])
            message = (
                f"waiting for gang {namespace}/{group}: scheduling is blocked by the scheduling "
                f"gates of {names}"
            )
            for obj in waiting:
                if not podinfo.scheduling_gates(obj):
                    self.state.reporter.unschedulable(obj, message, SCHEDULING_GATED)
            return
        told = [self.state.told[k] for k in members if k in self.state.told]
        gang = next((t.gang for t in told if t.gang and t.state is PodState.WAITING), None)
        if gang is not None:
            # The gang waits in the core with the pods it had: all or nothing, so a newcomer
            # starts only once the gang has (it is looked at again at every poll till then).
            message = (
                f"waiting for gang {namespace}/{group} to start: it is being scheduled "
                f"with the {len(gang)} pods it had"
            )
            for obj in waiting:
                self.state.reporter.unschedulable(obj, message)
                self.state.regroup.add(object_key(obj))
            return
        if told:  # the gang has started: later pods are workloads of their own
            for obj in waiting:
                self._offer([obj], None, 0, out)
            return
        spec = next(
            (
                found
                for kind in GROUP_KINDS
                if (found := self.state.objects[kind].get(f"{namespace}/{group}"))
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
                self.state.reporter.unschedulable(obj, message)
            return
        if len(waiting) < needed:
            message = f"waiting for gang {namespace}/{group}: {len(waiting)}/{needed} pods exist"
            for obj in waiting:
                self.state.reporter.unschedulable(obj, message)
            return
        self._offer(waiting, group, needed, out)

    def _offer(
        self, objs: list[Obj], group: str | None, needed: int, out: list[ClusterEvent]
    ) -> None:
        try:
            if group is None and len(objs) == 1:
                workload = self.state.readings.workload(self.state.catalog, objs[0])
            else:
                workload = self.state.catalog.workload(objs, group, self.state.timed_pod)
        except InputError as error:
            for obj in objs:
                self.state.report_invalid("Pod", obj, str(error))
            return
        if group is not None:
            workload = with_min_member(workload, needed)
        gang = None if group is None else frozenset(pod.key for pod in workload.pods)
        for pod in workload.pods:
            self.state.told[pod.key] = Told(PodState.WAITING, gang=gang)
        out.append(WorkloadAdded(workload))
