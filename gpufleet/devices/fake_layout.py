"""A fake node's static hardware, resolved from its description: what never changes at run time.

Owns turning a :class:`~gpufleet.devices.fake_spec.FakeSpec` into concrete devices: stable
UUIDs (from the node name and index), PCI bus ids, NVLink links (direct or through NVSwitches),
MIG instances with the NVML profile indices, profile ids, memory and placement a real driver
reports for them, and each device's usage timeline evaluated at a time. It raises
:class:`~gpufleet.devices.fake_spec.FakeSpecError` (file and field) for layouts a driver would
refuse: overlapping placements, duplicate instance ids. It does not answer NVML calls
(:mod:`gpufleet.devices.fake` does).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pynvml

from gpufleet.devices.fake_spec import (
    DEFAULT_BUS_IDS,
    DeviceSpec,
    FakeSpec,
    FakeSpecError,
    UsagePoint,
)
from gpufleet.devices.mig import (
    COMPUTE_INSTANCE_PROFILES,
    GPU_INSTANCE_PROFILES,
    MIG_CAPABLE_COMPUTE,
    device_memory_gb,
    parse_mig_profile,
)

_NAMESPACE = uuid.UUID("6f1f4c3e-8a53-4b7e-9a1e-2f0a6c1d9b11")
#: NVLinks per GPU by compute capability major (V100 6, A100 12, H100 and later 18).
_LINKS_PER_GPU = {7: 6, 8: 12}
_LINKS_DEFAULT = 18
#: An H100 reaches its NVSwitches over 18 links spread across four switches.
NVSWITCH_BUS_IDS = tuple(f"00000000:{b:02X}:00.0" for b in (0x05, 0x06, 0x07, 0x08))
#: GPU instance profile ids as an H100 80GB reports them, by profile index; other indices get
#: 32 + index (ids differ from indices on real drivers: discovery must map one to the other).
_GPU_PROFILE_IDS = {0: 19, 1: 14, 2: 9, 3: 5, 4: 0, 7: 20, 8: 21, 9: 15}
MIG_MEMORY_SLICES = 8


def gpu_profile_id(index: int) -> int:
    return _GPU_PROFILE_IDS.get(index, 32 + index)


def compute_profile_id(index: int) -> int:
    return index


@dataclass(frozen=True, slots=True)
class FakeMigInstance:
    profile: str
    uuid: str
    gpu_profile_index: int
    compute_profile_index: int
    gpu_instance_id: int
    compute_instance_id: int
    placement_start: int
    placement_size: int
    memory_mib: int
    gpu_slices: int
    compute_slices: int
    fb_used_mib: int


@dataclass(frozen=True, slots=True)
class FakeLink:
    remote_bus_id: str
    remote_is_switch: bool


@dataclass(frozen=True, slots=True)
class Usage:
    gpu_util: float = 0.0
    mem_copy_util: float = 0.0
    fb_used_mib: int = 0
    temperature_c: float = 35.0
    power_w: float = 75.0
    sm_clock_mhz: int = 1980


@dataclass(frozen=True, slots=True)
class FakeGpu:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_mib: int
    compute: tuple[int, int]
    mig_capable: bool
    mig_enabled: bool
    mig: tuple[FakeMigInstance, ...]
    links: tuple[FakeLink, ...]
    fabric: tuple[bytes, int] | None
    timeline: tuple[UsagePoint, ...]

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib << 20

    def usage(self, now: float) -> Usage:
        """The usage at ``now``: each point holds until the next, fields carried forward."""
        values = Usage()
        for point in self.timeline:
            if point.at > now:
                break
            given = {k: v for k, v in point.model_dump(exclude={"at"}).items() if v is not None}
            values = Usage(**{**_as_dict(values), **given})
        return values


def _as_dict(usage: Usage) -> dict[str, float | int]:
    return {f: getattr(usage, f) for f in Usage.__slots__}


def _gpu_profile_index(slices: int, attrs: tuple[str, ...], neg: tuple[str, ...], k: int) -> int:
    matches = [
        index
        for index, (g, a, n) in GPU_INSTANCE_PROFILES.items()
        if (g, a, n) == (slices, attrs, neg)
    ]
    if not matches:
        raise ValueError("no GPU instance profile has these slices and attributes")
    if pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 in matches and k > 1:
        return int(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
    return min(matches)


def _mig_instances(
    node: str, gpu: int, spec: DeviceSpec, where: str
) -> tuple[FakeMigInstance, ...]:
    if spec.mig is None or not spec.mig.enabled:
        return ()
    total_bytes = spec.total_memory_mib << 20
    total_gb = device_memory_gb(total_bytes)
    instances: list[FakeMigInstance] = []
    used: set[int] = set()
    next_start = 0
    for k, item in enumerate(spec.mig.instances):
        field = f"{where}.mig.instances[{k}]"
        profile = parse_mig_profile(item.profile)
        eighths = round(profile.memory_gb * MIG_MEMORY_SLICES / total_gb)
        start = next_start if item.placement_start is None else item.placement_start
        slots = set(range(start, start + eighths))
        if start + eighths > MIG_MEMORY_SLICES or slots & used:
            raise FakeSpecError(
                f"{field}.placement_start: {item.profile} at {start} overlaps another "
                f"instance or runs past slice {MIG_MEMORY_SLICES}"
            )
        used |= slots
        next_start = max(next_start, start + eighths)
        try:
            gi_index = _gpu_profile_index(
                profile.gpu_slices, profile.attributes, profile.negated_attributes, eighths
            )
            ci_index = min(
                i for i, c in COMPUTE_INSTANCE_PROFILES.items() if c == profile.compute_slices
            )
        except ValueError as error:
            raise FakeSpecError(f"{field}.profile: {item.profile}: {error}") from None
        gi_id = item.gpu_instance_id if item.gpu_instance_id is not None else k + 1
        if any(i.gpu_instance_id == gi_id for i in instances):
            raise FakeSpecError(f"{field}.gpu_instance_id: {gi_id} is used twice")
        mig_uuid = item.uuid or f"MIG-{uuid.uuid5(_NAMESPACE, f'{node}/{gpu}/mig/{gi_id}')}"
        instances.append(
            FakeMigInstance(
                profile=item.profile,
                uuid=mig_uuid,
                gpu_profile_index=gi_index,
                compute_profile_index=ci_index,
                gpu_instance_id=gi_id,
                compute_instance_id=item.compute_instance_id,
                placement_start=start,
                placement_size=eighths,
                # Just under ``eighths`` eighths: the driver reports a little less than a
                # slice boundary, and the profile name rounds it up again.
                memory_mib=spec.total_memory_mib * eighths // MIG_MEMORY_SLICES - 64,
                gpu_slices=profile.gpu_slices,
                compute_slices=profile.compute_slices,
                fb_used_mib=item.fb_used_mib,
            )
        )
    return tuple(instances)


def build_gpus(spec: FakeSpec, source: str = "<fake gpus>") -> tuple[FakeGpu, ...]:
    """Every GPU of the description, by index; FakeSpecError naming the field."""
    entries = [(n, d) for n, d in enumerate(spec.devices) for _ in range(d.count)]
    bus_ids = [
        d.pci_bus_id.upper() if d.pci_bus_id else f"{i // 8:08X}:{DEFAULT_BUS_IDS[i % 8]:02X}:00.0"
        for i, (_, d) in enumerate(entries)
    ]
    direct: dict[int, set[int]] = {i: set() for i in range(len(entries))}
    for i, (_, d) in enumerate(entries):
        for peer in d.nvlink_peers:
            if peer != i:
                direct[i].add(peer)
                direct[peer].add(i)
    gpus: list[FakeGpu] = []
    for i, (n, d) in enumerate(entries):
        try:
            mig = _mig_instances(spec.node, i, d, f"devices[{n}]")
        except FakeSpecError as error:
            raise FakeSpecError(f"{source}: {error}") from None
        links = [FakeLink(bus_ids[p], remote_is_switch=False) for p in sorted(direct[i])]
        if spec.nvswitch:
            count = _LINKS_PER_GPU.get(d.compute[0], _LINKS_DEFAULT)
            links += [
                FakeLink(NVSWITCH_BUS_IDS[k % len(NVSWITCH_BUS_IDS)], remote_is_switch=True)
                for k in range(count)
            ]
        gpus.append(
            FakeGpu(
                index=i,
                name=d.product,
                uuid=d.uuid or f"GPU-{uuid.uuid5(_NAMESPACE, f'{spec.node}/{i}')}",
                pci_bus_id=bus_ids[i],
                memory_mib=d.total_memory_mib,
                compute=d.compute,
                mig_capable=d.compute in MIG_CAPABLE_COMPUTE,
                mig_enabled=d.mig is not None and d.mig.enabled,
                mig=mig,
                links=tuple(links),
                fabric=None
                if d.fabric is None
                else (d.fabric.cluster_uuid.bytes, d.fabric.clique_id),
                timeline=d.utilization,
            )
        )
    return tuple(gpus)
