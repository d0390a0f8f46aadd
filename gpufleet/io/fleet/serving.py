"""``kind: InferenceLoad`` objects read into :class:`~gpufleet.model.serving.InferenceService`:
the requests an inference workload gets in a simulation, and what one replica serves.

Owns the format (pydantic, ``extra="forbid"``)::

    apiVersion: gpufleet.dev/v1alpha1
    kind: InferenceLoad
    metadata: {name: chat-traffic, namespace: prod}
    spec:
      target: {kind: Deployment, name: chat}   # a workload of the same namespace
      requests:                     # per second: a daily wave ...
        trough: 20
        peak: 180
        peakAt: "14:00"             # the simulated clock's hour of the peak (default 14:00)
        noise: 0.2                  # coefficient of variation of the per-step factor
        bursts: [{at: 26h, duration: 20m, factor: 3}]
        duration: 7d                # how long requests come (a day; a file: to its last point)
        # ... or the points of a CSV file (seconds,rps; a header line allowed), relative to
        # this file: file: traffic.csv
      replica:
        throughput: 12              # requests per second one ready replica serves
        serviceTime: 250ms          # a request's own time
        loadTime: 90s               # from start until it serves (its model loaded)
      slo: {p95: 1s}                # the objective on the 95th percentile of latency

``replica.loadTime`` is how long a simulated replica takes before it serves; the workload's
``gpufleet.dev/model-load-time`` (:mod:`gpufleet.io.kube.autoscaling`) is what its autoscaler counts
on, and the two may differ, as a real autoscaler's guess may. Owns the reading of one object
(:func:`inference_service_from_object`), with errors naming the file, the document, the object
and the field. It simulates nothing
(:mod:`gpufleet.backends.sim.serving` does).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpufleet.io.errors import InputError
from gpufleet.io.fields import check_object_fields
from gpufleet.io.manifests import named_object
from gpufleet.io.quantities import parse_duration_seconds, parse_long_duration
from gpufleet.io.validation import validation_error
from gpufleet.model.serving import Burst, InferenceService, ReplicaService, RequestLoad
from gpufleet.model.workload import workload_key

INFERENCE_LOAD = KIND = "InferenceLoad"
API_VERSIONS = ("gpufleet.dev/v1alpha1",)
SPEC_FIELDS = ("target", "requests", "replica", "slo")
#: The kinds an InferenceLoad may name: those whose replicas serve until deleted.
TARGET_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


def _seconds(value: object) -> float:
    return parse_duration_seconds(value)


class TargetSpec(_Strict):
    kind: str = "Deployment"
    name: str = Field(min_length=1)

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value not in TARGET_KINDS:
            raise ValueError(f"expected one of {', '.join(TARGET_KINDS)}, got {value!r}")
        return value


class BurstSpec(_Strict):
    at: float
    duration: float
    factor: float = Field(gt=0)

    _durations = field_validator("at", "duration", mode="before")(_seconds)


class RequestsSpec(_Strict):
    trough: float | None = Field(default=None, ge=0)
    peak: float | None = Field(default=None, ge=0)
    peak_at: float = Field(default=14 * 3600.0, alias="peakAt")
    noise: float = Field(default=0.0, ge=0, le=1)
    bursts: list[BurstSpec] = Field(default_factory=list)
    file: str | None = None
    duration: float | None = None

    _duration = field_validator("duration", mode="before")(parse_long_duration)

    @field_validator("peak_at", mode="before")
    @classmethod
    def _clock(cls, value: object) -> float:
        """``"14:00"`` (the hour and minute of the simulated clock's day) or a duration."""
        if isinstance(value, str) and ":" in value:
            hours, _, minutes = value.partition(":")
            if not (hours.isdigit() and minutes.isdigit()):
                raise ValueError(f"expected HH:MM or a duration, got {value!r}")
            if int(hours) > 23 or int(minutes) > 59:
                raise ValueError(f"expected a time of day 00:00..23:59, got {value!r}")
            return int(hours) * 3600.0 + int(minutes) * 60.0
        return parse_duration_seconds(value)


class ReplicaSpec(_Strict):
    throughput: float = Field(gt=0)
    service_time: float = Field(alias="serviceTime")
    load_time: float = Field(default=60.0, alias="loadTime")

    _durations = field_validator("service_time", "load_time", mode="before")(_seconds)


class SloSpec(_Strict):
    p95: float

    _durations = field_validator("p95", mode="before")(_seconds)


class InferenceLoadSpec(_Strict):
    target: TargetSpec
    requests: RequestsSpec
    replica: ReplicaSpec
    slo: SloSpec


def inference_service_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> InferenceService:
    """One InferenceLoad object (see the module docstring); a ``file`` is read relative to
    ``source``'s directory."""
    context, _, namespace = named_object(obj, source, location, KIND, API_VERSIONS)
    check_object_fields(context, obj, SPEC_FIELDS)
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    try:
        parsed = InferenceLoadSpec.model_validate(spec)
    except ValidationError as error:
        found = validation_error(error, spec, source, context.location, InferenceLoadSpec)
        field = "spec" if found.field is None else f"spec.{found.field}"
        raise InputError(found.source, found.reason, found.location, field) from None
    requests = parsed.requests
    wave = requests.trough is not None or requests.peak is not None
    if wave == (requests.file is not None):
        raise context.error(
            "spec.requests", "give either trough and peak (a daily wave) or a file, not both"
        )
    if wave and (requests.trough is None or requests.peak is None):
        raise context.error("spec.requests", "a daily wave needs both trough and peak")
    points: tuple[tuple[float, float], ...] = ()
    if requests.file is not None:
        points = read_points(Path(source).parent / requests.file, context.error)
    try:
        load = RequestLoad(
            trough_rps=requests.trough or 0.0,
            peak_rps=requests.peak or 0.0,
            peak_at_s=requests.peak_at,
            bursts=tuple(Burst(b.at, b.duration, b.factor) for b in requests.bursts),
            noise=requests.noise,
            points=points,
            duration_s=requests.duration,
        )
    except ValueError as error:
        raise context.error("spec.requests", str(error)) from None
    try:
        replica = ReplicaService(
            parsed.replica.throughput,
            parsed.replica.service_time,
            parsed.replica.load_time,
            parsed.slo.p95,
        )
    except ValueError as error:
        raise context.error("spec.replica", str(error)) from None
    key = workload_key(namespace, parsed.target.name, parsed.target.kind)
    return InferenceService(key, load, replica)


def read_points(
    path: Path, error: Callable[[str | None, str], InputError]
) -> tuple[tuple[float, float], ...]:
    """``seconds,rps`` rows of a CSV file (a first row that is not numbers is a header)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as problem:
        raise error("spec.requests.file", f"cannot read {path}: {problem.strerror}") from None
    points: list[tuple[float, float]] = []
    for number, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or all(not cell.strip() for cell in row):
            continue
        try:
            at, rps = (float(cell) for cell in row[:2])
            if len(row) != 2:
                raise ValueError
        except ValueError:
            if number == 1 and not points:
                continue  # a header
            raise error(
                "spec.requests.file", f"{path} line {number}: expected seconds,rps, got {row}"
            ) from None
        points.append((at, rps))
    if not points:
        raise error("spec.requests.file", f"{path} holds no seconds,rps rows")
    return tuple(points)
