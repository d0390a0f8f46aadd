"""The YAML description of a fake node's GPUs (``gpufleet agent --fake-gpus FILE``).

Owns the schema (pydantic) and its loading: every error names the file and the field
(``fake-gpus.yaml: devices[2].mig.instances[0].profile: ...``) and nothing is half-loaded.
The fake NVML that plays the description back is :mod:`gpufleet.devices.fake`.

Shape (every field but ``devices[].product`` has a default)::

    node: gpu-node-1                 # seeds default UUIDs: stable per node name and index
    driver_version: "550.54.15"
    cuda_driver_version: "12.4"
    nvswitch: true                   # every device reaches every other through NVSwitches
    devices:
      - product: NVIDIA H100 80GB HBM3   # as nvmlDeviceGetName returns it
        count: 7                     # this entry repeated (indices follow the list order)
        memory_mib: 81559            # default from the known products below
        compute_capability: "9.0"
        pci_bus_id: "00000000:18:00.0"
        nvlink_peers: [1, 2]         # direct NVLinks (without nvswitch)
        fabric: {cluster_uuid: 0b3c..., clique_id: 32766}   # multi-node NVLink
        utilization:                 # held step-wise from each point; or one mapping
          - {at: 0s, gpu_util: 5, fb_used_mib: 1024}
          - {at: 30s, gpu_util: 95, mem_copy_util: 60, fb_used_mib: 70000, power_w: 650}
        mig:
          instances:                 # placement_start defaults to packing in list order
            - {profile: 3g.40gb, placement_start: 4}
            - {profile: 1g.10gb, fb_used_mib: 2000}
    faults:
      - {at: 45s, gpu: 2, xid: 79}
      - {at: 50s, gpu: 3, ecc_double_bit: 1}
      - {at: 60s, gpu: 4, lost: true}
      - {at: 90s, gpu: 4, recover: true}
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Annotated, Any, Self, get_args

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from gpufleet.devices.mig import MIG_CAPABLE_COMPUTE, device_memory_gb, parse_mig_profile
from gpufleet.io.fields import unknown_field

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: object) -> float:
    """``30s``, ``1.5m``, ``500ms``, ``2h`` or a number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 30s, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        return float(value)
    match = _DURATION.match(str(value))
    if match is None:
        raise ValueError(f"expected a duration such as 30s, 1.5m or 500ms, got {value!r}")
    return float(match[1]) * _UNIT_SECONDS[match[2]]


Duration = Annotated[float, BeforeValidator(parse_duration)]

#: (memory MiB as nvmlDeviceGetMemoryInfo totals it, compute capability) of common products.
KNOWN_PRODUCTS: dict[str, tuple[int, tuple[int, int]]] = {
    "NVIDIA H100 80GB HBM3": (81559, (9, 0)),
    "NVIDIA H100 PCIe": (81559, (9, 0)),
    "NVIDIA H200": (143771, (9, 0)),
    "NVIDIA B200": (183359, (10, 0)),
    "NVIDIA A100-SXM4-80GB": (81920, (8, 0)),
    "NVIDIA A100-SXM4-40GB": (40960, (8, 0)),
    "NVIDIA A100 80GB PCIe": (81920, (8, 0)),
    "NVIDIA A30": (24576, (8, 0)),
    "NVIDIA L40S": (46068, (8, 9)),
    "NVIDIA L4": (23034, (8, 9)),
    "NVIDIA A10": (23028, (8, 6)),
    "Tesla T4": (15360, (7, 5)),
    "Tesla V100-SXM2-16GB": (16384, (7, 0)),
}

#: PCI bus ids of the eight GPUs of a DGX H100, reused for fake devices without one.
DEFAULT_BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UsagePoint(_Strict):
    """What a device does from ``at`` on; a field left out keeps its previous value."""

    at: Duration = 0.0
    gpu_util: float | None = Field(default=None, ge=0, le=100)
    mem_copy_util: float | None = Field(default=None, ge=0, le=100)
    fb_used_mib: int | None = Field(default=None, ge=0)
    temperature_c: float | None = Field(default=None, ge=0, le=150)
    power_w: float | None = Field(default=None, ge=0)
    sm_clock_mhz: int | None = Field(default=None, ge=0)


class MigInstanceSpec(_Strict):
    profile: str
    placement_start: int | None = Field(default=None, ge=0)
    gpu_instance_id: int | None = Field(default=None, ge=0)
    compute_instance_id: int = Field(default=0, ge=0)
    uuid: str | None = None
    fb_used_mib: int = Field(default=0, ge=0)

    @field_validator("profile")
    @classmethod
    def _known_form(cls, value: str) -> str:
        parse_mig_profile(value)
        return value


class MigSpec(_Strict):
    enabled: bool = True
    instances: tuple[MigInstanceSpec, ...] = ()


class FabricSpec(_Strict):
    """The NVLink fabric (multi-node NVLink, GB200 NVL72) the device is attached to."""

    cluster_uuid: uuid.UUID
    clique_id: int = Field(ge=0, lt=2**32)


def _usage(value: Any) -> Any:
    return [value] if isinstance(value, dict) else value


class DeviceSpec(_Strict):
    product: str = Field(min_length=1)
    count: int = Field(default=1, ge=1, le=64)
    memory_mib: int | None = Field(default=None, gt=0)
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    uuid: str | None = None
    pci_bus_id: str | None = Field(
        default=None, pattern=r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$"
    )
    nvlink_peers: tuple[int, ...] = ()
    fabric: FabricSpec | None = None
    utilization: Annotated[tuple[UsagePoint, ...], BeforeValidator(_usage)] = ()
    mig: MigSpec | None = None

    @model_validator(mode="after")
    def _known_or_given(self) -> Self:
        if self.product not in KNOWN_PRODUCTS and (
            self.memory_mib is None or self.compute_capability is None
        ):
            raise ValueError(
                f"unknown product {self.product!r}: give memory_mib and compute_capability "
                f"(known: {', '.join(sorted(KNOWN_PRODUCTS))})"
            )
        if self.count > 1 and (self.uuid or self.pci_bus_id):
            raise ValueError("uuid and pci_bus_id name one device: not with count above 1")
        times = [p.at for p in self.utilization]
        if times != sorted(times):
            raise ValueError("utilization points must be in time order")
        return self

    @property
    def total_memory_mib(self) -> int:
        return self.memory_mib or KNOWN_PRODUCTS[self.product][0]

    @property
    def compute(self) -> tuple[int, int]:
        if self.compute_capability is None:
            return KNOWN_PRODUCTS[self.product][1]
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)


class FaultSpec(_Strict):
    at: Duration
    gpu: int = Field(ge=0)
    xid: int | None = Field(default=None, gt=0)
    ecc_double_bit: int | None = Field(default=None, gt=0)
    lost: bool = False
    recover: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        kinds = [self.xid is not None, self.ecc_double_bit is not None, self.lost, self.recover]
        if sum(kinds) != 1:
            raise ValueError(
                "a fault is exactly one of xid, ecc_double_bit, lost: true, recover: true"
            )
        return self


class FakeSpec(_Strict):
    node: str = "fake-node"
    driver_version: str = Field(default="550.54.15", pattern=r"^\d+\.\d+(\.\d+)?$")
    cuda_driver_version: str = Field(default="12.4", pattern=r"^\d+\.\d+$")
    nvswitch: bool = False
    #: A directory standing for ``/dev`` (``nvidiaN``, ``nvidiactl``, ``nvidia-caps/``...:
    #: plain files or ``mknod``'ed nodes, and a ``mig-minors`` file standing for the driver's
    #: ``/proc/driver/nvidia-caps/mig-minors``; :mod:`gpufleet.devices.fake_nodes` writes one)
    #: that ``serve --local`` builds each run's private ``/dev`` from.
    device_dir: str | None = None
    devices: tuple[DeviceSpec, ...] = ()
    faults: tuple[FaultSpec, ...] = ()


class FakeSpecError(ValueError):
    """The fake GPU description is invalid; the message names the file and the field."""


def _loc(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _device_entries(spec: FakeSpec) -> list[tuple[int, DeviceSpec]]:
    """(spec entry index, entry) per GPU index, entries repeated ``count`` times."""
    return [(n, d) for n, d in enumerate(spec.devices) for _ in range(d.count)]


def _cross_check(spec: FakeSpec) -> list[tuple[str, str]]:
    """What pydantic cannot see field by field: references between devices and faults."""
    errors: list[tuple[str, str]] = []
    gpus = _device_entries(spec)
    for n, device in enumerate(spec.devices):
        where = f"devices[{n}]"
        for k, peer in enumerate(device.nvlink_peers):
            if not 0 <= peer < len(gpus):
                errors.append((f"{where}.nvlink_peers[{k}]", f"no GPU {peer} on this node"))
        if device.mig is None:
            continue
        if device.compute not in MIG_CAPABLE_COMPUTE:
            errors.append((f"{where}.mig", f"{device.product} does not support MIG"))
            continue
        if not device.mig.enabled and device.mig.instances:
            errors.append((f"{where}.mig.instances", "MIG instances need mig.enabled: true"))
        total_gb = device_memory_gb(device.total_memory_mib << 20)
        for k, instance in enumerate(device.mig.instances):
            profile = parse_mig_profile(instance.profile)
            eighths = profile.memory_gb * 8 / total_gb
            if abs(eighths - round(eighths)) > 0.2 or not 1 <= round(eighths) <= 8:
                errors.append(
                    (
                        f"{where}.mig.instances[{k}].profile",
                        f"{instance.profile} does not fit a {total_gb} GB {device.product}",
                    )
                )
    for k, fault in enumerate(spec.faults):
        if fault.gpu >= len(gpus):
            errors.append((f"faults[{k}].gpu", f"no GPU {fault.gpu} on this node"))
    return errors


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The model a field's type holds (``tuple[DeviceSpec, ...]``, ``MigSpec | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _known_fields(loc: tuple[int | str, ...]) -> tuple[str, ...]:
    """The fields of the object at ``loc`` (that of an unknown field: its last part)."""
    model: type[BaseModel] | None = FakeSpec
    for part in loc[:-1]:
        if isinstance(part, str) and model is not None and part in model.model_fields:
            model = _model_in(model.model_fields[part].annotation)
    return tuple(model.model_fields) if model is not None else ()


def _message(error: ErrorDetails) -> str:
    """pydantic's message, or for an unknown field the project's (a did-you-mean)."""
    loc = error["loc"]
    if error["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
        return unknown_field(loc[-1], _known_fields(loc))
    if error["type"] == "missing":
        return "required"
    return error["msg"]


def parse_fake_spec(data: object, source: str = "<fake gpus>") -> FakeSpec:
    """Validate parsed YAML; FakeSpecError naming ``source`` and the field otherwise (an
    unknown field with a did-you-mean, as every reader of gpufleet's says it)."""
    try:
        spec = FakeSpec.model_validate(data)
    except ValidationError as error:
        lines = [f"{source}: {_loc(e['loc'])}: {_message(e)}" for e in error.errors()]
        raise FakeSpecError("\n".join(lines)) from None
    problems = _cross_check(spec)
    if problems:
        raise FakeSpecError("\n".join(f"{source}: {where}: {what}" for where, what in problems))
    return spec


def load_fake_spec(path: str | Path) -> FakeSpec:
    """Read and validate a fake GPU description file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise FakeSpecError(f"{path}: cannot read: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise FakeSpecError(f"{path}: not YAML: {error}") from None
    if data is None:  # an empty file is a mistake; a node without GPUs says devices: []
        raise FakeSpecError(
            f"{path}: expected a fake GPU description (node, devices, faults), found no objects"
        )
    return parse_fake_spec(data, str(path))
