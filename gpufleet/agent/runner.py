"""The node agent as one process: discovery, Node labels, device plugin, health and /metrics.

Owns :class:`NodeAgent`, which joins the parts: it reads the node's GPUs from a
:class:`~gpufleet.devices.source.DeviceSource` (NVML, or the fake NVML of ``--fake-gpus``),
publishes GPU Feature Discovery's labels, the NVLink-domain label and the device inventory the
scheduler reads (``gpufleet.dev/gpu-inventory``) on its Node, serves the kubelet's device
plugin API for every GPU resource (:class:`~gpufleet.agent.device_plugin.NodeDevicePlugins`,
fed by a watch of the pods bound to the node), and serves dcgm-exporter's metrics at
``/metrics``. A health thread waits on NVML's events: a device that turns unhealthy (or
healthy again) is withdrawn from (or back in) ``ListAndWatch`` at once, the inventory
annotation that the scheduler acts on is rewritten, the Node condition ``GpuDevicesHealthy``
says which GPU and why, and an Event names the GPU and the XID. What the Node shows is kept by
:class:`~gpufleet.agent.node_sync.NodeSync`: after every change and every resync period, tried
again with back-off while the API server refuses or the Node is gone.

It decides nothing about devices itself (allocation.py, resources.py) and speaks to the API
server only through :class:`~gpufleet.agent.kube.node_agent.NodeAgentApi`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.agent.bound_pods import InMemoryBoundPods
from gpufleet.agent.device_plugin import NodeDevicePlugins, PluginConfig
from gpufleet.agent.kube.node_agent import (
    NORMAL,
    WARNING,
    NodeAgentApi,
    gpu_health_message,
)
from gpufleet.agent.kube_bridge import KubeEventSink, feed
from gpufleet.agent.kubelet_api import POD_RESOURCES_SOCKET
from gpufleet.agent.metrics_server import MetricsServer
from gpufleet.agent.node_sync import (
    DEFAULT_PERIOD_S,
    Backoff,
    DesiredNode,
    HealthCondition,
    NodeSync,
)
from gpufleet.agent.pod_resources import PodResourcesReader
from gpufleet.agent.telemetry import AgentTelemetry
from gpufleet.devices.labels import gfd_node_labels
from gpufleet.devices.source import DeviceSource
from gpufleet.io.kube.annotations import INVENTORY_ANNOTATION, inventory_to_json
from gpufleet.kube_client.api_types import ApiError
from gpufleet.metrics.dcgm_text import render
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import HealthEvent

log = logging.getLogger(__name__)

#: How long the health thread waits on NVML's events per turn (also how soon it stops).
HEALTH_WAIT_S = 0.5


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """The agent's command line, less the device source and the API connection."""

    plugin: PluginConfig
    pod_resources_socket: Path = Path(POD_RESOURCES_SOCKET)
    #: ``host:port`` of ``/metrics``; None: no metrics server (tests).
    metrics_address: str | None = "0.0.0.0:9400"
    #: How long to wait for the first listing of the node's pods before serving the kubelet.
    pods_sync_timeout_s: float = 30.0
    #: How often the Node is compared with what the agent knows when nothing changed.
    node_resync_s: float = DEFAULT_PERIOD_S
    #: The waits between attempts while the API server refuses the Node's state.
    node_retry: Backoff = field(default_factory=Backoff)


def split_address(address: str) -> tuple[str, int]:
    """``0.0.0.0:9400`` -> (``0.0.0.0``, 9400); a ValueError naming the address otherwise."""
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 0.0.0.0:9400), got {address!r}")
    return host or "0.0.0.0", int(port)


def is_transient(error: ApiError) -> bool:
    """Whether an API error may pass by itself (no answer, throttled, the server failing),
    rather than say the agent is misconfigured (the Node not found, the account refused)."""
    return error.status == 0 or error.status == 429 or error.status >= 500


class NodeAgent:
    """See the module docstring. :meth:`start`, then :meth:`stop` (or use ``with``)."""

    def __init__(self, source: DeviceSource, api: NodeAgentApi, settings: AgentSettings) -> None:
        self.source = source
        self.api = api
        self.settings = settings
        self.node = settings.plugin.node_name
        self._lock = threading.Lock()
        self._inventory = source.inventory()
        self.bound_pods = InMemoryBoundPods()
        self.events = KubeEventSink(api)
        self.pod_resources = PodResourcesReader(settings.pod_resources_socket)
        self.plugins = NodeDevicePlugins(
            settings.plugin, self._inventory, self.bound_pods, self.events, self.pod_resources
        )
        self.telemetry = AgentTelemetry(
            self.node,
            source,
            self.inventory,
            self.bound_pods,
            self.pod_resources.device_users,
        )
        self.node_sync = NodeSync(
            api, self.node, self.desired_node, settings.node_resync_s, settings.node_retry
        )
        self._stop = threading.Event()
        self._stopped = False
        self._health_thread: threading.Thread | None = None
        self._metrics_server: MetricsServer | None = None
        #: Where /metrics listens once started (the port is chosen when 0 was asked).
        self.metrics_port: int | None = None

    def metrics_text(self) -> str:
        """``/metrics``: dcgm-exporter's families of this node, read now."""
        return render(self.telemetry.read())

    def inventory(self) -> NodeInventory:
        with self._lock:
            return self._inventory

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> NodeAgent:
        """Publish the Node's state (raising ApiError when the Node is missing or the
        account may not write it; an API server that does not answer is tried again in the
        background), then serve."""
        published = False
        try:
            self.publish()
            published = True
        except ApiError as error:
            if not is_transient(error):
                raise
            log.warning("cannot publish node %s's GPUs yet (%s); trying again", self.node, error)
        view = self.api.watch_pods(self.node, on_change=feed(self.bound_pods))
        if not view.wait_synced(self.settings.pods_sync_timeout_s):
            log.warning(
                "the pods of node %s were not listed within %.0f s; serving the kubelet anyway",
                self.node,
                self.settings.pods_sync_timeout_s,
            )
        self.plugins.start()
        if self.settings.metrics_address is not None:
            host, port = split_address(self.settings.metrics_address)
            self._metrics_server = MetricsServer(host, port, self.metrics_text)
            self.metrics_port = self._metrics_server.port
        self._health_thread = threading.Thread(
            target=self._watch_health, name="gpu-health", daemon=True
        )
        self._health_thread.start()
        self.node_sync.start(pending=not published)
        log.info(
            "gpufleet agent on %s: %d GPU(s), resources %s, metrics on %s",
            self.node,
            len(self._inventory.devices),
            ", ".join(sorted(self.plugins.resources)) or "none",
            f"port {self.metrics_port}" if self.metrics_port is not None else "no port",
        )
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._health_thread is not None:
            self._health_thread.join(timeout=5)
        self.node_sync.stop()
        if self._metrics_server is not None:
            self._metrics_server.close()
        self.plugins.stop()
        self.pod_resources.close()
        self.api.close()
        self.source.close()

    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop_soon(self) -> None:
        """Make :meth:`wait` return (safe in a signal handler); :meth:`stop` then cleans up."""
        self._stop.set()

    def wait(self) -> None:
        """Until :meth:`stop_soon` or :meth:`stop` (a signal handler, another thread)."""
        self._stop.wait()

    # ----------------------------------------------------------------------------- the Node
    def publish(self) -> None:
        """Make the Node show :meth:`desired_node` now; raises what the API raised."""
        self.node_sync.sync()

    def desired_node(self) -> DesiredNode:
        """Labels, the inventory annotation and the health condition, as the devices are now."""
        inventory = self.inventory()
        labels = gfd_node_labels(
            inventory,
            node_name=self.node,
            sharing=self.settings.plugin.sharing,
            fabric=getattr(self.source, "fabric", None),
        )
        annotations = {INVENTORY_ANNOTATION: inventory_to_json(inventory)}
        return DesiredNode(labels, annotations, health_condition(inventory))

    # ----------------------------------------------------------------------------- health
    def _watch_health(self) -> None:
        while not self._stop.is_set():
            try:
                events = self.source.wait_health(HEALTH_WAIT_S)
                if events:
                    self.apply_health(events)
            except Exception:
                log.exception("GPU health check failed; trying again")
                self._stop.wait(HEALTH_WAIT_S)

    def apply_health(self, events: Sequence[HealthEvent]) -> None:
        """Withdraw (or restore) the devices at once, then tell the scheduler and the user."""
        inventory = self.source.inventory()
        with self._lock:
            self._inventory = inventory
        self.plugins.update(inventory)
        self.node_sync.request()
        node = self.api.node_ref(self.node)
        for event in events:
            if event.healthy:
                message = f"GPU {event.gpu} ({event.uuid}) is healthy again"
                self.api.event(node, NORMAL, "GpuHealthy", message)
                log.info("%s", message)
            else:
                # The reason names the XID already ("XID 79: GPU has fallen off the bus").
                reason = event.reason or (f"XID {event.xid}" if event.xid else "unhealthy")
                message = gpu_health_message(event.gpu, event.uuid, None, reason)
                self.api.event(node, WARNING, "GpuUnhealthy", message)
                log.warning("%s", message)


def health_condition(inventory: NodeInventory) -> HealthCondition:
    """``GpuDevicesHealthy``: False naming each unhealthy GPU and why, True otherwise."""
    unhealthy = [d for d in inventory.devices if not d.healthy]
    if unhealthy:
        message = "; ".join(gpu_health_message(d.index, d.uuid, None, d.reason) for d in unhealthy)
        return HealthCondition("False", "GpuUnhealthy", message)
    return HealthCondition("True", "GpusHealthy", f"{len(inventory.devices)} GPU(s) healthy")
