"""The NVIDIA device plugin's own config file: how it shares each GPU (time-slicing or MPS).

Owns the format (pydantic models, ``extra="forbid"``) of what the plugin reads from
``--config-file`` or from one key of its ConfigMap's ``data`` (``version: v1``, ``flags``,
``sharing.timeSlicing`` or ``sharing.mps`` with ``resources[].name`` / ``replicas``,
``renameByDefault``, ``failRequestsGreaterThanOne``), what that means in gpufleet's model
(:meth:`DevicePluginConfig.gpu_sharing`), and the reading of it from a file that holds either
the config itself or the ConfigMap (:func:`read_device_plugin_config`). Errors are
:class:`~gpufleet.io.errors.InputError` naming the file, the ConfigMap key and the field
(``sharing.timeSlicing.resources[0].replicas``). A cluster-spec pool embeds the same model
(:mod:`gpufleet.io.fleet.cluster_spec`). It does not decide which devices a node serves
(``gpufleet.agent.resources`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.manifests import describe, load_documents
from gpufleet.io.validation import validation_error
from gpufleet.model import (
    GPU_RESOURCE,
    MILLI_PER_GPU,
    NO_SHARING,
    SHARED_GPU_RESOURCE,
    GpuSharing,
    SharingStrategy,
)

__all__ = [
    "DevicePluginConfig",
    "ReplicaSharing",
    "ReplicatedResource",
    "SharingConfig",
    "device_plugin_config_from_dict",
    "read_device_plugin_config",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplicatedResource(_Strict):
    """One entry of the device plugin's ``sharing.timeSlicing.resources`` (or ``mps``)."""

    name: Literal["nvidia.com/gpu"] = Field(
        description="MIG resources are not time-sliced in gpufleet's model"
    )
    replicas: int = Field(ge=1, le=MILLI_PER_GPU)


class ReplicaSharing(_Strict):
    """``sharing.timeSlicing`` or ``sharing.mps`` of the device plugin's config."""

    rename_by_default: bool = Field(default=False, alias="renameByDefault")
    fail_requests_greater_than_one: bool = Field(default=False, alias="failRequestsGreaterThanOne")
    resources: list[ReplicatedResource] = Field(min_length=1, max_length=1)


class SharingConfig(_Strict):
    time_slicing: ReplicaSharing | None = Field(default=None, alias="timeSlicing")
    mps: ReplicaSharing | None = None

    @model_validator(mode="after")
    def _one(self) -> SharingConfig:
        if (self.time_slicing is None) == (self.mps is None):
            raise ValueError("expected one of timeSlicing or mps")
        return self


class DevicePluginConfig(_Strict):
    """The NVIDIA device plugin's config file, as the ``data`` of its ConfigMap holds it."""

    version: Literal["v1"]
    #: The plugin's flags (migStrategy, ...): accepted as written, not used.
    flags: dict[str, Any] = Field(default_factory=dict)
    sharing: SharingConfig | None = None

    def gpu_sharing(self) -> GpuSharing:
        if self.sharing is None:
            return NO_SHARING
        strategy = SharingStrategy.TIME_SLICING
        replicated = self.sharing.time_slicing
        if replicated is None:
            strategy, replicated = SharingStrategy.MPS, self.sharing.mps
        assert replicated is not None
        return GpuSharing(
            strategy,
            replicated.resources[0].replicas,
            SHARED_GPU_RESOURCE if replicated.rename_by_default else GPU_RESOURCE,
            replicated.fail_requests_greater_than_one,
        )


def device_plugin_config_from_dict(
    data: object, source: str, location: str | None = None
) -> DevicePluginConfig:
    """The config of one parsed document; errors name ``source``, ``location`` and the field."""
    if not isinstance(data, Mapping):
        raise InputError(
            source,
            f"expected the device plugin's config (a mapping with version: v1), "
            f"got {describe(data)}",
            location,
        )
    try:
        return DevicePluginConfig.model_validate(data)
    except ValidationError as error:
        raise validation_error(error, data, source, location, DevicePluginConfig) from None


def read_device_plugin_config(path: str | Path, key: str | None = None) -> DevicePluginConfig:
    """The device plugin's config from ``path``: the config file itself, or a ConfigMap whose
    ``data[key]`` holds it (``key`` may be left out when the ConfigMap has one entry)."""
    source = str(path)
    documents = load_documents(path)
    if len(documents) != 1:
        raise InputError(
            source,
            "expected one document: the device plugin's config or its ConfigMap, "
            f"found {len(documents)}",
        )
    document, line, data = documents[0]
    where = f"document {document} (line {line})"
    if isinstance(data, Mapping) and data.get("kind") == "ConfigMap":
        return _from_config_map(data, source, where, key)
    if key is not None:
        raise InputError(
            source, f"a config key ({quoted(key)}) was given, but the file is no ConfigMap", where
        )
    return device_plugin_config_from_dict(data, source, where)


def _from_config_map(
    config_map: Mapping[str, Any], source: str, where: str, key: str | None
) -> DevicePluginConfig:
    metadata = config_map.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    where = f"{where}, ConfigMap {name}" if isinstance(name, str) else f"{where}, ConfigMap"
    data = config_map.get("data")
    if not isinstance(data, Mapping) or not data:
        raise InputError(
            source,
            f"expected the device plugin's configs by name, got {describe(data)}",
            where,
            "data",
        )
    if key is None:
        if len(data) != 1:
            names = ", ".join(sorted(map(str, data)))
            raise InputError(
                source, f"holds several configs ({names}): name the one to use", where, "data"
            )
        key = str(next(iter(data)))
    field = f"data[{key}]"
    text = data.get(key)
    if not isinstance(text, str):
        known = ", ".join(sorted(map(str, data)))
        found = "missing" if text is None else f"got {describe(text)}"
        raise InputError(
            source, f"expected the config as YAML text ({found}; keys: {known})", where, field
        )
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InputError(source, f"not valid YAML: {_yaml_problem(error)}", where, field) from None
    return device_plugin_config_from_dict(parsed, source, f"{where}, {field}")


def _yaml_problem(error: yaml.YAMLError) -> str:
    """What YAML found wrong, and where in the embedded text, on one line."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if not isinstance(problem, str):
        return str(error).splitlines()[0]
    if mark is None:
        return problem
    return f"{problem} (its line {mark.line + 1}, column {mark.column + 1})"
