"""What a pod asks for: its effective CPU, memory and GPU requests, from its containers.

Owns Kubernetes' rule for a pod's effective request (the larger of the sum over containers and
the largest init container, restartable "sidecar" init containers counted as Kubernetes counts
them, plus ``spec.overhead``), requests defaulting to limits, the extended-resource rules (set in
limits; requests, if given, equal limits; whole numbers), and the GPU request forms:
``nvidia.com/gpu`` (or ``nvidia.com/gpu.shared``, time-slicing's renamed resource), the
``gpufleet.dev/gpu-milli`` / ``gpufleet.dev/gpu-memory`` share annotations, HAMi-style
``nvidia.com/gpumem`` / ``nvidia.com/gpucores``, and MIG resources. The GPU resource's count is
what the kubelet counts (:attr:`~gpufleet.model.GpuRequest.units`): a share that asks
``nvidia.com/gpu: 1`` takes one unit, one given only by annotations none. A share may also ask
``gpufleet.dev/gpu-share: 1`` (:data:`~gpufleet.model.gpu.SHARE_RESOURCE`, the share slots
gpufleet's node agent advertises, so that the kubelet hands the pod to the agent): it is
counted as an extended resource, and only a share (the annotations above, or HAMi's resources)
may ask it, exactly one per pod.
Other extended resources (any ``domain/name`` outside ``kubernetes.io`` and ``nvidia.com``:
``rdma/hca``, ``amd.com/gpu``, ``example.com/foo``) are kept by name, in whole units, with the
same rules (:func:`is_extended_resource`; nodes advertise them in ``status.allocatable``).
It does not read names, labels, selectors or times (``kube.pods`` does), and it ignores
resources the model has no place for (ephemeral storage, hugepages).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.kube.mig_layout import MIG_RESOURCE_PREFIX
from gpufleet.io.manifests import Context
from gpufleet.io.quantities import (
    cpu_milli_from_fraction,
    memory_mib_from_fraction,
    parse_count,
    parse_memory_mib,
    parse_quantity,
)
from gpufleet.model import (
    GPU_RESOURCE,
    MILLI_PER_GPU,
    SHARE_RESOURCE,
    SHARED_GPU_RESOURCE,
    GpuRequest,
)
from gpufleet.model.gpu import parse_mig_profile

GPU = GPU_RESOURCE
SHARED_GPU = SHARED_GPU_RESOURCE
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"
GPU_MILLI_ANNOTATION = "gpufleet.dev/gpu-milli"
GPU_MEMORY_ANNOTATION = "gpufleet.dev/gpu-memory"
_NVIDIA = "nvidia.com/"
_SUPPORTED_NVIDIA = (
    f"{GPU}, {SHARED_GPU}, {MIG_RESOURCE_PREFIX}<profile>, {HAMI_MEMORY}, {HAMI_CORES}"
)


def is_extended_resource(name: str) -> bool:
    """Kubernetes' extended resources (``domain/name`` outside the ``kubernetes.io`` domains),
    less NVIDIA's, which gpufleet models as GPUs (or refuses, naming what it supports)."""
    domain, slash, _ = name.partition("/")
    return (
        bool(slash)
        and not name.startswith(("requests.", _NVIDIA))
        and domain != "kubernetes.io"
        and not domain.endswith(".kubernetes.io")
    )


@dataclass(frozen=True, slots=True)
class PodRequests:
    """A pod's effective requests in model units."""

    cpu_milli: int
    memory_mib: int
    gpu: GpuRequest
    #: Other extended resources: (name, whole units), sorted by name.
    extended: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Annotations:
    """Annotation values with the field path each came from (pod, template or owner)."""

    values: Mapping[str, str]
    paths: Mapping[str, str]

    def path(self, key: str) -> str:
        return self.paths.get(key, f"metadata.annotations[{key}]")


Amounts = dict[str, Fraction]


def pod_requests(
    context: Context, spec: Mapping[str, Any], spec_path: str, annotations: Annotations
) -> PodRequests:
    """Effective requests of a pod spec (``spec_path`` is where it sits in the object)."""
    origins: dict[str, str] = {}
    containers = context.sequence(spec.get("containers"), f"{spec_path}.containers")
    if not containers:
        raise context.error(
            f"{spec_path}.containers", "required: expected at least one container, got none"
        )
    total: Amounts = {}
    for i, container in enumerate(containers):
        _add(total, _container(context, container, f"{spec_path}.containers[{i}]", origins))
    sidecars: Amounts = {}
    largest_init: Amounts = {}
    init_containers = context.sequence(spec.get("initContainers"), f"{spec_path}.initContainers")
    for i, container in enumerate(init_containers):
        path = f"{spec_path}.initContainers[{i}]"
        amounts = _container(context, container, path, origins)
        if container.get("restartPolicy") == "Always":
            # A sidecar runs beside the app containers and beside every later init container.
            _add(total, amounts)
            _add(sidecars, amounts)
            amounts = dict(sidecars)
        else:
            _add(amounts, sidecars)
        for name, amount in amounts.items():
            largest_init[name] = max(largest_init.get(name, Fraction(0)), amount)
    for name, amount in largest_init.items():
        total[name] = max(total.get(name, Fraction(0)), amount)
    overhead = context.mapping(spec.get("overhead"), f"{spec_path}.overhead")
    for name in ("cpu", "memory"):
        if name in overhead:
            amount = _amount(context, overhead[name], f"{spec_path}.overhead[{name}]")
            total[name] = total.get(name, Fraction(0)) + amount
    if SHARE_RESOURCE in total:
        _check_share_slot(context, total, origins, annotations)
    return PodRequests(
        cpu_milli_from_fraction(total.get("cpu", Fraction(0))),
        memory_mib_from_fraction(total.get("memory", Fraction(0))),
        _gpu_request(context, total, origins, annotations),
        tuple(sorted((n, int(a)) for n, a in total.items() if is_extended_resource(n) and a)),
    )


def _check_share_slot(
    context: Context, total: Amounts, origins: Mapping[str, str], annotations: Annotations
) -> None:
    """A pod asking the node agent's share slots must be a share, asking exactly one."""
    where = origins[SHARE_RESOURCE]
    count = total[SHARE_RESOURCE]
    if count != 1:
        raise context.error(
            where,
            f"a GPU share takes one {SHARE_RESOURCE} slot: expected 1 for the pod (over its "
            f"containers), got {count}",
        )
    sized = (GPU_MILLI_ANNOTATION, GPU_MEMORY_ANNOTATION)
    if not any(key in annotations.values for key in sized) and not (
        HAMI_MEMORY in total or HAMI_CORES in total
    ):
        raise context.error(
            where,
            f"{SHARE_RESOURCE} is for GPU shares: expected the annotation {sized[0]} or "
            f"{sized[1]} (or {HAMI_MEMORY} / {HAMI_CORES}) to say the share's size",
        )


def _add(into: Amounts, amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _amount(context: Context, value: object, field: str) -> Fraction:
    amount = context.parse(parse_quantity, value, field)
    if amount < 0:
        raise context.error(field, f"must not be negative, got {quoted(value)}")
    return amount


def _container(context: Context, item: object, path: str, origins: dict[str, str]) -> Amounts:
    container = context.mapping(item, path)
    resources = context.mapping(container.get("resources"), f"{path}.resources")
    requests = context.mapping(resources.get("requests"), f"{path}.resources.requests")
    limits = context.mapping(resources.get("limits"), f"{path}.resources.limits")
    amounts: Amounts = {}
    for name in dict.fromkeys([*limits, *requests]):
        request_path = f"{path}.resources.requests[{name}]"
        limit_path = f"{path}.resources.limits[{name}]"
        if name in ("cpu", "memory"):
            limit = _amount(context, limits[name], limit_path) if name in limits else None
            request = _amount(context, requests[name], request_path) if name in requests else None
            if request is not None and limit is not None and request > limit:
                raise context.error(
                    request_path,
                    f"expected at most the limit ({limits[name]}), got {requests[name]}",
                )
            amount = request if request is not None else limit
        elif (
            name in (GPU, SHARED_GPU)
            or name in (HAMI_MEMORY, HAMI_CORES)
            or (name.startswith(MIG_RESOURCE_PREFIX))
        ):
            amount = Fraction(_extended(context, name, requests, limits, request_path, limit_path))
        elif name.startswith(_NVIDIA):
            field = limit_path if name in limits else request_path
            raise context.error(
                field, f"unsupported resource {quoted(name)} (supported: {_SUPPORTED_NVIDIA})"
            )
        elif is_extended_resource(name):
            amount = Fraction(_extended(context, name, requests, limits, request_path, limit_path))
        else:
            continue
        if amount:
            amounts[name] = amount
            origins.setdefault(name, limit_path if name in limits else request_path)
    return amounts


def _extended(
    context: Context,
    name: str,
    requests: Mapping[str, Any],
    limits: Mapping[str, Any],
    request_path: str,
    limit_path: str,
) -> int:
    if name.startswith(MIG_RESOURCE_PREFIX):
        context.parse(parse_mig_profile, name, limit_path if name in limits else request_path)
    if name not in limits:
        raise context.error(
            request_path,
            f"{name} must be set in limits (Kubernetes requires limits for extended resources, "
            "and requests, if given, equal to them); found it in requests only",
        )
    limit = context.parse(parse_count, limits[name], limit_path)
    if name in requests:
        request = context.parse(parse_count, requests[name], request_path)
        if request != limit:
            raise context.error(
                request_path,
                f"expected the same as limits[{name}] ({limit}), got {request} "
                "(extended resources cannot be overcommitted)",
            )
    return limit


def _annotation_int(
    context: Context, annotations: Annotations, key: str, low: int, high: int
) -> int | None:
    text = annotations.values.get(key)
    if text is None:
        return None
    value = text.strip()
    if not value.isdigit() or not low <= int(value) <= high:
        raise context.error(
            annotations.path(key),
            f"expected a whole number of milli-GPU from {low} to {high}, got {quoted(text)}",
        )
    return int(value)


def _gpu_request(
    context: Context, total: Amounts, origins: Mapping[str, str], annotations: Annotations
) -> GpuRequest:
    if GPU in total and SHARED_GPU in total:
        raise context.error(
            origins[SHARED_GPU], f"a pod asks for {GPU} or for {SHARED_GPU}, not both"
        )
    resource = SHARED_GPU if SHARED_GPU in total else GPU
    count = int(total.get(resource, 0))
    migs = sorted(name for name in total if name.startswith(MIG_RESOURCE_PREFIX))
    if len(migs) > 1:
        raise context.error(
            origins[migs[1]],
            f"a pod can use one MIG profile, got {' and '.join(migs)}",
        )
    milli = _annotation_int(context, annotations, GPU_MILLI_ANNOTATION, 1, MILLI_PER_GPU)
    memory = None
    if GPU_MEMORY_ANNOTATION in annotations.values:
        where = annotations.path(GPU_MEMORY_ANNOTATION)
        memory = context.parse(parse_memory_mib, annotations.values[GPU_MEMORY_ANNOTATION], where)
        if memory == 0:
            raise context.error(where, "expected GPU memory above 0 (e.g. 10Gi), got 0")
    for hami, annotation in (
        (HAMI_MEMORY, GPU_MEMORY_ANNOTATION),
        (HAMI_CORES, GPU_MILLI_ANNOTATION),
    ):
        if hami not in total:
            continue
        if count != 1:
            raise context.error(
                origins[hami],
                f"{hami} is a share of one GPU: expected {resource}: 1 beside it, got {count}",
            )
        if annotation in annotations.values:
            raise context.error(
                origins[hami], f"the GPU share is given twice: by {hami} and by {annotation}"
            )
    if HAMI_MEMORY in total:
        memory = int(total[HAMI_MEMORY])
    if HAMI_CORES in total:
        cores = int(total[HAMI_CORES])
        if cores > 100:
            raise context.error(origins[HAMI_CORES], f"expected a percent (1-100), got {cores}")
        milli = cores * MILLI_PER_GPU // 100

    if milli is not None or memory is not None:
        where = (
            origins.get(HAMI_CORES)
            or origins.get(HAMI_MEMORY)
            or annotations.path(
                GPU_MILLI_ANNOTATION if milli is not None else GPU_MEMORY_ANNOTATION
            )
        )
        if count > 1:
            raise context.error(
                where,
                f"a GPU share is part of one GPU: expected {resource} absent or 1, got {count}",
            )
        if migs:
            raise context.error(where, f"a GPU share cannot be combined with {migs[0]}")
        if milli == MILLI_PER_GPU and not memory:
            return GpuRequest.whole(1, resource)
        return GpuRequest.share(milli or 0, memory or 0, units=count, resource=resource)
    if migs and count:
        raise context.error(
            origins[migs[0]], f"a pod asks for MIG slices or for {resource}, not both"
        )
    if migs:
        return GpuRequest.mig(parse_mig_profile(migs[0]).name, int(total[migs[0]]))
    return GpuRequest.whole(count, resource)
