"""A fake kubelet that speaks the real gRPC APIs over unix sockets in a temporary directory.

It serves the Registration service (``device-plugins/kubelet.sock``) and the PodResources API
(``pod-resources/kubelet.sock``). When a plugin registers, it connects to the plugin's socket
as the kubelet does, runs ``ListAndWatch`` on a thread and keeps the latest device list. Its
:meth:`FakeKubelet.admit` does what the kubelet's device manager does for each container of a
pod asking a served resource (init containers first): take the healthy IDs no other pod holds,
ask ``GetPreferredAllocation`` when the plugin offers it (its own choice otherwise), call
``Allocate`` for that one container, and record the allocation so that ``List`` reports it. A
refused Allocate fails the pod's admission and is kept in :attr:`FakeKubelet.errors`.
:meth:`FakeKubelet.restart` does what a kubelet restart does to plugins: ``kubelet.sock`` is
created anew and every other socket in the directory removed. No mocks: every call crosses a
real gRPC channel.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.agent.allocation import ContainerGrant
from gpufleet.agent.bound_pods import BoundPod
from gpufleet.agent.kubelet_api import (
    API_VERSION,
    KUBELET_SOCKET,
    ContainerDevices,
    ContainerResources,
    DevicePluginClient,
    DeviceStream,
    PluginDevice,
    PluginOptions,
    PodResources,
    PreferenceRequest,
    Registration,
    RpcRefusedError,
    pod_resources_service,
    registration_service,
    rpc_error_text,
    unix_channel,
    unix_server,
)
from gpufleet.testing.waiting import wait_until


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    """What one container of an admitted pod got from a plugin."""

    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    grant: ContainerGrant
    init: bool = False


@dataclass(frozen=True, slots=True)
class AdmitError:
    pod: str
    container: str
    resource: str
    message: str


@dataclass(frozen=True, slots=True)
class AdmitResult:
    pod: str
    allocations: tuple[ContainerAllocation, ...]
    error: AdmitError | None = None

    @property
    def admitted(self) -> bool:
        return self.error is None


class _Plugin:
    """One registered plugin: the kubelet's connection to it and its latest device list."""

    def __init__(self, plugin_dir: Path, registration: Registration) -> None:
        self.registration = registration
        self.channel: Any = unix_channel(plugin_dir / registration.endpoint)
        self.client = DevicePluginClient(self.channel)
        self.devices: tuple[PluginDevice, ...] = ()
        self.updates = 0
        self.stream_error = ""
        self._stream: DeviceStream = self.client.list_and_watch()
        self._thread = threading.Thread(
            target=self._watch, name=f"list-and-watch {registration.resource_name}", daemon=True
        )
        self._thread.start()

    def _watch(self) -> None:
        try:
            for devices in self._stream:
                self.devices = tuple(devices)
                self.updates += 1
        except Exception as error:  # a cancelled stream ends here too
            self.stream_error = rpc_error_text(error)

    def close(self) -> None:
        self._stream.cancel()
        self._thread.join(timeout=5)
        self.channel.close()


class FakeKubelet:
    """The kubelet's device manager and PodResources API, for tests; see the module docstring."""

    def __init__(self, root: Path) -> None:
        self.plugin_dir = root / "device-plugins"
        self.pod_resources_socket = root / "pod-resources" / KUBELET_SOCKET
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._plugins: dict[str, _Plugin] = {}
        self._allocations: list[ContainerAllocation] = []
        self.errors: list[AdmitError] = []
        #: How long each Allocate call took, seconds (the round trip over the plugin's socket).
        self.allocate_seconds: list[float] = []
        self.registrations: list[Registration] = []
        self._registration_server: Any = None
        self._pod_resources_server: Any = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        self._registration_server = unix_server(
            self.plugin_dir / KUBELET_SOCKET, registration_service(self)
        )
        self._pod_resources_server = unix_server(
            self.pod_resources_socket, pod_resources_service(self)
        )
        return self

    def stop(self) -> None:
        with self._lock:
            for plugin in self._plugins.values():
                plugin.close()
            self._plugins.clear()
        for server in (self._registration_server, self._pod_resources_server):
            if server is not None:
                server.stop(grace=None)

    def restart(self) -> None:
        """A kubelet restart: plugins are forgotten, their sockets and ``kubelet.sock``
        removed, and ``kubelet.sock`` served anew (allocations survive, as the kubelet's
        checkpoint keeps them)."""
        with self._lock:
            for plugin in self._plugins.values():
                plugin.close()
            self._plugins.clear()
            self._registration_server.stop(grace=None)
            for entry in self.plugin_dir.iterdir():
                if entry.is_socket():
                    entry.unlink()
            self._registration_server = unix_server(
                self.plugin_dir / KUBELET_SOCKET, registration_service(self)
            )

    # -- Registration ------------------------------------------------------------------------

    def register(self, registration: Registration) -> None:
        if registration.version != API_VERSION:
            raise RpcRefusedError(
                "INVALID_ARGUMENT", f"unsupported device plugin API {registration.version!r}"
            )
        if not (self.plugin_dir / registration.endpoint).exists():
            raise RpcRefusedError(
                "INVALID_ARGUMENT", f"no socket {registration.endpoint!r} in {self.plugin_dir}"
            )
        with self._lock:
            old = self._plugins.pop(registration.resource_name, None)
            if old is not None:
                old.close()
            self._plugins[registration.resource_name] = _Plugin(self.plugin_dir, registration)
            self.registrations.append(registration)

    # -- PodResources ------------------------------------------------------------------------

    def list_pods(self) -> list[PodResources]:
        with self._lock:
            by_pod: dict[str, dict[str, list[ContainerDevices]]] = {}
            for a in self._allocations:
                containers = by_pod.setdefault(a.pod, {})
                containers.setdefault(a.container, []).append(
                    ContainerDevices(a.resource, a.device_ids)
                )
        pods = []
        for key, containers in by_pod.items():
            namespace, name = key.split("/", 1)
            pods.append(
                PodResources(
                    name,
                    namespace,
                    tuple(ContainerResources(c, tuple(d)) for c, d in containers.items()),
                )
            )
        return pods

    def allocatable(self) -> list[ContainerDevices]:
        with self._lock:
            return [
                ContainerDevices(resource, tuple(d.id for d in plugin.devices if d.healthy))
                for resource, plugin in self._plugins.items()
            ]

    # -- what tests look at ------------------------------------------------------------------

    def resources(self) -> set[str]:
        with self._lock:
            return set(self._plugins)

    def devices(self, resource: str) -> dict[str, bool]:
        """The latest ``ListAndWatch`` list of ``resource``: ID -> healthy."""
        with self._lock:
            plugin = self._plugins.get(resource)
        return {} if plugin is None else {d.id: d.healthy for d in plugin.devices}

    def options(self, resource: str) -> PluginOptions:
        with self._lock:
            return self._plugins[resource].registration.options

    @property
    def allocations(self) -> tuple[ContainerAllocation, ...]:
        with self._lock:
            return tuple(self._allocations)

    def wait_for(
        self, condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "a condition"
    ) -> None:
        """Poll ``condition`` until it holds; fail (an AssertionError) after ``timeout_s``."""
        wait_until(condition, f"the fake kubelet: {what}", timeout_s=timeout_s)

    # -- the device manager ------------------------------------------------------------------

    def admit(self, pod: BoundPod) -> AdmitResult:
        """Allocate every served resource of ``pod``'s containers, as the kubelet admits it."""
        with self._lock:
            done: list[ContainerAllocation] = []
            for container in sorted(pod.containers, key=lambda c: not c.init):
                for resource, units in sorted(container.limits.items()):
                    plugin = self._plugins.get(resource)
                    if plugin is None or units <= 0:
                        continue
                    outcome = self._allocate(plugin, pod, container.name, container.init, units)
                    if isinstance(outcome, AdmitError):
                        self.errors.append(outcome)
                        self._allocations = [a for a in self._allocations if a.pod != pod.key]
                        return AdmitResult(pod.key, tuple(done), outcome)
                    done.append(outcome)
                    self._allocations.append(outcome)
            return AdmitResult(pod.key, tuple(done))

    def release(self, pod_key: str) -> None:
        """The pod ended: its devices are free again."""
        with self._lock:
            self._allocations = [a for a in self._allocations if a.pod != pod_key]

    def _allocate(
        self, plugin: _Plugin, pod: BoundPod, container: str, init: bool, units: int
    ) -> ContainerAllocation | AdmitError:
        resource = plugin.registration.resource_name
        held = {
            i
            for a in self._allocations
            if a.resource == resource and (a.pod != pod.key or (not init and not a.init))
            for i in a.device_ids
        }
        available = [d.id for d in plugin.devices if d.healthy and d.id not in held]
        if len(available) < units:
            return AdmitError(
                pod.key,
                container,
                resource,
                f"insufficient {resource}: asks {units}, {len(available)} available",
            )
        ids = available[:units]
        try:
            if plugin.registration.options.preferred_allocation_available:
                preferred = plugin.client.preferred(
                    [PreferenceRequest(tuple(available), (), units)]
                )[0]
                if len(preferred) == units and set(preferred) <= set(available):
                    ids = list(preferred)
            started = time.perf_counter()
            grant = plugin.client.allocate([ids])[0]
            self.allocate_seconds.append(time.perf_counter() - started)
        except Exception as error:
            return AdmitError(pod.key, container, resource, rpc_error_text(error))
        return ContainerAllocation(pod.key, container, resource, tuple(ids), grant, init)


def short_tmp_root(prefix: str = "gpufleet-kubelet-") -> Path:
    """A short temporary directory (unix socket paths are limited to about 100 bytes, too
    few for pytest's own temporary paths); the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if Path("/tmp").is_dir() else None))
