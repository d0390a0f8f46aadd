"""Our own small cluster-spec format (``kind: ClusterSpec``): pools of identical nodes.

Owns the format (pydantic models, ``extra="forbid"``), its validation (counts, quantities, MIG
layouts within seven compute slices, unique pool and node names, extended resource names such as
``rdma/hca`` with whole counts), the expansion of pools into
model nodes with GPU Feature Discovery, hostname and topology labels (zone, rack, NVLink domain),
and the reverse: grouping nodes of identical shape into pools (:func:`nodes_to_cluster_spec`).
A pool declares how its GPUs are shared as the NVIDIA device plugin's own config does
(``devicePlugin``: ``version: v1``, ``sharing.timeSlicing`` or ``sharing.mps`` with
``resources[].name`` / ``replicas``, ``renameByDefault``, ``failRequestsGreaterThanOne``: the
``data`` of its time-slicing ConfigMap), or as HAMi does (``hami.deviceSplitCount``).
Validation errors become :class:`~gpufleet.io.errors.InputError` with the field path
(``spec.pools[0].mig.layout``). It does not read Kubernetes Node objects (``kube.nodes`` does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fleet.cluster_shapes import API_VERSION, KIND, nodes_to_cluster_spec
from gpufleet.io.kube.device_plugin_config import DevicePluginConfig
from gpufleet.io.kube.mig_layout import check_device_fits
from gpufleet.io.kube.resources import is_extended_resource
from gpufleet.io.manifests import load_manifests, scalar_text
from gpufleet.io.names import label_key_problem, label_value_problem, name_problem
from gpufleet.io.quantities import parse_count, parse_cpu_milli, parse_memory_mib
from gpufleet.io.validation import validation_error
from gpufleet.model import (
    GFD_LABELS,
    MILLI_PER_GPU,
    NO_SHARING,
    GpuDevice,
    GpuSharing,
    MigSlice,
    Node,
    SharingStrategy,
    Taint,
    TaintEffect,
    gfd_labels,
)
from gpufleet.model.node import well_known_labels

__all__ = [
    "API_VERSION",
    "KIND",
    "ClusterSpec",
    "cluster_spec_from_dict",
    "nodes_to_cluster_spec",
    "read_cluster_spec",
]

MAX_NODES_PER_POOL = 100_000
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_NAME_PREFIX = r"^[a-z0-9][-a-z0-9.]*$"


def _label_text(value: object) -> object:
    """YAML reads ``true`` or ``8`` as non-text; a label value means the text."""
    text = scalar_text(value)
    return value if text is None else text


def _checked(problem: Callable[[str], str | None], what: str) -> Callable[[str], str]:
    """A validator that refuses text ``problem`` finds fault with (:mod:`gpufleet.io.names`)."""

    def check(text: str) -> str:
        found = problem(text)
        if found is not None:
            raise ValueError(f"{what} {found}; got {quoted(text)}")
        return text

    return check


CpuMilli = Annotated[int, BeforeValidator(parse_cpu_milli), Field(ge=1)]
MemoryMiB = Annotated[int, BeforeValidator(parse_memory_mib)]
Count = Annotated[int, BeforeValidator(parse_count)]
LabelText = Annotated[str, BeforeValidator(_label_text)]
LabelValue = Annotated[LabelText, AfterValidator(_checked(label_value_problem, "label value"))]
LabelKey = Annotated[str, AfterValidator(_checked(label_key_problem, "label key"))]
ObjectName = Annotated[str, AfterValidator(_checked(name_problem, "name"))]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSpec(_Strict):
    #: The model names the product label (``nvidia.com/gpu.product``): a label value.
    model: LabelValue = Field(min_length=1)
    count: int = Field(ge=1, le=64)
    memory: MemoryMiB = 0


class MigSpec(_Strict):
    devices: list[Annotated[int, Field(ge=0)]] = Field(min_length=1)
    layout: list[str] = Field(min_length=1)

    @field_validator("devices")
    @classmethod
    def _unique_devices(cls, devices: list[int]) -> list[int]:
        repeated = sorted({d for d in devices if devices.count(d) > 1})
        if repeated:
            raise ValueError(f"device index(es) {repeated} listed more than once")
        return devices

    @field_validator("layout")
    @classmethod
    def _fits(cls, layout: list[str]) -> list[str]:
        return list(check_device_fits(layout))


class HamiSpec(_Strict):
    """HAMi's device plugin: ``deviceSplitCount`` units of nvidia.com/gpu per GPU."""

    device_split_count: int = Field(alias="deviceSplitCount", ge=1, le=MILLI_PER_GPU)


class TopologySpec(_Strict):
    zone: LabelValue | None = None
    nodes_per_rack: int | None = Field(default=None, ge=1, alias="nodesPerRack")
    nodes_per_nvlink_domain: int = Field(default=1, ge=1, alias="nodesPerNvlinkDomain")


class TaintSpec(_Strict):
    key: LabelKey = Field(min_length=1)
    value: LabelValue = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


class PoolSpec(_Strict):
    name: str = Field(pattern=_DNS_LABEL, max_length=58)
    name_prefix: str | None = Field(default=None, alias="namePrefix", pattern=_NAME_PREFIX)
    count: int = Field(ge=1, le=MAX_NODES_PER_POOL)
    cpu: CpuMilli
    memory: MemoryMiB = Field(ge=1)
    gpu: GpuSpec | None = None
    mig: MigSpec | None = None
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    topology: TopologySpec | None = None
    unschedulable: bool = False
    extended_resources: dict[str, Count] = Field(default_factory=dict, alias="extendedResources")

    @field_validator("extended_resources")
    @classmethod
    def _extended_names(cls, resources: dict[str, int]) -> dict[str, int]:
        for name in resources:
            if not is_extended_resource(name):
                raise ValueError(
                    f"{quoted(name)} is not an extended resource (expected a vendor/name such as "
                    "rdma/hca or amd.com/gpu; GPUs go in gpu and mig)"
                )
        return resources

    device_plugin: DevicePluginConfig | None = Field(default=None, alias="devicePlugin")
    hami: HamiSpec | None = None

    @model_validator(mode="after")
    def _sharing_on_gpus(self) -> PoolSpec:
        if self.device_plugin is not None and self.hami is not None:
            raise ValueError("devicePlugin and hami both advertise the GPUs: give one")
        if (self.device_plugin is not None or self.hami is not None) and self.gpu is None:
            raise ValueError("devicePlugin and hami need gpu: the pool has no GPUs to advertise")
        return self

    def gpu_sharing(self) -> GpuSharing:
        if self.hami is not None and self.hami.device_split_count > 1:
            return GpuSharing(SharingStrategy.SPLIT, self.hami.device_split_count)
        if self.device_plugin is not None:
            return self.device_plugin.gpu_sharing()
        return NO_SHARING

    @model_validator(mode="after")
    def _mig_on_gpus(self) -> PoolSpec:
        if self.mig is None:
            return self
        if self.gpu is None:
            raise ValueError("mig needs gpu: the pool has no GPUs to partition")
        outside = [d for d in self.mig.devices if d >= self.gpu.count]
        if outside:
            raise ValueError(
                f"mig.devices {outside} are outside the pool's {self.gpu.count} GPUs "
                f"(indices 0..{self.gpu.count - 1})"
            )
        return self

    @model_validator(mode="after")
    def _node_names(self) -> PoolSpec:
        """Every node name (the last is the longest) is a DNS-1123 subdomain, and fits the
        kubernetes.io/hostname label it is given (a label value)."""
        last = self.node_name(self.count - 1)
        problem = name_problem(last) or label_value_problem(last)
        if problem is not None:
            field = "namePrefix" if self.name_prefix is not None else "name"
            raise ValueError(
                f"{field}: the nodes would be named up to {quoted(last)}, which {problem} "
                f"(it is their name and their {GFD_LABELS.HOSTNAME} label)"
            )
        return self

    def node_name(self, index: int) -> str:
        prefix = self.name_prefix if self.name_prefix is not None else f"{self.name}-"
        return f"{prefix}{index:04d}"


class ClusterBody(_Strict):
    pools: list[PoolSpec] = Field(min_length=1)

    @field_validator("pools")
    @classmethod
    def _unique_names(cls, pools: list[PoolSpec]) -> list[PoolSpec]:
        names = [p.name for p in pools]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"pool name(s) {', '.join(repeated)} used more than once")
        return pools


class Metadata(_Strict):
    name: ObjectName = Field(min_length=1)


class ClusterSpec(_Strict):
    api_version: Literal["gpufleet.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["ClusterSpec"]
    metadata: Metadata
    spec: ClusterBody


def read_cluster_spec(path: str | Path) -> list[Node]:
    """The nodes of a cluster-spec file (several ClusterSpec documents are added together)."""
    source = str(path)
    manifests = load_manifests(path)
    if not manifests:
        raise InputError(source, f"expected a {KIND}, found no objects in the file")
    nodes: list[Node] = []
    for manifest in manifests:
        nodes.extend(cluster_spec_from_dict(manifest, source, manifest.location))
    _check_unique(nodes, source)
    return nodes


def cluster_spec_from_dict(
    data: Mapping[str, Any], source: str, location: str | None = None
) -> list[Node]:
    """The nodes of one ClusterSpec object (as loaded from YAML or JSON)."""
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as error:
        raise validation_error(error, data, source, location, ClusterSpec) from None
    where = f"{KIND} {spec.metadata.name}"
    nodes = [node for pool in spec.spec.pools for node in _pool_nodes(pool)]
    _check_unique(nodes, source, where if location is None else f"{location}, {where}")
    return nodes


def _check_unique(nodes: list[Node], source: str, location: str | None = None) -> None:
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise InputError(
                source,
                f"node name {quoted(node.name)} is produced twice; give the pools distinct "
                "namePrefix values",
                location,
                "spec.pools",
            )
        seen.add(node.name)


def _pool_nodes(pool: PoolSpec) -> list[Node]:
    gpus: tuple[GpuDevice, ...] = ()
    if pool.gpu is not None:
        partitioned = set(pool.mig.devices) if pool.mig is not None else set()
        slices = (
            tuple(MigSlice(p, slot) for slot, p in enumerate(pool.mig.layout))
            if (pool.mig is not None)
            else ()
        )
        gpus = tuple(
            GpuDevice(i, pool.gpu.model, pool.gpu.memory, slices if i in partitioned else ())
            for i in range(pool.gpu.count)
        )
    taints = tuple(Taint(t.key, t.value, t.effect) for t in pool.taints)
    sharing = pool.gpu_sharing()
    hardware = gfd_labels(gpus, sharing)
    nodes: list[Node] = []
    for i in range(pool.count):
        name = pool.node_name(i)
        zone = None if pool.topology is None else pool.topology.zone
        labels = {
            **well_known_labels(name, zone),
            **hardware,
            **_topology_labels(pool, i),
            **pool.labels,
        }
        extended = tuple(sorted((k, v) for k, v in pool.extended_resources.items() if v))
        nodes.append(
            Node(
                name,
                pool.cpu,
                pool.memory,
                gpus,
                labels,
                taints,
                pool.unschedulable,
                extended=extended,
                gpu_sharing=sharing,
            )
        )
    return nodes


def _topology_labels(pool: PoolSpec, index: int) -> dict[str, str]:
    topology = pool.topology
    if topology is None:
        return {}
    labels: dict[str, str] = {}
    if topology.zone is not None:
        labels[GFD_LABELS.ZONE] = topology.zone
    if topology.nodes_per_rack is not None:
        labels[GFD_LABELS.RACK] = f"{pool.name}-rack-{index // topology.nodes_per_rack}"
    if pool.gpu is not None:
        domain = index // topology.nodes_per_nvlink_domain
        labels[GFD_LABELS.NVLINK_DOMAIN] = f"{pool.name}-nvl-{domain}"
    return labels
