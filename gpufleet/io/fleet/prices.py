"""The price list file (``kind: PriceList``): what GPUs, vCPUs and memory cost per hour.

Owns the reading of::

    apiVersion: gpufleet.dev/v1alpha1
    kind: PriceList
    metadata: {name: my-prices}
    spec:
      currency: USD
      cpu: {on-demand: 0.031611, spot: 0.006655}      # per vCPU-hour
      memory: {on-demand: 0.004237, spot: 0.000892}   # per GiB-hour
      estimates: {spot: 0.6}   # a model without a spot price: this fraction of on-demand
      gpus:
        - model: H100          # matched as gpufleet matches GPU models (NVIDIA-H100-80GB-HBM3)
          on-demand: 10.447    # per GPU-hour
          reserved: 3.073
          source: AWS p5.48xlarge
          asOf: "2026-06-24"

into a :class:`~gpufleet.economics.prices.PriceList` (pydantic, unknown fields refused), every
error an :class:`~gpufleet.io.errors.InputError` naming the file and the field
(``spec.gpus[1].on-demand``). :func:`default_prices` reads the list gpufleet ships
(``gpufleet/data/prices.yaml``: public list prices, each with its source and date). It
computes no cost (:mod:`gpufleet.economics` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet.economics.prices import CapacityType, GpuPrice, PriceList
from gpufleet.io.errors import InputError
from gpufleet.io.manifests import load_manifests
from gpufleet.io.validation import validation_error
from gpufleet.model.gpu import canonical_model

KIND = "PriceList"
API_VERSION = "gpufleet.dev/v1alpha1"

Price = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class ByCapacity(_Strict):
    """A price per capacity type; on-demand is required, the others optional."""

    on_demand: Price = Field(alias="on-demand")
    spot: Price | None = None
    reserved: Price | None = None

    def table(self) -> dict[CapacityType, float]:
        return _table(self.on_demand, self.spot, self.reserved)


class Estimates(_Strict):
    """Fractions of the on-demand price for capacity types a model lists no price for."""

    spot: Annotated[float, Field(gt=0, le=1)] | None = None
    reserved: Annotated[float, Field(gt=0, le=1)] | None = None


class GpuPriceSpec(_Strict):
    model: str = Field(min_length=1, max_length=100)
    on_demand: Price = Field(alias="on-demand")
    spot: Price | None = None
    reserved: Price | None = None
    source: str = ""
    as_of: date | None = Field(default=None, alias="asOf")
    retrieved: date | None = None


class PriceListSpec(_Strict):
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    cpu: ByCapacity
    memory: ByCapacity
    estimates: Estimates = Field(default_factory=Estimates)
    gpus: list[GpuPriceSpec] = Field(default_factory=list)


class Metadata(_Strict):
    name: str = Field(min_length=1, max_length=253)


class PriceListObject(_Strict):
    api_version: Literal["gpufleet.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["PriceList"]
    metadata: Metadata
    spec: PriceListSpec


def price_list_from_dict(
    data: Mapping[str, Any], source: str, location: str | None = None
) -> PriceList:
    """One ``PriceList`` object (as loaded from YAML or JSON)."""
    try:
        parsed = PriceListObject.model_validate(data)
    except ValidationError as error:
        raise validation_error(error, data, source, location, PriceListObject) from None
    spec = parsed.spec
    where = f"{KIND} {parsed.metadata.name}"
    place = where if location is None else f"{location}, {where}"
    gpus = []
    for index, gpu in enumerate(spec.gpus):
        hourly = _table(gpu.on_demand, gpu.spot, gpu.reserved)
        gpus.append(GpuPrice(gpu.model.strip(), hourly, gpu.source, _day(gpu.as_of)))
        _check_unique_model(gpus, source, place, index)
    estimates = {
        capacity: fraction
        for capacity, fraction in (
            (CapacityType.SPOT, spec.estimates.spot),
            (CapacityType.RESERVED, spec.estimates.reserved),
        )
        if fraction is not None
    }
    return PriceList(
        tuple(gpus),
        spec.cpu.table(),
        spec.memory.table(),
        estimates,
        spec.currency,
        parsed.metadata.name,
    )


def _table(
    on_demand: float, spot: float | None, reserved: float | None
) -> dict[CapacityType, float]:
    listed = {
        CapacityType.ON_DEMAND: on_demand,
        CapacityType.SPOT: spot,
        CapacityType.RESERVED: reserved,
    }
    return {capacity: price for capacity, price in listed.items() if price is not None}


def _day(day: date | None) -> str:
    return "" if day is None else day.isoformat()


def _check_unique_model(gpus: list[GpuPrice], source: str, place: str, index: int) -> None:
    latest = canonical_model(gpus[-1].model)
    for earlier, price in enumerate(gpus[:-1]):
        if canonical_model(price.model) == latest:
            raise InputError(
                source,
                f"GPU model {gpus[-1].model!r} is priced already, in spec.gpus[{earlier}]",
                place,
                f"spec.gpus[{index}].model",
            )


def read_prices(path: str | Path) -> PriceList:
    """The price list of a file holding one ``PriceList`` object."""
    source = str(path)
    manifests = load_manifests(path)
    if len(manifests) != 1:
        found = "no objects" if not manifests else f"{len(manifests)} objects"
        raise InputError(source, f"expected one {KIND} object, found {found}")
    manifest = manifests[0]
    kind = manifest.get("kind")
    if kind != KIND:
        raise InputError(source, f"expected a {KIND}, got kind {kind!r}", manifest.location, "kind")
    return price_list_from_dict(manifest, source, manifest.location)


def default_prices_path() -> Path:
    """Where the price list gpufleet ships lies."""
    return Path(str(resources.files("gpufleet") / "data" / "prices.yaml"))


def default_prices() -> PriceList:
    """The price list gpufleet ships: public list prices, with sources and dates."""
    return read_prices(default_prices_path())
