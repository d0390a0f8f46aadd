"""The Kubernetes API as the node agent uses it: one object with everything the agent asks.

Owns :class:`NodeAgentApi`, the agent's whole view of the API server, over any client of
:class:`~gpufleet.kube_client.api_types.NodeAgentCalls`: :meth:`NodeAgentApi.connect` makes
a :class:`~gpufleet.kube_client.light_api.LightKubeApi` (not the official client: the
agent's memory budget), and the scheduler's :class:`~gpufleet.kube_client.api.KubeApi` fits
too (the same calls, rate limit and errors: :class:`~gpufleet.kube_client.api_types.ApiError`):

* :meth:`NodeAgentApi.read_node`: the Node as the API server has it now;
* :meth:`NodeAgentApi.publish`: labels and annotations of the Node
  (:mod:`~gpufleet.agent.kube.node_status`);
* :meth:`NodeAgentApi.set_condition`: a Node condition (``GpuDevicesHealthy``);
* :meth:`NodeAgentApi.event`: an Event about the Node or a Pod, correlated as the kubelet's
  (:mod:`~gpufleet.agent.kube.node_events`);
* :meth:`NodeAgentApi.watch_pods`: the pods bound to the node
  (:mod:`~gpufleet.agent.kube.node_pods`), which is what the device plugin's ``BoundPods``
  looks up.

What the agent tells, and when, is gpufleet.agent's; this module only speaks to the API. RBAC
for exactly these calls: deploy/agent-rbac.yaml.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.agent.kube.node_events import NORMAL, WARNING, EventRecorder, ObjectRef
from gpufleet.agent.kube.node_pods import BoundPodsView, ContainerView, PodListener, PodView
from gpufleet.agent.kube.node_status import (
    AGENT_LABELS_ANNOTATION,
    DEFAULT_OWNED_LABEL_PREFIXES,
    GPU_HEALTH_CONDITION,
    NodeConditions,
    NodeLabeler,
)
from gpufleet.kube_client.api_types import NodeAgentCalls, Obj, RateLimiter
from gpufleet.kube_client.light_api import LightKubeApi

__all__ = [
    "AGENT_LABELS_ANNOTATION",
    "DEFAULT_OWNED_LABEL_PREFIXES",
    "GPU_HEALTH_CONDITION",
    "NORMAL",
    "WARNING",
    "BoundPodsView",
    "ContainerView",
    "NodeAgentApi",
    "ObjectRef",
    "PodListener",
    "PodView",
    "gpu_health_message",
]


def gpu_health_message(index: int, uuid: str, xid: int | None, reason: str) -> str:
    """The ``GpuDevicesHealthy=False`` message (and Event message) for one unhealthy GPU:
    ``GPU 3 (GPU-1f2e...) unhealthy: XID 79 (fallen off the bus)``."""
    what = (
        f"XID {xid} ({reason})"
        if xid is not None and reason
        else (f"XID {xid}" if xid is not None else reason or "unhealthy")
    )
    return f"GPU {index} ({uuid}) unhealthy: {what}"


class NodeAgentApi:
    """See the module docstring. ``component`` names the agent in Events (``source``)."""

    def __init__(
        self,
        api: NodeAgentCalls,
        node: str,
        component: str = "gpufleet-agent",
        heartbeat_s: float = 60.0,
    ) -> None:
        self.api = api
        self.node = node
        self.labeler = NodeLabeler(api)
        self.conditions = NodeConditions(api, heartbeat_s)
        self.recorder = EventRecorder(api, host=node, component=component)
        self._views: list[BoundPodsView] = []
        #: The client :meth:`connect` made, closed by :meth:`close` (one given is the giver's).
        self._own_client: LightKubeApi | None = None

    @classmethod
    def connect(cls, node: str, kubeconfig: str | None = None) -> NodeAgentApi:
        """From a kubeconfig file, or the pod's service account when None (raises
        :class:`~gpufleet.kube_client.light_config.KubeconfigError`). One node's agent makes
        few calls: a modest rate limit (the kubelet's default is 50 qps, burst 100)."""
        client = LightKubeApi.connect(kubeconfig, RateLimiter(qps=50, burst=100))
        agent_api = cls(client, node)
        agent_api._own_client = client
        return agent_api

    def node_ref(self, node: str | None = None) -> ObjectRef:
        """The Node, as an Event's involved object."""
        return ObjectRef.node(node or self.node)

    # ----------------------------------------------------------------------------- writes
    def publish(
        self,
        node: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        owned_label_prefixes: Iterable[str] = DEFAULT_OWNED_LABEL_PREFIXES,
        current: Obj | None = None,
    ) -> bool:
        """Set the agent's labels and annotations on ``node`` in one patch, removing the
        agent's labels it no longer sets; whether it wrote (False: nothing changed).
        ``current``: the Node as just read by :meth:`read_node` (read again when None)."""
        return self.labeler.publish(node, labels, annotations, owned_label_prefixes, current)

    def set_condition(
        self,
        node: str,
        type: str,
        status: str,
        reason: str,
        message: str,
        current: Obj | None = None,
    ) -> bool:
        """Set Node condition ``type`` (``status`` "True", "False" or "Unknown"); whether it
        wrote. With ``current`` (the Node as just read) it is compared with what the Node
        shows, not with the last write: a Node re-created bare gets it again."""
        return self.conditions.set_condition(node, type, status, reason, message, current)

    def event(self, involved: ObjectRef, type: str, reason: str, message: str) -> None:
        """Record an Event (Normal or Warning) about a Node or Pod, in the background."""
        self.recorder.event(involved, type, reason, message)

    # ----------------------------------------------------------------------------- reads
    def read_node(self, node: str | None = None) -> Obj:
        """The Node (this agent's by default) as the API server has it now."""
        return self.api.get_node(node or self.node)

    def watch_pods(
        self,
        node: str | None = None,
        watch_timeout_s: int = 300,
        on_change: PodListener | None = None,
    ) -> BoundPodsView:
        """Start watching the pods bound to ``node`` (this agent's by default), telling
        ``on_change`` each change; wait with :meth:`BoundPodsView.wait_synced`. Closed by
        :meth:`close`."""
        view = BoundPodsView(self.api, node or self.node, watch_timeout_s, on_change).start()
        self._views.append(view)
        return view

    def close(self, timeout: float = 5.0) -> None:
        """Stop the pod watches and write the Events still queued."""
        for view in self._views:
            view.close(timeout)
        self.recorder.close(timeout)
        if self._own_client is not None:
            self._own_client.close()
