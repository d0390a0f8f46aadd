"""Pods: what a pod asks for (CPU, memory, GPUs) and where it may go.

GPU requests come in four kinds, as Kubernetes users express them:

* whole GPUs: ``nvidia.com/gpu: N`` in limits (``count=N, milli=1000``);
* a share of one GPU, in milli-GPU or in GPU memory (``count=1, milli<1000`` or
  ``memory_mib>0``), the way time-slicing and HAMi-style sharing are used;
* MIG slices: ``nvidia.com/mig-1g.10gb: N`` (``mig_profile`` and ``mig_count``);
* none (CPU-only).

Besides GPUs a pod may ask for other extended resources (``rdma/hca``, ``amd.com/gpu``, any
``vendor/resource``), whole units counted against what nodes advertise (``extended``).
Its placement rules that relate it to other pods (pod affinity, anti-affinity, topology
spread) and its preferred node affinity are in ``rules`` (:mod:`gpufleet.model.affinity`).
A GPU request also names the units of the node's GPU resource the kubelet counts for
it (``units`` of ``resource``: its ``nvidia.com/gpu`` or ``nvidia.com/gpu.shared`` limit): as many
as its whole GPUs, one for a share that also asks ``nvidia.com/gpu: 1``, none for a share given
only by gpufleet's annotations (the kubelet counts nothing for it). What a request holds on a
given node is :func:`gpufleet.model.sharing.milli_per_device`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.affinity import PlacementRules
from gpufleet.model.dra import PodResourceClaim
from gpufleet.model.gpu import GPU_RESOURCE, GPU_RESOURCES, MILLI_PER_GPU
from gpufleet.model.node import Taint, TaintEffect
from gpufleet.model.selectors import NodeSelectorRequirement, NodeSelectorTerm

__all__ = [
    "GpuRequest",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Pod",
    "PodClass",
    "Toleration",
]


class PodClass(StrEnum):
    """Coarse pod classes used in reports (which kinds of pods fail or wait)."""

    CPU_ONLY = "cpu-only"
    SHARED = "gpu-share"
    ONE_GPU = "one-gpu"
    MULTI_GPU = "multi-gpu"
    MIG = "mig"


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """GPUs a pod asks for. See the module docstring for the four kinds."""

    count: int = 0
    milli: int = 0
    memory_mib: int = 0
    mig_profile: str | None = None
    mig_count: int = 0
    #: Units of ``resource`` the kubelet counts (-1, the default: as many as whole GPUs, none
    #: for a share).
    units: int = -1
    resource: str = GPU_RESOURCE

    def __post_init__(self) -> None:
        if self.count < 0 or self.milli < 0 or self.memory_mib < 0 or self.mig_count < 0:
            raise ValueError(f"negative GPU request: {self}")
        if self.milli > MILLI_PER_GPU:
            raise ValueError(f"gpu milli {self.milli} is more than one GPU ({MILLI_PER_GPU})")
        if self.count > 1 and (self.milli < MILLI_PER_GPU or self.memory_mib):
            raise ValueError(
                f"a share of a GPU is for one device; got {self.count} devices of "
                f"{self.milli} milli"
            )
        if self.count and not (self.milli or self.memory_mib):
            raise ValueError("a GPU request needs milli-GPU or GPU memory per device")
        if (self.mig_profile is None) != (self.mig_count == 0):
            raise ValueError("a MIG request needs both a profile and a count")
        if self.mig_profile is not None and self.count:
            raise ValueError("a pod asks for MIG slices or for GPUs, not both")
        if self.resource not in GPU_RESOURCES:
            raise ValueError(f"GPU resource must be one of {', '.join(GPU_RESOURCES)}")
        if self.units == -1:
            object.__setattr__(self, "units", 0 if self.is_shared else self.count)
        elif self.is_shared:
            if self.units not in (0, 1):
                raise ValueError(f"a share of one GPU counts 0 or 1 unit, got {self.units}")
        elif self.units != self.count:
            raise ValueError(f"{self.count} whole GPUs count {self.count} units, got {self.units}")

    @classmethod
    def whole(cls, count: int, resource: str = GPU_RESOURCE) -> GpuRequest:
        return cls(count=count, milli=MILLI_PER_GPU if count else 0, resource=resource)

    @classmethod
    def share(
        cls, milli: int = 0, memory_mib: int = 0, units: int = 0, resource: str = GPU_RESOURCE
    ) -> GpuRequest:
        """A share of one GPU; ``units=1`` when it also asks ``nvidia.com/gpu: 1``."""
        return cls(count=1, milli=milli, memory_mib=memory_mib, units=units, resource=resource)

    @classmethod
    def mig(cls, profile: str, count: int = 1) -> GpuRequest:
        return cls(mig_profile=profile, mig_count=count)

    @property
    def is_shared(self) -> bool:
        return self.count == 1 and (self.milli < MILLI_PER_GPU or self.memory_mib > 0)

    @property
    def total_milli(self) -> int:
        """Milli-GPU asked for in all, before placement: what a pod holds once placed depends
        on its node (:func:`gpufleet.model.sharing.milli_per_device`), and memory-only shares
        count 0 here."""
        return self.count * self.milli


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str | None = None
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: TaintEffect | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' matching rule: no effect matches every effect; ``Exists`` without a
        key tolerates every taint."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return self.key is None or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the scheduler sees it. Equal pods with different names share a signature.

    The signature leaves out the namespace and labels of a pod without ``rules``: other pods'
    anti-affinity may still tell two such pods apart, which the placement engine checks per
    pod (see ``scheduling/interpod``), not per signature.
    """

    name: str
    namespace: str = "default"
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu: GpuRequest = GpuRequest()
    gpu_models: frozenset[str] | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    required_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: Extended resources other than NVIDIA GPUs, (name, whole units) sorted by name.
    extended: tuple[tuple[str, int], ...] = ()
    #: Pod affinity / anti-affinity, topology spread, preferred node affinity (None: none).
    rules: PlacementRules | None = None
    #: ``spec.schedulingGates`` by name: while any is left the pod is not placed (nor is its
    #: gang); not part of the signature (a gated pod is never tried).
    scheduling_gates: tuple[str, ...] = ()
    #: ``spec.resourceClaims``: the DRA claims it uses, by name or made from a template.
    resource_claims: tuple[PodResourceClaim, ...] = ()

    #: ``namespace/name`` and the scheduling signature, computed once: both are hot.
    key: str = field(init=False, repr=False, hash=False, compare=False)
    #: Everything that decides where this pod may go and how it scores; not its name.
    signature: tuple[object, ...] = field(init=False, repr=False, hash=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")
        signature: tuple[object, ...] = (
            self.cpu_milli,
            self.memory_mib,
            self.gpu,
            self.gpu_models,
            self.node_selector,
            self.required_affinity,
            self.tolerations,
        )
        if self.extended:
            signature = (*signature, self.extended)
        if self.resource_claims:
            # A claim by name is shared: pods naming it are not alike to pods naming another.
            signature = (*signature, self.resource_claims)
        if self.rules is not None:
            # Its own namespace and labels decide whether it counts for its own spread and
            # affinity terms, so pods with rules share answers only with identical pods.
            signature = (*signature, self.rules, self.namespace, frozenset(self.labels.items()))
        object.__setattr__(self, "signature", signature)

    def renamed(self, name: str) -> Pod:
        """This pod under another name: a replica read from its template's reading. The same
        as ``dataclasses.replace(self, name=name)``, at a third of the cost (a scheduler's
        start renames thousands)."""
        clone = object.__new__(Pod)
        for slot in _POD_SLOTS:
            object.__setattr__(clone, slot, getattr(self, slot))
        object.__setattr__(clone, "name", name)
        object.__setattr__(clone, "key", f"{self.namespace}/{name}")
        return clone

    @property
    def pod_class(self) -> PodClass:
        if self.gpu.mig_profile is not None:
            return PodClass.MIG
        if self.gpu.count == 0:
            return PodClass.CPU_ONLY
        if self.gpu.is_shared:
            return PodClass.SHARED
        return PodClass.ONE_GPU if self.gpu.count == 1 else PodClass.MULTI_GPU


#: Every field of a Pod, those computed from others included (its signature has no name).
_POD_SLOTS: tuple[str, ...] = Pod.__slots__
