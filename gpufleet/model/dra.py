"""Dynamic Resource Allocation as plain data: devices described by attributes and capacities,
the classes and claims that ask for them, as ``resource.k8s.io/v1`` defines them.

Owns the world-neutral types of DRA: a :class:`Device` (what a ResourceSlice lists: a name in a
driver's pool, typed attributes and exact capacities under qualified names, taints, the
counters it consumes), a :class:`ResourceSlice`, a :class:`DeviceClass`, a claim's requests
(:class:`ExactRequest` and ``firstAvailable`` alternatives, :class:`DeviceRequest`), its
``matchAttribute`` constraints, a :class:`ResourceClaim`, a :class:`ResourceClaimTemplate`, a
pod's :class:`PodResourceClaim` and what a claim holds once allocated
(:class:`AllocatedDevice`).

A GPU is one kind of :class:`Device` whatever announced it. NVIDIA's DRA driver publishes it in
a ResourceSlice (driver ``gpu.nvidia.com``: ``productName``, ``uuid``, ``index``,
``architecture``... attributes and a ``memory`` capacity); gpufleet's agent will publish the
same names; and a node of the device-plugin path (``nvidia.com/gpu: N`` with GPU Feature
Discovery's labels) maps to the same devices: :func:`gpu_device` turns one of its
:class:`~gpufleet.model.gpu.GpuDevice` records into the :class:`Device` NVIDIA's driver would
list for it (``gpu-<index>`` in the node's pool, the product name from the node's GFD label).

Attribute and capacity names are kept fully qualified (``gpu.nvidia.com/productName``): a name
given without a domain is the driver's, as Kubernetes reads it. Quantities are exact
(:class:`fractions.Fraction` of base units). Nothing here parses files (``gpufleet.io.kube.dra``
does) or evaluates CEL (:mod:`gpufleet.model.device_cel`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from gpufleet.model.gpu import GpuDevice
from gpufleet.model.selectors import NodeSelectorTerm

#: The API group and version every DRA kind is read as.
RESOURCE_API_VERSION = "resource.k8s.io/v1"
#: The driver name of NVIDIA's DRA driver for whole GPUs and MIG devices.
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
#: The standard attribute of the PCIe root complex a device hangs off.
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
#: Most devices one ExactCount request may ask for (the API server's limit).
MAX_COUNT = 128


@dataclass(frozen=True, slots=True)
class SemVer:
    """A ``version`` attribute (semantic versioning 2.0.0): compared as semver orders it."""

    major: int
    minor: int
    patch: int
    #: Pre-release identifiers: numbers compare as numbers, below any text identifier.
    pre: tuple[tuple[int, int | str], ...] = ()
    #: Build metadata: ignored in comparisons, kept to say the version back.
    build: str = field(default="", compare=False)

    def sort_key(self) -> tuple[object, ...]:
        """A release sorts after its pre-releases: 1.0.0-rc.1 < 1.0.0."""
        return (self.major, self.minor, self.patch, not self.pre, self.pre)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(part) for _, part in self.pre)
        return f"{text}+{self.build}" if self.build else text


#: A device attribute's value: ``int``, ``bool``, ``string`` or ``version`` in the API.
AttributeValue = int | bool | str | SemVer


class DeviceTaintEffect(StrEnum):
    """What a device taint does to claims that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"  # no new allocation
    NO_EXECUTE = "NoExecute"  # no new allocation, and pods using it are evicted
    NONE = "None"  # only informs (Kubernetes 1.35)


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: DeviceTaintEffect = DeviceTaintEffect.NO_SCHEDULE


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    """A request's toleration of device taints, matched as pod tolerations are."""

    key: str | None = None
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: DeviceTaintEffect | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return self.key is None or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """What a partitionable device (a MIG profile) takes from a counter set of its slice."""

    counter_set: str
    counters: tuple[tuple[str, Fraction], ...]


@dataclass(frozen=True, slots=True)
class CounterSet:
    """Counters that devices of one slice share (a GPU's memory slices and compute slices)."""

    name: str
    counters: tuple[tuple[str, Fraction], ...]


@dataclass(frozen=True, slots=True, order=True)
class DeviceId:
    """A device's identity across the cluster: its driver, pool and name."""

    driver: str
    pool: str
    name: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


@dataclass(frozen=True, slots=True)
class Device:
    """One device a ResourceSlice lists."""

    name: str
    driver: str
    pool: str
    #: Qualified attribute name (``gpu.nvidia.com/productName``) -> value.
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict, hash=False)
    #: Qualified capacity name (``gpu.nvidia.com/memory``) -> exact value in base units.
    capacity: Mapping[str, Fraction] = field(default_factory=dict, hash=False)
    taints: tuple[DeviceTaint, ...] = ()
    consumes_counters: tuple[CounterConsumption, ...] = ()
    #: ``allowMultipleAllocations``: several claims may hold it at once.
    shareable: bool = False

    @property
    def id(self) -> DeviceId:
        return DeviceId(self.driver, self.pool, self.name)

    def attribute(self, name: str) -> AttributeValue | None:
        """The value of ``name`` (qualified, or the driver's when it has no domain)."""
        return self.attributes.get(qualified(name, self.driver))


def qualified(name: str, driver: str) -> str:
    """``name`` with its domain: a name without one is the driver's (``index`` of driver
    ``gpu.nvidia.com`` is ``gpu.nvidia.com/index``)."""
    return name if "/" in name else f"{driver}/{name}"


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """A driver's devices in one pool, and where they can be used: one node (``node_name``),
    every node (``all_nodes``) or the nodes a selector picks."""

    name: str
    driver: str
    pool: str
    pool_generation: int
    pool_slice_count: int
    devices: tuple[Device, ...]
    node_name: str | None = None
    all_nodes: bool = False
    node_selector: tuple[NodeSelectorTerm, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()


@dataclass(frozen=True, slots=True)
class CelSelector:
    """A CEL expression a device must satisfy; ``field`` is where it was read (for errors)."""

    expression: str
    field: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """A driver's own configuration, passed through to it (``parameters`` as given)."""

    driver: str
    parameters: Mapping[str, object] = field(default_factory=dict, hash=False, compare=False)
    #: The requests it applies to (none: all of the claim's).
    requests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[CelSelector, ...] = ()
    config: tuple[OpaqueConfig, ...] = ()
    #: Pods asking this extended resource get a claim of this class (Kubernetes 1.34 alpha).
    extended_resource_name: str | None = None


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """Devices of one class: ``count`` of them (or all that match), each satisfying the
    class's and the request's selectors and tolerating every taint it has."""

    device_class: str
    selectors: tuple[CelSelector, ...] = ()
    mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One named request of a claim: ``exactly`` these devices, or the first of
    ``first_available`` (named sub-requests, in order of preference) that can be satisfied."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[tuple[str, ExactRequest], ...] = ()

    @property
    def alternatives(self) -> tuple[tuple[str, ExactRequest], ...]:
        """``(name, request)`` in order of preference: the request's own name for
        ``exactly``, ``request/subrequest`` for each ``firstAvailable`` entry."""
        if self.exactly is not None:
            return ((self.name, self.exactly),)
        return tuple((f"{self.name}/{sub}", exact) for sub, exact in self.first_available)


@dataclass(frozen=True, slots=True)
class MatchAttribute:
    """Devices of ``requests`` (all of the claim's when empty) agree on ``attribute``."""

    attribute: str
    requests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[MatchAttribute, ...] = ()
    config: tuple[OpaqueConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One device a claim holds: for which request (``request/sub`` for a sub-request)."""

    request: str
    device: DeviceId
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    """A pod (or other consumer) a claim is reserved for."""

    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    name: str
    namespace: str
    spec: ClaimSpec
    #: ``status.allocation``'s devices; empty while unallocated.
    allocated: tuple[AllocatedDevice, ...] = ()
    #: ``status.allocation.nodeSelector``: where its devices can be used.
    allocated_node_selector: tuple[NodeSelectorTerm, ...] = ()
    reserved_for: tuple[ConsumerRef, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_allocated(self) -> bool:
        return bool(self.allocated)


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    """What each pod naming it gets a claim of its own from."""

    name: str
    namespace: str
    spec: ClaimSpec
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """One entry of a pod's ``spec.resourceClaims``: a claim by name, or one made for the pod
    from a template; ``claim_name`` is the generated claim's once
    ``status.resourceClaimStatuses`` says it."""

    name: str
    resource_claim: str | None = None
    template: str | None = None
    claim_name: str | None = None


def gpu_device(gpu: GpuDevice, node: str, product: str | None = None) -> Device:
    """The device NVIDIA's DRA driver lists for a GPU of the device-plugin path: ``gpu-<index>``
    in the node's pool, with ``index``, ``uuid``, ``productName`` (the node's GFD product label,
    else the GPU's model) and a ``memory`` capacity. A MIG-partitioned GPU is listed the same
    way; its MIG devices are partitions of it (counters), not of this function's making."""
    attributes: dict[str, AttributeValue] = {
        f"{NVIDIA_GPU_DRIVER}/type": "gpu",
        f"{NVIDIA_GPU_DRIVER}/index": gpu.index,
        f"{NVIDIA_GPU_DRIVER}/productName": product or gpu.model,
    }
    if gpu.uuid:
        attributes[f"{NVIDIA_GPU_DRIVER}/uuid"] = gpu.uuid
    taints = () if gpu.healthy else (DeviceTaint("gpufleet.dev/unhealthy"),)
    return Device(
        f"gpu-{gpu.index}",
        NVIDIA_GPU_DRIVER,
        node,
        attributes,
        {f"{NVIDIA_GPU_DRIVER}/memory": Fraction(gpu.memory_mib * (1 << 20))},
        taints,
    )


@dataclass(frozen=True, slots=True)
class DraObjects:
    """The DRA objects of a scenario: classes by name, claims and templates by
    ``namespace/name``, slices in the order read."""

    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    claims: Mapping[str, ResourceClaim] = field(default_factory=dict)
    templates: Mapping[str, ResourceClaimTemplate] = field(default_factory=dict)
    slices: tuple[ResourceSlice, ...] = ()
