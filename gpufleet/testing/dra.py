"""Builders of Dynamic Resource Allocation objects for tests and benchmarks: model values
(:func:`make_gpu`, :func:`make_mig`, :func:`exact`, :func:`make_claim`) and the
``resource.k8s.io/v1`` manifests users write (:func:`device_class_doc`,
:func:`claim_template_doc`, :func:`resource_claim_doc`, :func:`resource_slice_doc`,
:func:`claim_pod_doc`), shaped as NVIDIA's DRA driver publishes GPUs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from gpufleet.model.dra import (
    NVIDIA_GPU_DRIVER,
    PCIE_ROOT_ATTRIBUTE,
    RESOURCE_API_VERSION,
    AllocationMode,
    AttributeValue,
    CelSelector,
    ClaimSpec,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceTaint,
    DeviceToleration,
    ExactRequest,
    MatchAttribute,
)

GIB = 1 << 30
#: The class every GPU of NVIDIA's driver is in (a selector on the driver).
GPU_CLASS = DeviceClass(
    NVIDIA_GPU_DRIVER, (CelSelector(f'device.driver == "{NVIDIA_GPU_DRIVER}"'),)
)

Obj = dict[str, Any]


def make_gpu(
    index: int,
    pool: str = "node-a",
    product: str = "NVIDIA H100 80GB HBM3",
    memory_gib: int = 80,
    pcie_root: str | None = None,
    taints: Iterable[DeviceTaint] = (),
    extra: Mapping[str, AttributeValue] | None = None,
    counter_set: str | None = None,
) -> Device:
    """GPU ``index`` of a node, as NVIDIA's driver lists it; ``pcie_root`` defaults to one root
    per pair of GPUs; ``counter_set`` makes it the whole-GPU device of a partitionable GPU."""
    root = pcie_root if pcie_root is not None else f"pci0000:{index // 2:02x}"
    attributes: dict[str, AttributeValue] = {
        f"{NVIDIA_GPU_DRIVER}/type": "gpu",
        f"{NVIDIA_GPU_DRIVER}/index": index,
        f"{NVIDIA_GPU_DRIVER}/productName": product,
        f"{NVIDIA_GPU_DRIVER}/uuid": f"GPU-{pool}-{index}",
        PCIE_ROOT_ATTRIBUTE: root,
        **(extra or {}),
    }
    consumes: tuple[CounterConsumption, ...] = ()
    if counter_set is not None:
        whole = (("memory", Fraction(memory_gib)), ("slices", Fraction(7)))
        consumes = (CounterConsumption(counter_set, whole),)
    return Device(
        f"gpu-{index}",
        NVIDIA_GPU_DRIVER,
        pool,
        attributes,
        {f"{NVIDIA_GPU_DRIVER}/memory": Fraction(memory_gib * GIB)},
        tuple(taints),
        consumes,
    )


def gpu_counters(name: str, memory_gib: int = 80) -> CounterSet:
    """The counters of one partitionable GPU: its memory (GiB) and its 7 compute slices."""
    return CounterSet(name, (("memory", Fraction(memory_gib)), ("slices", Fraction(7))))


def make_mig(
    gpu: int, profile: str, slot: int, pool: str = "node-a", counter_set: str | None = None
) -> Device:
    """A MIG device (``1g.10gb``...) of GPU ``gpu``, taking its slices and memory from the
    GPU's counter set (``gpu-<gpu>-counters`` unless told)."""
    compute, memory = profile.split("g.")
    memory_gib = int(memory.removesuffix("gb"))
    return Device(
        f"gpu-{gpu}-mig-{profile}-{slot}",
        NVIDIA_GPU_DRIVER,
        pool,
        {
            f"{NVIDIA_GPU_DRIVER}/type": "mig",
            f"{NVIDIA_GPU_DRIVER}/profile": profile,
            f"{NVIDIA_GPU_DRIVER}/parentIndex": gpu,
            PCIE_ROOT_ATTRIBUTE: f"pci0000:{gpu // 2:02x}",
        },
        {f"{NVIDIA_GPU_DRIVER}/memory": Fraction(memory_gib * GIB)},
        consumes_counters=(
            CounterConsumption(
                counter_set or f"gpu-{gpu}-counters",
                (("memory", Fraction(memory_gib)), ("slices", Fraction(int(compute)))),
            ),
        ),
    )


def exact(
    count: int = 1,
    *selectors: str,
    device_class: str = NVIDIA_GPU_DRIVER,
    mode: AllocationMode = AllocationMode.EXACT_COUNT,
    tolerations: Iterable[DeviceToleration] = (),
    admin_access: bool = False,
) -> ExactRequest:
    return ExactRequest(
        device_class,
        tuple(CelSelector(expression) for expression in selectors),
        mode,
        count,
        admin_access,
        tuple(tolerations),
    )


def make_claim(
    *requests: tuple[str, ExactRequest | Sequence[tuple[str, ExactRequest]]],
    match: Iterable[str | tuple[str, Sequence[str]]] = (),
) -> ClaimSpec:
    """A claim's spec: ``(name, exact)`` requests, or ``(name, [(sub, exact), ...])`` for
    firstAvailable; ``match`` the matchAttribute constraints (an attribute for all requests,
    or ``(attribute, requests)``)."""
    built = tuple(
        DeviceRequest(name, exactly=spec)
        if isinstance(spec, ExactRequest)
        else DeviceRequest(name, first_available=tuple(spec))
        for name, spec in requests
    )
    constraints = tuple(
        MatchAttribute(item) if isinstance(item, str) else MatchAttribute(item[0], tuple(item[1]))
        for item in match
    )
    return ClaimSpec(built, constraints)


# ------------------------------------------------------------------------------- manifests
def device_class_doc(name: str = NVIDIA_GPU_DRIVER, *expressions: str) -> Obj:
    selectors = [{"cel": {"expression": e}} for e in expressions or (f'device.driver == "{name}"',)]
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": selectors},
    }


def request_doc(
    name: str = "gpus", count: int = 1, *expressions: str, device_class: str = NVIDIA_GPU_DRIVER
) -> Obj:
    exactly: Obj = {"deviceClassName": device_class, "count": count}
    if expressions:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    return {"name": name, "exactly": exactly}


def claim_template_doc(name: str, *requests: Obj, namespace: str = "default") -> Obj:
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": list(requests) or [request_doc()]}}},
    }


def resource_claim_doc(name: str, *requests: Obj, namespace: str = "default") -> Obj:
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": list(requests) or [request_doc()]}},
    }


def gpu_device_doc(index: int, product: str = "NVIDIA H100 80GB HBM3", memory: str = "80Gi") -> Obj:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "index": {"int": index},
            "productName": {"string": product},
            "driverVersion": {"version": "550.54.15"},
            PCIE_ROOT_ATTRIBUTE: {"string": f"pci0000:{index // 2:02x}"},
        },
        "capacity": {"memory": {"value": memory}},
    }


def resource_slice_doc(node: str, gpus: int = 8, devices: Sequence[Obj] | None = None) -> Obj:
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{NVIDIA_GPU_DRIVER}"},
        "spec": {
            "driver": NVIDIA_GPU_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices) if devices is not None else [
                gpu_device_doc(i) for i in range(gpus)
            ],
        },
    }  # fmt: skip


def claim_pod_doc(
    name: str, claim: str | None = None, template: str | None = None, namespace: str = "default"
) -> Obj:
    """A pod using one claim (by name) or one made from a template, as ``gpus``."""
    entry: Obj = {"name": "gpus"}
    if claim is not None:
        entry["resourceClaimName"] = claim
    if template is not None:
        entry["resourceClaimTemplateName"] = template
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceClaims": [entry],
            "containers": [
                {"name": "main", "image": "trainer", "resources": {"claims": [{"name": "gpus"}]}}
            ],
        },
    }
