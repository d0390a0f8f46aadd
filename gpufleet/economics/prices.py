"""What an hour of a GPU, a vCPU and a GiB of memory costs, by capacity type.

Owns the price list as plain data (:class:`PriceList`) and its look-ups: the hourly price of
one whole GPU of a model on a capacity type (on-demand, spot, reserved), of one vCPU, of one
GiB of memory. A GPU product a node reports (``NVIDIA-H100-80GB-HBM3``) finds its price by the
short model names the list gives (``H100``) exactly as gpufleet matches models everywhere
(:func:`gpufleet.model.gpu.model_matches`); where several names cover a product, the most
specific (longest) wins, so ``A100-SXM4-80GB`` can be priced apart from ``A100``.

A model without a price for a capacity type may take an *estimate*: a fraction of its
on-demand price the list states (``estimates``); such a price says it was estimated. Reading
the list from a file is :mod:`gpufleet.io.fleet.prices`; what the prices are multiplied by is
:mod:`gpufleet.economics.allocation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.model.capacity import CapacityType
from gpufleet.model.gpu import canonical_model, model_matches

__all__ = ["CapacityType", "GpuPrice", "MissingPriceError", "PriceList", "Rate"]


class MissingPriceError(LookupError):
    """The price list has no price for what was asked (a model, or a capacity type)."""


@dataclass(frozen=True, slots=True)
class GpuPrice:
    """Hourly prices of one whole GPU of ``model`` (a short name: ``H100``, ``A10G``), per
    capacity type it is listed for. ``source`` says where the numbers come from, ``as_of``
    the day (ISO) they were valid."""

    model: str
    hourly: Mapping[CapacityType, float]
    source: str = ""
    as_of: str = ""

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ValueError("a GPU price needs a model name")
        if CapacityType.ON_DEMAND not in self.hourly:
            raise ValueError(f"GPU model {self.model!r} needs an on-demand price")
        for capacity, price in self.hourly.items():
            _check_price(price, f"{self.model} {capacity}")


@dataclass(frozen=True, slots=True)
class Rate:
    """A price found: per hour, and whether it was estimated from the on-demand price."""

    hourly: float
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class PriceList:
    """GPU prices per model, and per capacity type the price of a vCPU-hour and of a GiB-hour
    of memory. ``estimates``: for a capacity type, the fraction of a model's on-demand price
    to use where the model lists no price of that type (absent: no estimate, a
    :class:`MissingPriceError`)."""

    gpus: tuple[GpuPrice, ...]
    cpu_per_vcpu_hour: Mapping[CapacityType, float]
    memory_per_gib_hour: Mapping[CapacityType, float]
    estimates: Mapping[CapacityType, float] = field(default_factory=dict)
    currency: str = "USD"
    name: str = ""

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for gpu in self.gpus:
            key = canonical_model(gpu.model)
            if key in seen:
                raise ValueError(f"GPU model {gpu.model!r} is priced twice ({seen[key]!r})")
            seen[key] = gpu.model
        for what, table in (("cpu", self.cpu_per_vcpu_hour), ("memory", self.memory_per_gib_hour)):
            if CapacityType.ON_DEMAND not in table:
                raise ValueError(f"{what} needs an on-demand price")
            for capacity, price in table.items():
                _check_price(price, f"{what} {capacity}")
        for capacity, fraction in self.estimates.items():
            if not 0.0 < fraction <= 1.0:
                raise ValueError(
                    f"the {capacity} estimate is a fraction of the on-demand price, from above "
                    f"0 to 1; got {fraction}"
                )

    def gpu_price(self, product: str) -> GpuPrice:
        """The price entry covering GPU ``product`` (the most specific name that does)."""
        covering = [price for price in self.gpus if model_matches(price.model, product)]
        if not covering:
            known = ", ".join(price.model for price in self.gpus) or "none"
            raise MissingPriceError(f"no GPU price covers model {product!r} (priced: {known})")
        return max(covering, key=lambda price: len(canonical_model(price.model)))

    def gpu_rate(self, product: str, capacity: CapacityType) -> Rate:
        """The hourly price of one whole GPU ``product`` on ``capacity``."""
        price = self.gpu_price(product)
        listed = price.hourly.get(capacity)
        if listed is not None:
            return Rate(listed)
        fraction = self.estimates.get(capacity)
        if fraction is None:
            raise MissingPriceError(
                f"GPU model {price.model!r} has no {capacity} price and the price list gives "
                f"no {capacity} estimate"
            )
        return Rate(price.hourly[CapacityType.ON_DEMAND] * fraction, estimated=True)

    def cpu_rate(self, capacity: CapacityType) -> Rate:
        """The hourly price of one vCPU on ``capacity``."""
        return self._host_rate(self.cpu_per_vcpu_hour, capacity, "vCPU")

    def memory_rate(self, capacity: CapacityType) -> Rate:
        """The hourly price of one GiB of memory on ``capacity``."""
        return self._host_rate(self.memory_per_gib_hour, capacity, "memory")

    def _host_rate(
        self, table: Mapping[CapacityType, float], capacity: CapacityType, what: str
    ) -> Rate:
        listed = table.get(capacity)
        if listed is not None:
            return Rate(listed)
        fraction = self.estimates.get(capacity)
        if fraction is None:
            raise MissingPriceError(
                f"the price list has no {what} {capacity} price and gives no {capacity} estimate"
            )
        return Rate(table[CapacityType.ON_DEMAND] * fraction, estimated=True)


def _check_price(price: float, what: str) -> None:
    if not price >= 0.0 or price == float("inf"):
        raise ValueError(f"the price of {what} must be a finite number of at least 0, got {price}")
