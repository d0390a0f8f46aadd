"""Nodes: CPU, memory, GPU devices, labels (GPU Feature Discovery form), taints, topology."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpufleet.model.gpu import GPU_RESOURCE, NO_SHARING, GpuDevice, GpuSharing


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


class GFD_LABELS:  # noqa: N801 - a namespace of constants, named like the labels it lists
    """Label keys written by NVIDIA GPU Feature Discovery, and the topology keys we read."""

    PRODUCT = "nvidia.com/gpu.product"
    MEMORY = "nvidia.com/gpu.memory"
    COUNT = "nvidia.com/gpu.count"
    MIG_CAPABLE = "nvidia.com/mig.capable"
    MIG_STRATEGY = "nvidia.com/mig.strategy"
    #: Units the device plugin advertises per GPU (time-slicing or MPS), and how it shares.
    REPLICAS = "nvidia.com/gpu.replicas"
    SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
    ZONE = "topology.kubernetes.io/zone"
    RACK = "gpufleet.dev/rack"
    NVLINK_DOMAIN = "gpufleet.dev/nvlink-domain"
    HOSTNAME = "kubernetes.io/hostname"
    REGION = "topology.kubernetes.io/region"
    OS = "kubernetes.io/os"
    ARCH = "kubernetes.io/arch"


_AWS_ZONE = re.compile(r"^(.*\d)[a-z]$")
_SUFFIXED_ZONE = re.compile(r"^(.+)-[a-z0-9]+$")


def zone_region(zone: str) -> str:
    """The region of a zone, as the clouds name them: ``us-east-1a`` (AWS) is in
    ``us-east-1``, ``us-central1-a`` (GCP) in ``us-central1``, ``eastus-1`` (Azure) in
    ``eastus``; a zone that names no region is its own."""
    found = _AWS_ZONE.match(zone) or _SUFFIXED_ZONE.match(zone)
    return found.group(1) if found else zone


def well_known_labels(
    name: str, zone: str | None = None, os: str = "linux", arch: str = "amd64"
) -> dict[str, str]:
    """The labels the kubelet and the cloud give every Kubernetes node, which manifests written
    for a real cluster select on (``kubernetes.io/os: linux``): host name, OS, architecture,
    and with a zone, the zone and its region."""
    labels = {GFD_LABELS.HOSTNAME: name, GFD_LABELS.OS: os, GFD_LABELS.ARCH: arch}
    if zone is not None:
        labels[GFD_LABELS.ZONE] = zone
        labels[GFD_LABELS.REGION] = zone_region(zone)
    return labels


#: Models whose GPUs can be MIG-partitioned (matched by prefix of the product name).
MIG_CAPABLE_PREFIXES = (
    "A100",
    "A30",
    "H100",
    "H200",
    "H20",
    "B200",
    "GB200",
    "NVIDIA-A100",
    "NVIDIA-A30",
    "NVIDIA-H100",
    "NVIDIA-H200",
    "NVIDIA-B200",
)


@dataclass(frozen=True, slots=True)
class Node:
    """A schedulable node. Capacity only; what is in use is the scheduler's business."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuDevice, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    #: Allocatable extended resources other than NVIDIA GPUs (``rdma/hca``, ``amd.com/gpu``),
    #: (name, whole units) sorted by name.
    extended: tuple[tuple[str, int], ...] = ()
    #: What the device plugin advertises for the devices that are not MIG-partitioned.
    gpu_sharing: GpuSharing = NO_SHARING
    #: Why no new pod may go there, when ``unschedulable`` (``explain`` counts the node under
    #: it: "node(s) are being removed by the cluster autoscaler"); empty for a plain cordon
    #: ("node(s) were unschedulable", kube-scheduler's words).
    unschedulable_reason: str = ""

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_units(self) -> int:
        """Units of :attr:`gpu_resource` the node advertises (what the kubelet counts)."""
        return self.gpu_sharing.replicas * sum(not g.partitioned for g in self.gpus)

    @property
    def gpu_resource(self) -> str:
        return self.gpu_sharing.resource if self.gpus else GPU_RESOURCE

    @property
    def gpu_model(self) -> str | None:
        """The node's GPU model (the most common one if a node were ever mixed)."""
        if not self.gpus:
            return None
        return Counter(g.model for g in self.gpus).most_common(1)[0][0]

    @property
    def gpu_memory_mib(self) -> int:
        return min((g.memory_mib for g in self.gpus), default=0)

    @property
    def unhealthy_gpus(self) -> tuple[int, ...]:
        """Indices of the devices marked unhealthy (nothing new is placed on them)."""
        return tuple(g.index for g in self.gpus if not g.healthy)


#: kube-scheduler's reason for a node that takes no new pods, when no other reason is known.
UNSCHEDULABLE_REASON = "node(s) were unschedulable"


def unschedulable_reason(node: Node) -> str:
    """Why no new pod may go to ``node`` (it is unschedulable)."""
    return node.unschedulable_reason or UNSCHEDULABLE_REASON


def with_gpu_health(node: Node, unhealthy: Iterable[int]) -> Node:
    """``node`` with exactly the devices ``unhealthy`` (indices) marked unhealthy."""
    sick = frozenset(unhealthy)
    if all(g.healthy == (g.index not in sick) for g in node.gpus):
        return node
    gpus = tuple(replace(g, healthy=g.index not in sick) for g in node.gpus)
    return replace(node, gpus=gpus)


def same_but_health(a: Node, b: Node) -> bool:
    """Whether ``a`` and ``b`` differ at most in which devices are healthy (labels compared
    too)."""
    return with_gpu_health(a, ()) == with_gpu_health(b, ()) and dict(a.labels) == dict(b.labels)


#: GFD appends this to the product of time-sliced or MPS GPUs (unless ``renameByDefault``).
SHARED_PRODUCT_SUFFIX = "-SHARED"


def gfd_labels(gpus: tuple[GpuDevice, ...], sharing: GpuSharing = NO_SHARING) -> dict[str, str]:
    """The labels GPU Feature Discovery would put on a node with these GPUs."""
    if not gpus:
        return {}
    model = Counter(g.model for g in gpus).most_common(1)[0][0]
    product = model
    if sharing.time_sliced and sharing.resource == GPU_RESOURCE:
        product += SHARED_PRODUCT_SUFFIX
    labels = {
        GFD_LABELS.PRODUCT: product,
        GFD_LABELS.MEMORY: str(min(g.memory_mib for g in gpus)),
        GFD_LABELS.COUNT: str(len(gpus)),
        GFD_LABELS.MIG_CAPABLE: str(model.upper().startswith(MIG_CAPABLE_PREFIXES)).lower(),
    }
    if any(g.partitioned for g in gpus):
        labels[GFD_LABELS.MIG_STRATEGY] = "mixed"
    if sharing.time_sliced:
        labels[GFD_LABELS.REPLICAS] = str(sharing.replicas)
        labels[GFD_LABELS.SHARING_STRATEGY] = sharing.strategy.value
    return labels
