"""The kubelet's gRPC APIs, typed: device plugin v1beta1 and PodResources v1.

Owns the loading of the two ``.proto`` files written from the published APIs
(``protos/``, loaded at import with :func:`grpc.protos_and_services`; no generated code is
committed), the conversion between their messages and plain dataclasses, and the glue that
serves a handler object or calls a server over a unix socket. Everything above it speaks
dataclasses and typed protocols, so it stays ``mypy --strict`` clean; the messages (untyped,
made at run time) never leave this module. It decides nothing.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from gpufleet.agent.allocation import ContainerGrant, Mount

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
#: The kubelet's Registration socket, in its device-plugins directory.
KUBELET_SOCKET = "kubelet.sock"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins"
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

_PROTOS = Path(__file__).parent / "protos"
_LOAD_LOCK = threading.Lock()


def _load(name: str) -> tuple[Any, Any]:
    """(messages, services) of one proto file of ``protos/``, resolved on ``sys.path``."""
    with _LOAD_LOCK:
        added = str(_PROTOS) not in sys.path
        if added:
            sys.path.insert(0, str(_PROTOS))
        try:
            return grpc.protos_and_services(name)  # type: ignore[no-any-return]
        finally:
            if added:
                sys.path.remove(str(_PROTOS))


_dp, _dp_services = _load("deviceplugin_v1beta1.proto")
_pr, _pr_services = _load("podresources_v1.proto")


class RpcRefusedError(Exception):
    """Raised by a handler to fail a call with a gRPC status (``FAILED_PRECONDITION``, ...)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


# -- plain data ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginOptions:
    pre_start_required: bool = False
    preferred_allocation_available: bool = False


@dataclass(frozen=True, slots=True)
class Registration:
    version: str
    endpoint: str
    resource_name: str
    options: PluginOptions


@dataclass(frozen=True, slots=True)
class PluginDevice:
    id: str
    healthy: bool


@dataclass(frozen=True, slots=True)
class PreferenceRequest:
    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ContainerResources:
    name: str
    devices: tuple[ContainerDevices, ...]


@dataclass(frozen=True, slots=True)
class PodResources:
    name: str
    namespace: str
    containers: tuple[ContainerResources, ...]


# -- servers ---------------------------------------------------------------------------------


class DevicePluginHandlers(Protocol):
    """What a device plugin answers, in plain data; raise :class:`RpcRefusedError` to fail."""

    def options(self) -> PluginOptions: ...

    def list_and_watch(self, active: Callable[[], bool]) -> Iterator[Sequence[PluginDevice]]: ...

    def preferred(self, requests: Sequence[PreferenceRequest]) -> list[tuple[str, ...]]: ...

    def allocate(self, requests: Sequence[tuple[str, ...]]) -> list[ContainerGrant]: ...

    def pre_start(self, device_ids: tuple[str, ...]) -> None: ...


class RegistrationHandlers(Protocol):
    def register(self, registration: Registration) -> None: ...


class PodResourcesHandlers(Protocol):
    def list_pods(self) -> Sequence[PodResources]: ...

    def allocatable(self) -> Sequence[ContainerDevices]: ...


def _guarded(call: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def run(request: Any, context: Any) -> Any:
        try:
            return call(request, context)
        except RpcRefusedError as error:
            context.abort(getattr(grpc.StatusCode, error.status), str(error))

    return run


def _unary(fn: Callable[[Any, Any], Any], request: Any, response: Any) -> Any:
    return grpc.unary_unary_rpc_method_handler(
        _guarded(fn),
        request_deserializer=request.FromString,
        response_serializer=response.SerializeToString,
    )


def device_plugin_service(handlers: DevicePluginHandlers) -> Any:
    """A gRPC generic handler serving ``v1beta1.DevicePlugin`` from ``handlers``."""

    def options(_request: Any, _context: Any) -> Any:
        return _options_message(handlers.options())

    def list_and_watch(_request: Any, context: Any) -> Iterator[Any]:
        for devices in handlers.list_and_watch(context.is_active):
            yield _dp.ListAndWatchResponse(
                devices=[
                    _dp.Device(ID=d.id, health=HEALTHY if d.healthy else UNHEALTHY) for d in devices
                ]
            )

    def preferred(request: Any, _context: Any) -> Any:
        asks = [
            PreferenceRequest(
                tuple(r.available_deviceIDs), tuple(r.must_include_deviceIDs), r.allocation_size
            )
            for r in request.container_requests
        ]
        return _dp.PreferredAllocationResponse(
            container_responses=[
                _dp.ContainerPreferredAllocationResponse(deviceIDs=list(ids))
                for ids in handlers.preferred(asks)
            ]
        )

    def allocate(request: Any, _context: Any) -> Any:
        grants = handlers.allocate([tuple(r.devices_ids) for r in request.container_requests])
        return _dp.AllocateResponse(container_responses=[_grant_message(g) for g in grants])

    def pre_start(request: Any, _context: Any) -> Any:
        handlers.pre_start(tuple(request.devices_ids))
        return _dp.PreStartContainerResponse()

    return grpc.method_handlers_generic_handler(
        "v1beta1.DevicePlugin",
        {
            "GetDevicePluginOptions": _unary(options, _dp.Empty, _dp.DevicePluginOptions),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                list_and_watch,
                request_deserializer=_dp.Empty.FromString,
                response_serializer=_dp.ListAndWatchResponse.SerializeToString,
            ),
            "GetPreferredAllocation": _unary(
                preferred, _dp.PreferredAllocationRequest, _dp.PreferredAllocationResponse
            ),
            "Allocate": _unary(allocate, _dp.AllocateRequest, _dp.AllocateResponse),
            "PreStartContainer": _unary(
                pre_start, _dp.PreStartContainerRequest, _dp.PreStartContainerResponse
            ),
        },
    )


def registration_service(handlers: RegistrationHandlers) -> Any:
    """A gRPC generic handler serving ``v1beta1.Registration`` (the kubelet's side)."""

    def register(request: Any, _context: Any) -> Any:
        handlers.register(
            Registration(
                request.version,
                request.endpoint,
                request.resource_name,
                _options(request.options),
            )
        )
        return _dp.Empty()

    return grpc.method_handlers_generic_handler(
        "v1beta1.Registration", {"Register": _unary(register, _dp.RegisterRequest, _dp.Empty)}
    )


def pod_resources_service(handlers: PodResourcesHandlers) -> Any:
    """A gRPC generic handler serving ``v1.PodResourcesLister`` (the kubelet's side)."""

    def list_pods(_request: Any, _context: Any) -> Any:
        return _pr.ListPodResourcesResponse(
            pod_resources=[_pod_message(p) for p in handlers.list_pods()]
        )

    def allocatable(_request: Any, _context: Any) -> Any:
        return _pr.AllocatableResourcesResponse(
            devices=[_devices_message(d) for d in handlers.allocatable()]
        )

    def get(request: Any, _context: Any) -> Any:
        found = next(
            (
                p
                for p in handlers.list_pods()
                if p.name == request.pod_name and p.namespace == request.pod_namespace
            ),
            None,
        )
        if found is None:
            raise RpcRefusedError(
                "NOT_FOUND", f"pod {request.pod_namespace}/{request.pod_name} not found"
            )
        return _pr.GetPodResourcesResponse(pod_resources=_pod_message(found))

    return grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": _unary(list_pods, _pr.ListPodResourcesRequest, _pr.ListPodResourcesResponse),
            "GetAllocatableResources": _unary(
                allocatable, _pr.AllocatableResourcesRequest, _pr.AllocatableResourcesResponse
            ),
            "Get": _unary(get, _pr.GetPodResourcesRequest, _pr.GetPodResourcesResponse),
        },
    )


def unix_server(socket_path: str | Path, *services: Any, workers: int = 4) -> Any:
    """A started gRPC server on the unix socket ``socket_path`` serving ``services``."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    server.add_generic_rpc_handlers(services)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    return server


# -- clients ---------------------------------------------------------------------------------


def unix_channel(socket_path: str | Path) -> Any:
    return grpc.insecure_channel(f"unix://{socket_path}")


def rpc_error_text(error: Exception) -> str:
    """A gRPC error as ``STATUS: details`` (anything else as its text)."""
    if isinstance(error, grpc.RpcError):
        code = error.code()
        return f"{code.name if code is not None else 'UNKNOWN'}: {error.details()}"
    return str(error)


def is_rpc_error(error: BaseException) -> bool:
    return isinstance(error, grpc.RpcError)


class RegistrationClient:
    def __init__(self, channel: Any) -> None:
        self._register = channel.unary_unary(
            "/v1beta1.Registration/Register",
            request_serializer=_dp.RegisterRequest.SerializeToString,
            response_deserializer=_dp.Empty.FromString,
        )

    def register(self, registration: Registration, timeout_s: float = 5.0) -> None:
        self._register(
            _dp.RegisterRequest(
                version=registration.version,
                endpoint=registration.endpoint,
                resource_name=registration.resource_name,
                options=_options_message(registration.options),
            ),
            timeout=timeout_s,
        )


class DevicePluginClient:
    """The kubelet's side of a device plugin's socket."""

    def __init__(self, channel: Any) -> None:
        self._options = _client_unary(
            channel, "GetDevicePluginOptions", _dp.Empty, _dp.DevicePluginOptions
        )
        self._list_and_watch = channel.unary_stream(
            "/v1beta1.DevicePlugin/ListAndWatch",
            request_serializer=_dp.Empty.SerializeToString,
            response_deserializer=_dp.ListAndWatchResponse.FromString,
        )
        self._preferred = _client_unary(
            channel,
            "GetPreferredAllocation",
            _dp.PreferredAllocationRequest,
            _dp.PreferredAllocationResponse,
        )
        self._allocate = _client_unary(
            channel, "Allocate", _dp.AllocateRequest, _dp.AllocateResponse
        )
        self._pre_start = _client_unary(
            channel,
            "PreStartContainer",
            _dp.PreStartContainerRequest,
            _dp.PreStartContainerResponse,
        )

    def options(self, timeout_s: float = 5.0) -> PluginOptions:
        return _options(self._options(_dp.Empty(), timeout=timeout_s))

    def list_and_watch(self) -> DeviceStream:
        return DeviceStream(self._list_and_watch(_dp.Empty()))

    def preferred(
        self, requests: Sequence[PreferenceRequest], timeout_s: float = 5.0
    ) -> list[tuple[str, ...]]:
        response = self._preferred(
            _dp.PreferredAllocationRequest(
                container_requests=[
                    _dp.ContainerPreferredAllocationRequest(
                        available_deviceIDs=list(r.available),
                        must_include_deviceIDs=list(r.must_include),
                        allocation_size=r.size,
                    )
                    for r in requests
                ]
            ),
            timeout=timeout_s,
        )
        return [tuple(r.deviceIDs) for r in response.container_responses]

    def allocate(
        self, requests: Sequence[Sequence[str]], timeout_s: float = 5.0
    ) -> list[ContainerGrant]:
        response = self._allocate(
            _dp.AllocateRequest(
                container_requests=[
                    _dp.ContainerAllocateRequest(devices_ids=list(ids)) for ids in requests
                ]
            ),
            timeout=timeout_s,
        )
        return [_grant(r) for r in response.container_responses]

    def pre_start(self, device_ids: Sequence[str], timeout_s: float = 5.0) -> None:
        self._pre_start(
            _dp.PreStartContainerRequest(devices_ids=list(device_ids)), timeout=timeout_s
        )


class DeviceStream:
    """A running ListAndWatch: iterate for device lists; ``cancel`` ends it."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def __iter__(self) -> Iterator[list[PluginDevice]]:
        for response in self._call:
            yield [PluginDevice(d.ID, d.health == HEALTHY) for d in response.devices]

    def cancel(self) -> None:
        self._call.cancel()


class PodResourcesClient:
    """A client of the kubelet's PodResources API v1."""

    def __init__(self, channel: Any) -> None:
        self._list = channel.unary_unary(
            "/v1.PodResourcesLister/List",
            request_serializer=_pr.ListPodResourcesRequest.SerializeToString,
            response_deserializer=_pr.ListPodResourcesResponse.FromString,
        )
        self._allocatable = channel.unary_unary(
            "/v1.PodResourcesLister/GetAllocatableResources",
            request_serializer=_pr.AllocatableResourcesRequest.SerializeToString,
            response_deserializer=_pr.AllocatableResourcesResponse.FromString,
        )

    def list_pods(self, timeout_s: float = 5.0) -> list[PodResources]:
        response = self._list(_pr.ListPodResourcesRequest(), timeout=timeout_s)
        return [
            PodResources(
                p.name,
                p.namespace,
                tuple(
                    ContainerResources(c.name, tuple(_devices(d) for d in c.devices))
                    for c in p.containers
                ),
            )
            for p in response.pod_resources
        ]

    def allocatable(self, timeout_s: float = 5.0) -> list[ContainerDevices]:
        response = self._allocatable(_pr.AllocatableResourcesRequest(), timeout=timeout_s)
        return [_devices(d) for d in response.devices]


# -- conversions -----------------------------------------------------------------------------


def _client_unary(channel: Any, method: str, request: Any, response: Any) -> Any:
    return channel.unary_unary(
        f"/v1beta1.DevicePlugin/{method}",
        request_serializer=request.SerializeToString,
        response_deserializer=response.FromString,
    )


def _options(message: Any) -> PluginOptions:
    return PluginOptions(
        bool(message.pre_start_required), bool(message.get_preferred_allocation_available)
    )


def _options_message(options: PluginOptions) -> Any:
    return _dp.DevicePluginOptions(
        pre_start_required=options.pre_start_required,
        get_preferred_allocation_available=options.preferred_allocation_available,
    )


def _grant_message(grant: ContainerGrant) -> Any:
    return _dp.ContainerAllocateResponse(
        envs=dict(grant.envs),
        mounts=[
            _dp.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in grant.mounts
        ],
        cdi_devices=[_dp.CDIDevice(name=name) for name in grant.cdi_devices],
    )


def _grant(message: Any) -> ContainerGrant:
    return ContainerGrant(
        dict(message.envs),
        tuple(Mount(m.container_path, m.host_path, m.read_only) for m in message.mounts),
        tuple(d.name for d in message.cdi_devices),
    )


def _devices(message: Any) -> ContainerDevices:
    return ContainerDevices(message.resource_name, tuple(message.device_ids))


def _devices_message(devices: ContainerDevices) -> Any:
    return _pr.ContainerDevices(
        resource_name=devices.resource_name, device_ids=list(devices.device_ids)
    )


def _pod_message(pod: PodResources) -> Any:
    return _pr.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            _pr.ContainerResources(name=c.name, devices=[_devices_message(d) for d in c.devices])
            for c in pod.containers
        ],
    )
