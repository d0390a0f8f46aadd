"""The Node labels GPU Feature Discovery publishes, computed from a discovered inventory.

Owns :func:`gfd_node_labels`: the ``nvidia.com/...`` labels with GFD's names and value formats
(read from k8s-device-plugin's ``internal/lm``: the version, MIG-capability, sharing, resource
and IMEX labelers), plus gpufleet's ``gpufleet.dev/nvlink-domain``. It does not write labels on
a Node (the agent does) nor read NVML.

What GFD emits and this leaves out, because the inventory cannot know it: ``gfd.timestamp``
(changes every run), ``gpu.machine`` (DMI product name), ``gpu.mode`` (PCI class), and the MIG
attribute labels (``mig-<profile>.memory``, ``.multiprocessors``, ``.slices.*``,
``.engines.*``). Where model/node.py's :func:`~gpufleet.model.node.gfd_labels` overlaps
(product, memory, count, mig.capable, mig.strategy, replicas, sharing-strategy) the values are
the same; GFD always writes ``gpu.replicas`` and ``gpu.sharing-strategy`` (``1`` and ``none``
without sharing) and so does this.

``gpufleet.dev/nvlink-domain`` (read by topology placement, :mod:`gpufleet.scheduling.topology`:
nodes with the same value form one domain) is:

* the fabric's ``<cluster UUID>.<clique id>`` when NVML reports a multi-node NVLink fabric
  (GB200 NVL72: every node of one NVLink rack shares it; GFD's ``nvidia.com/gpu.clique``);
* else the node name when some of its GPUs have NVLink peers (NVLink then ends at the node);
* else no label (PCIe only: the node is in no NVLink domain).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter

from gpufleet.devices.discovery import Fabric
from gpufleet.devices.mig import MIG_CAPABLE_COMPUTE, mig_resource_suffix
from gpufleet.model.gpu import NO_SHARING, GpuSharing, SharingStrategy
from gpufleet.model.inventory import InventoryDevice, NodeInventory
from gpufleet.model.node import GFD_LABELS, SHARED_PRODUCT_SUFFIX

GPU_RESOURCE_PREFIX = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")

#: GFD's architecture families by CUDA compute capability (``getArchFamily``).
_FAMILIES = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}


def gpu_family(major: int, minor: int) -> str:
    """GFD's ``nvidia.com/gpu.family`` for a compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    if major in (10, 12):
        return "blackwell"
    if major == 13:
        return "rubin"
    return _FAMILIES.get(major, "undefined")


def nvlink_domain(inventory: NodeInventory, node_name: str, fabric: Fabric | None) -> str | None:
    """The ``gpufleet.dev/nvlink-domain`` value (see the module docstring), None for none."""
    if fabric is not None:
        return fabric.clique
    if not any(d.nvlink_peers for d in inventory.devices):
        return None
    if _LABEL_VALUE.match(node_name):
        return node_name
    # A node name may be longer than a label value allows: keep it recognisable and unique.
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", node_name)[:50].strip("-_.") or "node"
    return f"{stem}-{digest}"


def _version_labels(inventory: NodeInventory) -> dict[str, str]:
    parts = inventory.driver_version.split(".")
    if not 2 <= len(parts) <= 3:
        raise ValueError(
            f"driver version {inventory.driver_version!r} does not match X.Y[.Z] (GFD's form)"
        )
    major, minor, rev = parts[0], parts[1], parts[2] if len(parts) == 3 else ""
    cuda_major, _, cuda_minor = inventory.cuda_driver_version.partition(".")
    return {
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime.major": cuda_major,
        "nvidia.com/cuda.runtime.minor": cuda_minor,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": inventory.driver_version,
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
    }


def _resource_labels(
    prefix: str, product: str, count: int, sharing: GpuSharing | None
) -> dict[str, str]:
    """GFD's ``baseLabeler``: product, count, replicas, sharing-strategy of one resource.
    ``sharing=None`` is GFD's sharing-disabled labeler (MIG-enabled GPUs): replicas 0."""
    replicas = 0 if sharing is None else sharing.replicas
    shared = sharing is not None and sharing.time_sliced and sharing.replicas > 1
    strategy = sharing.strategy.value if shared and sharing else SharingStrategy.NONE.value
    renamed = sharing is not None and sharing.resource != prefix
    return {
        f"{prefix}.product": product + (SHARED_PRODUCT_SUFFIX if shared and not renamed else ""),
        f"{prefix}.count": str(count),
        f"{prefix}.replicas": str(replicas),
        f"{prefix}.sharing-strategy": strategy,
    }


def _gpu_labels(devices: tuple[InventoryDevice, ...], sharing: GpuSharing) -> dict[str, str]:
    """The ``nvidia.com/gpu.*`` labels of the node's (most common) product."""
    product = Counter(d.product for d in devices).most_common(1)[0][0]
    same = [d for d in devices if d.product == product]
    whole = [d for d in same if not d.mig_enabled]
    labels = _resource_labels(GPU_RESOURCE_PREFIX, product, len(same), sharing if whole else None)
    memory = min((d.memory_mib for d in same if d.memory_mib), default=0)
    if memory:
        labels[GFD_LABELS.MEMORY] = str(memory)
    first = same[0]
    if first.compute_major:
        labels["nvidia.com/gpu.family"] = gpu_family(first.compute_major, first.compute_minor)
        labels["nvidia.com/gpu.compute.major"] = str(first.compute_major)
        labels["nvidia.com/gpu.compute.minor"] = str(first.compute_minor)
    return labels


def _mig_labels(devices: tuple[InventoryDevice, ...]) -> dict[str, str]:
    """mig.strategy=mixed: per profile, ``nvidia.com/mig-<profile>.*``."""
    labels = {GFD_LABELS.MIG_STRATEGY: "mixed"}
    counts: Counter[tuple[str, str]] = Counter(
        (d.product, mig_resource_suffix(m.profile)) for d in devices for m in d.mig
    )
    for (product, profile), count in sorted(counts.items()):
        labels.update(
            _resource_labels(
                f"{MIG_RESOURCE_PREFIX}{profile}", f"{product}-MIG-{profile}", count, NO_SHARING
            )
        )
    return labels


def gfd_node_labels(
    inventory: NodeInventory,
    *,
    node_name: str,
    sharing: GpuSharing = NO_SHARING,
    fabric: Fabric | None = None,
) -> dict[str, str]:
    """GFD's labels for this node (mig.strategy ``mixed`` when a GPU is in MIG mode, as
    gpufleet serves MIG slices per profile), and the NVLink-domain label."""
    devices = inventory.devices
    if not devices:
        return {}
    labels = _version_labels(inventory)
    labels.update(_gpu_labels(devices, sharing))
    mig_capable = any(
        d.mig_enabled or (d.compute_major, d.compute_minor) in MIG_CAPABLE_COMPUTE for d in devices
    )
    labels[GFD_LABELS.MIG_CAPABLE] = str(mig_capable).lower()
    if any(d.mig_enabled for d in devices):
        labels.update(_mig_labels(devices))
    mps = sharing.strategy is SharingStrategy.MPS and not any(d.mig_enabled for d in devices)
    labels["nvidia.com/mps.capable"] = str(mps).lower()
    if fabric is not None:
        labels[CLIQUE_LABEL] = fabric.clique
    domain = nvlink_domain(inventory, node_name, fabric)
    if domain is not None:
        labels[GFD_LABELS.NVLINK_DOMAIN] = domain
    return labels
