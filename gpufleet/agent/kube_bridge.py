"""The device plugin fed from the Kubernetes adapter: bound pods in, Events out.

Owns the translation between :mod:`gpufleet.agent.kube` (the node agent's Kubernetes side) and
the device plugin's small protocols: a :class:`~gpufleet.agent.kube.node_pods.PodView` as a
:class:`~gpufleet.agent.bound_pods.BoundPod` (the GPU resources' limits as counts, bind time
and first-seen order), a listener for ``BoundPodsView``'s changes that keeps an
:class:`~gpufleet.agent.bound_pods.InMemoryBoundPods` exact (a pod that ended, or is gone,
leaves it), and an :class:`~gpufleet.agent.events.EventSink` writing through the adapter's
background Event recorder (so ``Allocate`` never waits on the API server). It makes no API
call of its own.
"""

from __future__ import annotations

import logging
from typing import Protocol

from gpufleet.agent.bound_pods import BoundContainer, BoundPod, InMemoryBoundPods
from gpufleet.agent.events import AgentEvent
from gpufleet.agent.kube.node_events import ObjectRef
from gpufleet.agent.kube.node_pods import ContainerView, PodListener, PodView
from gpufleet.agent.pod_resources import is_gpu_resource

log = logging.getLogger(__name__)

#: Phases of a pod that holds no device any more.
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
DELETED = "DELETED"


def _container(view: ContainerView, init: bool) -> BoundContainer:
    limits: dict[str, int] = {}
    for resource in view.limits:
        if not is_gpu_resource(resource):
            continue
        try:
            limits[resource] = view.count(resource)
        except ValueError as error:  # the API server refuses these; never seen in practice
            log.warning("ignoring a limit: %s", error)
    return BoundContainer(view.name, limits, init)


def bound_pod(view: PodView) -> BoundPod:
    """The device plugin's record of a pod bound to the node."""
    containers = tuple(
        [_container(c, True) for c in view.init_containers]
        + [_container(c, False) for c in view.containers]
    )
    return BoundPod(
        view.namespace,
        view.name,
        view.uid,
        containers,
        dict(view.annotations),
        view.bind_time,
        view.seen,
        view.scheduler_name,
    )


def feed(pods: InMemoryBoundPods) -> PodListener:
    """A ``BoundPodsView`` listener keeping ``pods`` to the pods that may still hold devices."""

    def on_change(change: str, view: PodView) -> None:
        if change == DELETED or view.phase in ENDED_PHASES:
            pods.remove(view.uid)
        else:
            pods.put(bound_pod(view))

    return on_change


class EventRecorder(Protocol):
    """What writes Events (``NodeAgentApi`` and its ``EventRecorder`` both do)."""

    def event(self, involved: ObjectRef, type: str, reason: str, message: str) -> None: ...


class KubeEventSink:
    """An :class:`~gpufleet.agent.events.EventSink` writing through ``recorder``."""

    def __init__(self, recorder: EventRecorder) -> None:
        self._recorder = recorder

    def emit(self, event: AgentEvent) -> None:
        if event.kind == "Node":
            involved = ObjectRef.node(event.name)
        else:
            involved = ObjectRef(event.kind, event.name, event.namespace, event.uid)
        self._recorder.event(involved, event.type, event.reason, event.message)
