"""Builders for the node agent's tests: a node's GPU inventory and the pods bound to it.

One-liners for :class:`~gpufleet.model.inventory.NodeInventory` (UUIDs that say which device
they are: ``GPU-00000002-...`` is device 2, ``MIG-00000002-01-...`` its slot 1) and for
:class:`~gpufleet.agent.bound_pods.BoundPod` carrying the binding annotations gpufleet's
scheduler writes, signed with :data:`TEST_BINDING_KEY` for node :data:`TEST_NODE` as the
scheduler signs them (unsigned, forged or another scheduler's when a test asks).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gpufleet.agent.bound_pods import BoundContainer, BoundPod
from gpufleet.io.kube.annotations import (
    GPU_INDEX_ANNOTATION,
    GPU_SHARE_ANNOTATION,
    MIG_SLICES_ANNOTATION,
)
from gpufleet.io.kube.binding_signature import BindingKey, signed_binding
from gpufleet.model.gpu import GPU_RESOURCE, parse_mig_profile
from gpufleet.model.inventory import InventoryDevice, MigInstance, NodeInventory

_order = itertools.count(1)

#: The binding key of the tests (never a real cluster's).
TEST_BINDING_KEY = BindingKey(b"gpufleet-tests-only-binding-key-0123456789abcdef")
#: The node the agents of the tests run on.
TEST_NODE = "gpu-1"
#: The scheduler name the tests' gpufleet pods carry.
GPUFLEET_SCHEDULER = "gpufleet"


def write_binding_key(path: Path, key: BindingKey = TEST_BINDING_KEY) -> Path:
    """``key`` in a file at ``path``, as a mounted Secret holds it; ``path`` back."""
    path.write_bytes(key.secret + b"\n")
    path.chmod(0o600)
    return path


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08d}-1111-2222-3333-444444444444"


def mig_uuid(index: int, slot: int) -> str:
    return f"MIG-{index:08d}-{slot:02d}11-2222-3333-444444444444"


def gpu_inventory(
    count: int = 4,
    *,
    mig: Mapping[int, Sequence[str]] | None = None,
    unhealthy: Iterable[int] = (),
    memory_mib: int = 81559,
    product: str = "NVIDIA H100 80GB HBM3",
) -> NodeInventory:
    """``count`` GPUs; ``mig`` gives the MIG layout (profiles in slot order) of some of them."""
    layouts = dict(mig or {})
    sick = set(unhealthy)
    devices = []
    for index in range(count):
        instances: list[MigInstance] = []
        start = 0
        for slot, profile in enumerate(layouts.get(index, ())):
            size = parse_mig_profile(profile).compute_slices
            instances.append(
                MigInstance(profile, mig_uuid(index, slot), slot, slot + 1, 0, start, size)
            )
            start += size
        devices.append(
            InventoryDevice(
                index,
                gpu_uuid(index),
                product,
                memory_mib,
                9,
                0,
                f"00000000:{index + 0x10:02X}:00.0",
                mig_enabled=index in layouts,
                mig=tuple(instances),
                healthy=index not in sick,
                reason="XID 79: GPU has fallen off the bus" if index in sick else "",
            )
        )
    return NodeInventory(tuple(devices), "550.54.15", "12.4")


def bound_pod(
    name: str,
    *,
    resource: str = GPU_RESOURCE,
    units: int | Sequence[int] = 1,
    gpu_index: Sequence[int] = (),
    milli: int | None = None,
    mig_slices: Sequence[tuple[int, int]] = (),
    init_units: int = 0,
    namespace: str = "ml",
    bind_order: float | None = None,
    scheduler_name: str = GPUFLEET_SCHEDULER,
    signed_with: BindingKey | None = TEST_BINDING_KEY,
    node: str = TEST_NODE,
    extra_annotations: Mapping[str, str] | None = None,
) -> BoundPod:
    """A pod bound with gpufleet's annotations; ``units`` per app container (one container
    per entry), and an init container asking ``init_units`` when given. The binding is signed
    with ``signed_with`` for ``node`` (None: unsigned); ``extra_annotations`` are written after
    signing (a forger's changes)."""
    per_container = [units] if isinstance(units, int) else list(units)
    containers = [
        BoundContainer(f"c{i}", {resource: n} if n else {}) for i, n in enumerate(per_container)
    ]
    if init_units:
        containers.insert(0, BoundContainer("init", {resource: init_units}, init=True))
    annotations: dict[str, str] = {}
    if gpu_index:
        annotations[GPU_INDEX_ANNOTATION] = ",".join(map(str, gpu_index))
    if milli is not None:
        annotations[GPU_SHARE_ANNOTATION] = str(milli)
    if mig_slices:
        annotations[MIG_SLICES_ANNOTATION] = ",".join(f"{g}:{s}" for g, s in mig_slices)
    uid = f"uid-{namespace}-{name}"
    if signed_with is not None:
        annotations = signed_binding(signed_with, uid, node, annotations)
    annotations.update(extra_annotations or {})
    return BoundPod(
        namespace,
        name,
        uid,
        tuple(containers),
        annotations,
        next(_order) if bind_order is None else bind_order,
        scheduler_name=scheduler_name,
    )
