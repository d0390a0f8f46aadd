"""The kubelet device plugin: one gRPC server per resource the node serves.

Owns :class:`ResourcePlugin` (the ``v1beta1.DevicePlugin`` service of one resource:
``GetDevicePluginOptions`` with the preferred allocation available, ``ListAndWatch`` streaming
the device list again on every health change, ``GetPreferredAllocation``, ``Allocate``,
``PreStartContainer``) and :class:`NodeDevicePlugins`, which runs one unix-socket server per
resource in the kubelet's device-plugins directory, registers each with the kubelet's
Registration service (``kubelet.sock``: version v1beta1, endpoint, resource name, options),
and serves and registers again when ``kubelet.sock`` is created anew (a kubelet restart
removes every plugin socket). The bound pods come from a :class:`BoundPods` view kept current
by a watch, so no call here waits on the API server; an Allocate the scheduler's binding does
not back is refused with ``FAILED_PRECONDITION`` and an Event (``GpuAllocationMismatchError``,
or ``UntrustedGpuBinding`` for a binding gpufleet's scheduler did not sign) through the
:class:`EventSink`.

It does not decide devices (:mod:`gpufleet.agent.allocation`, :mod:`gpufleet.agent.resources`)
nor discover them (``gpufleet.devices``: the agent feeds :meth:`NodeDevicePlugins.update` its
inventory on every health event).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from gpufleet.agent.allocation import (
    AllocationMismatchError,
    AllocationSettings,
    Allocator,
    ContainerGrant,
    MpsSettings,
)
from gpufleet.agent.binding_trust import DEFAULT_SCHEDULER_NAMES, BindingTrust
from gpufleet.agent.bound_pods import BoundPods
from gpufleet.agent.events import EventSink
from gpufleet.agent.kubelet_api import (
    API_VERSION,
    DEVICE_PLUGIN_PATH,
    KUBELET_SOCKET,
    PluginDevice,
    PluginOptions,
    PreferenceRequest,
    Registration,
    RegistrationClient,
    RpcRefusedError,
    device_plugin_service,
    rpc_error_text,
    unix_channel,
    unix_server,
)
from gpufleet.agent.resources import (
    DEFAULT_SHARES_PER_GPU,
    ServedDevice,
    served_resources,
)
from gpufleet.io.kube.binding_signature import BindingKey
from gpufleet.model.gpu import NO_SHARING, GpuSharing, SharingStrategy
from gpufleet.model.inventory import NodeInventory

log = logging.getLogger(__name__)

OPTIONS = PluginOptions(pre_start_required=False, preferred_allocation_available=True)


class AllocatedPods(Protocol):
    """What the kubelet already allocated, by pod (``namespace/name`` -> resources), as its
    PodResources API lists it (:class:`gpufleet.agent.pod_resources.PodResourcesReader`)."""

    def allocated_by_pod(self) -> Mapping[str, set[str]]: ...


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """The device plugin's share of the agent's command line."""

    node_name: str
    plugin_dir: Path = Path(DEVICE_PLUGIN_PATH)
    sharing: GpuSharing = NO_SHARING
    shares_per_gpu: int = DEFAULT_SHARES_PER_GPU
    cdi: bool = False
    mps: bool = False
    #: How often ``kubelet.sock`` is checked for a kubelet restart.
    kubelet_poll_s: float = 0.5
    #: How often PodResources is read for pods allocated before this agent knew them.
    resync_s: float = 30.0
    #: The key bindings must be signed with (``--binding-key-file``); None: see below.
    binding_key: BindingKey | None = None
    #: The ``spec.schedulerName``\ s whose pods' bindings count (``--scheduler-name``).
    scheduler_names: frozenset[str] = DEFAULT_SCHEDULER_NAMES
    #: Without a key, honour unsigned bindings (``--insecure-unsigned-bindings``); else none.
    unsigned_bindings: bool = False

    def allocation_settings(self) -> AllocationSettings:
        mps = self.mps or self.sharing.strategy is SharingStrategy.MPS
        trust = BindingTrust(
            self.node_name, self.binding_key, self.scheduler_names, self.unsigned_bindings
        )
        return AllocationSettings(
            self.sharing, self.cdi, MpsSettings(str(self.plugin_dir)) if mps else None, trust
        )


def socket_name(resource: str) -> str:
    """The plugin's socket for ``resource``: ``gpufleet-nvidia.com-gpu.sock``."""
    return f"gpufleet-{resource.replace('/', '-')}.sock"


class ResourcePlugin:
    """The ``DevicePlugin`` service of one resource (the handlers of
    :func:`~gpufleet.agent.kubelet_api.device_plugin_service`)."""

    def __init__(
        self,
        resource: str,
        node_name: str,
        devices: Sequence[ServedDevice],
        allocator: Allocator,
        bound_pods: BoundPods,
        events: EventSink,
        wake_s: float = 0.5,
    ) -> None:
        self.resource = resource
        self._node = node_name
        self._allocator = allocator
        self._bound_pods = bound_pods
        self._events = events
        self._wake_s = wake_s
        self._changed = threading.Condition()
        self._devices = tuple(devices)
        self._known = frozenset(d.id for d in devices)
        self._version = 0
        self._stopped = False
        sharing = allocator.settings.sharing
        self._one_unit_per_container = (
            sharing.one_unit_per_pod and sharing.time_sliced and resource == sharing.resource
        )

    @property
    def devices(self) -> tuple[ServedDevice, ...]:
        return self._devices

    def update(self, devices: Sequence[ServedDevice]) -> None:
        """New devices or health: every ListAndWatch stream sends the list again."""
        with self._changed:
            if tuple(devices) == self._devices:
                return
            self._devices = tuple(devices)
            self._known = frozenset(d.id for d in devices)
            self._version += 1
            self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    # -- DevicePlugin ------------------------------------------------------------------------

    def options(self) -> PluginOptions:
        return OPTIONS

    def list_and_watch(self, active: Callable[[], bool]) -> Iterator[Sequence[PluginDevice]]:
        sent = -1
        while True:
            with self._changed:
                self._changed.wait_for(partial(self._due, sent, active), self._wake_s)
                if self._stopped or not active():
                    return
                if self._version == sent:
                    continue
                sent, devices = self._version, self._devices
            yield [PluginDevice(d.id, d.healthy) for d in devices]

    def _due(self, sent: int, active: Callable[[], bool]) -> bool:
        return self._stopped or self._version != sent or not active()

    def preferred(self, requests: Sequence[PreferenceRequest]) -> list[tuple[str, ...]]:
        pods = self._bound_pods.pods()
        return [
            self._allocator.preferred(self.resource, pods, r.available, r.must_include, r.size)
            for r in requests
        ]

    def allocate(self, requests: Sequence[tuple[str, ...]]) -> list[ContainerGrant]:
        for ids in requests:
            unknown = [i for i in ids if i not in self._known]
            if unknown:
                raise RpcRefusedError(
                    "INVALID_ARGUMENT",
                    f"{self.resource}: unknown device(s) {', '.join(unknown)} on node {self._node}",
                )
            if self._one_unit_per_container and len(ids) > 1:
                # As the NVIDIA device plugin does with failRequestsGreaterThanOne.
                raise RpcRefusedError(
                    "INVALID_ARGUMENT",
                    f"request for '{self.resource}: {len(ids)}' too large: maximum request "
                    "size for shared resources is 1",
                )
        try:
            return self._allocator.allocate_containers(
                self.resource, self._bound_pods.pods(), requests
            )
        except AllocationMismatchError as mismatch:
            self._events.emit(mismatch.event(self._node))
            log.warning("Allocate refused: %s", mismatch)
            raise RpcRefusedError("FAILED_PRECONDITION", str(mismatch)) from None

    def pre_start(self, device_ids: tuple[str, ...]) -> None:
        """Nothing to prepare (the options say PreStartContainer is not required)."""


class _Served:
    """One resource's plugin and the server it runs on."""

    def __init__(self, plugin: ResourcePlugin, server: Any, socket: Path) -> None:
        self.plugin = plugin
        self.server = server
        self.socket = socket
        self.registered = False


class NodeDevicePlugins:
    """Every resource of the node, served and registered with the kubelet."""

    def __init__(
        self,
        config: PluginConfig,
        inventory: NodeInventory,
        bound_pods: BoundPods,
        events: EventSink,
        allocated: AllocatedPods | None = None,
    ) -> None:
        self._config = config
        self._bound_pods = bound_pods
        self._events = events
        self._allocated = allocated
        self._allocator = Allocator(inventory, config.allocation_settings())
        self._inventory = inventory
        self._lock = threading.RLock()
        self._served: dict[str, _Served] = {}
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._kubelet_identity: tuple[int, int] | None = None
        self.registrations = 0
        self._told_no_kubelet = False

    @property
    def allocator(self) -> Allocator:
        return self._allocator

    @property
    def resources(self) -> dict[str, tuple[ServedDevice, ...]]:
        with self._lock:
            return {name: s.plugin.devices for name, s in self._served.items()}

    def start(self) -> None:
        """Serve every resource, register with the kubelet, and watch for its restarts."""
        self.sync_allocated()
        with self._lock:
            self._serve_all()
            self._kubelet_identity = self._kubelet_socket_identity()
            self._register_all()
        self._watcher = threading.Thread(
            target=self._watch_kubelet, name="kubelet-watch", daemon=True
        )
        self._watcher.start()

    def update(self, inventory: NodeInventory) -> None:
        """The node's devices now (health included): streams re-send, new resources serve."""
        with self._lock:
            self._inventory = inventory
            self._allocator.set_inventory(inventory)
            served = self._served_now()
            for resource, served_entry in self._served.items():
                served_entry.plugin.update(served.get(resource, ()))
            if any(resource not in self._served for resource in served):
                self._serve_all()
                self._register_all()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        with self._lock:
            for entry in self._served.values():
                self._stop_entry(entry)
            self._served.clear()

    # -- serving and registering -------------------------------------------------------------

    def _served_now(self) -> dict[str, tuple[ServedDevice, ...]]:
        return served_resources(self._inventory, self._config.sharing, self._config.shares_per_gpu)

    def _serve_all(self) -> None:
        for resource, devices in self._served_now().items():
            if resource in self._served:
                continue
            plugin = ResourcePlugin(
                resource,
                self._config.node_name,
                devices,
                self._allocator,
                self._bound_pods,
                self._events,
            )
            self._served[resource] = self._start_server(plugin)

    def _start_server(self, plugin: ResourcePlugin) -> _Served:
        socket = self._config.plugin_dir / socket_name(plugin.resource)
        socket.unlink(missing_ok=True)
        server = unix_server(socket, device_plugin_service(plugin))
        return _Served(plugin, server, socket)

    @staticmethod
    def _stop_entry(entry: _Served) -> None:
        entry.plugin.stop()
        entry.server.stop(grace=None)
        entry.socket.unlink(missing_ok=True)

    def _register_all(self) -> None:
        kubelet = self._config.plugin_dir / KUBELET_SOCKET
        if not kubelet.exists():
            if not self._told_no_kubelet:
                log.warning("no kubelet socket at %s yet: registering when it appears", kubelet)
                self._told_no_kubelet = True
            return
        self._told_no_kubelet = False
        channel = unix_channel(kubelet)
        try:
            client = RegistrationClient(channel)
            for resource, entry in self._served.items():
                if entry.registered:
                    continue
                try:
                    client.register(Registration(API_VERSION, entry.socket.name, resource, OPTIONS))
                except Exception as error:  # retried at the next poll
                    log.warning(
                        "registering %s with the kubelet failed: %s",
                        resource,
                        rpc_error_text(error),
                    )
                    continue
                entry.registered = True
                self.registrations += 1
        finally:
            channel.close()

    def _restart_servers(self) -> None:
        """After a kubelet restart: fresh sockets (the kubelet removed ours), registered anew."""
        for resource, entry in list(self._served.items()):
            self._stop_entry(entry)
            fresh = ResourcePlugin(
                resource,
                self._config.node_name,
                entry.plugin.devices,
                self._allocator,
                self._bound_pods,
                self._events,
            )
            self._served[resource] = self._start_server(fresh)
        self._register_all()

    # -- the kubelet's restarts --------------------------------------------------------------

    def _kubelet_socket_identity(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self._config.plugin_dir / KUBELET_SOCKET)
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_ctime_ns

    def _watch_kubelet(self) -> None:
        next_sync = time.monotonic() + self._config.resync_s
        while not self._stop.wait(self._config.kubelet_poll_s):
            if time.monotonic() >= next_sync:
                self.sync_allocated()
                next_sync = time.monotonic() + self._config.resync_s
            identity = self._kubelet_socket_identity()
            with self._lock:
                if identity is None:
                    self._kubelet_identity = None
                elif identity != self._kubelet_identity or any(
                    not e.socket.exists() for e in self._served.values()
                ):
                    log.info("kubelet.sock was created anew: serving and registering again")
                    self._kubelet_identity = identity
                    self._restart_servers()
                elif any(not e.registered for e in self._served.values()):
                    self._register_all()

    def sync_allocated(self) -> None:
        """Read PodResources: bound pods the kubelet already allocated wait no more (call it
        once the bound pods are known; the watcher repeats it every ``resync_s``)."""
        if self._allocated is None:
            return
        try:
            allocated = self._allocated.allocated_by_pod()
        except Exception as error:  # the kubelet may not be up yet: nothing is known allocated
            log.warning("reading PodResources failed: %s", rpc_error_text(error))
            return
        self._allocator.mark_allocated(self._bound_pods.pods(), allocated)
