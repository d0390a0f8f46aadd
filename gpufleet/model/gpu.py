"""GPU devices and MIG slices.

A GPU is counted in milli-GPU (1000 = one whole device). A device may be partitioned into MIG
slices, as the NVIDIA device plugin's *mixed* strategy advertises them
(``nvidia.com/mig-1g.10gb``, ``nvidia.com/mig-3g.40gb``, ...); a partitioned device is then only
usable through its slices, never whole or shared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MILLI_PER_GPU = 1000
#: Compute slices of one MIG-capable GPU (A100, H100, H200, B200 all have seven).
MIG_COMPUTE_SLICES = 7

_MIG_PROFILE = re.compile(r"^(?P<g>[1-7])g\.(?P<mem>\d+)gb(?:\+me)?$")


#: Prefixes of GPU product names that name no model (GPU Feature Discovery writes
#: ``NVIDIA-H100-80GB-HBM3`` and ``Tesla-T4``; nvidia-smi ``NVIDIA A100-SXM4-40GB``).
_VENDOR_PREFIXES = ("nvidia-", "tesla-", "geforce-", "quadro-")


def canonical_model(name: str) -> str:
    """A GPU model or product name as :func:`model_matches` compares it: lower case, ``-`` for
    spaces and underscores, vendor prefixes dropped (``NVIDIA-H100-80GB-HBM3`` ->
    ``h100-80gb-hbm3``)."""
    text = re.sub(r"[\s_]+", "-", name.strip().lower())
    changed = True
    while changed:
        changed = False
        for prefix in _VENDOR_PREFIXES:
            if text.startswith(prefix) and len(text) > len(prefix):
                text = text[len(prefix) :]
                changed = True
    return text


def model_matches(name: str, product: str) -> bool:
    """Does the short model ``name`` a user writes (``H100``, ``A100-80GB``, ``T4``) cover the
    GPU ``product`` a node reports (``NVIDIA-H100-80GB-HBM3``, ``NVIDIA-A100-SXM4-80GB``,
    ``Tesla-T4``)? Case-insensitively, once vendor prefixes are dropped: the product is the name
    or starts with it followed by ``-`` (so ``A10`` does not cover ``A100-SXM4-40GB``, and
    ``A100-80GB`` does not cover ``A100-SXM4-80GB``: name the variant as the product does)."""
    short, full = canonical_model(name), canonical_model(product)
    return full == short or full.startswith(short + "-")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG profile name such as ``3g.40gb``: compute slices and memory."""

    name: str
    compute_slices: int
    memory_gb: int


def parse_mig_profile(name: str) -> MigProfile:
    """Parse ``1g.10gb`` (or ``nvidia.com/mig-1g.10gb``) into a :class:`MigProfile`."""
    bare = name.removeprefix("nvidia.com/mig-")
    match = _MIG_PROFILE.match(bare)
    if match is None:
        raise ValueError(f"not a MIG profile: {name!r} (expected e.g. '1g.10gb' or '3g.40gb')")
    return MigProfile(bare, int(match["g"]), int(match["mem"]))


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One MIG instance on a GPU: its profile and its slot on that device."""

    profile: str
    slot: int


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU of a node. ``mig_slices`` non-empty means the device is MIG-partitioned."""

    index: int
    model: str
    memory_mib: int
    mig_slices: tuple[MigSlice, ...] = ()

    @property
    def partitioned(self) -> bool:
        return bool(self.mig_slices)
