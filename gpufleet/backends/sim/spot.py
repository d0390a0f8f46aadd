"""What running on spot capacity saved in a simulated run, and what its interruptions cost.

Owns :func:`spot_savings`: for the nodes bought as spot (read from their labels, as the cost
report reads them), their GPU-hours up during the run's window (from t=0 to its end; a node is
not paid for while it is gone) priced at the spot and at the on-demand price of their GPU
model (:class:`~gpufleet.economics.prices.PriceList`; a spot price the list lacks is its stated
estimate, and says so). Three figures:

* *gross*: what those GPU-hours would have cost on demand, less what they cost on spot;
* *lost work*: the GPU-hours of work on spot nodes thrown away by their interruptions (since
  each pod's last checkpoint, gangs' other pods included), at the on-demand price: on-demand
  nodes would not have lost it, so running it again is what spot cost in work;
* *net*: gross less lost work.

Only GPUs are priced (the brief of a GPU cluster; CPU and memory are in the cost report). A
node whose GPU model the list does not price is left out of the three and named, never
priced at a guess. It reads no clock and decides nothing: the uptimes come from
:mod:`gpufleet.backends.sim.node_faults`, the lost work from the pods' losses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpufleet.backends.sim.results import SpotSavings
from gpufleet.economics import CapacityType, PriceList
from gpufleet.economics.prices import MissingPriceError
from gpufleet.economics.runs import capacity_type
from gpufleet.model import Node

SECONDS_PER_HOUR = 3600.0


def spot_savings(
    nodes: Sequence[Node],
    up_seconds: Mapping[str, float],
    lost_gpu_seconds: Mapping[str, float],
    prices: PriceList,
) -> SpotSavings | None:
    """The savings of the spot nodes among ``nodes`` (None: there are none with GPUs), from
    each node's seconds up and the GPU-seconds of work lost on it to interruptions."""
    spot = [n for n in nodes if n.gpu_count and capacity_type(n.labels) is CapacityType.SPOT]
    if not spot:
        return None
    savings = SpotSavings(currency=prices.currency)
    unpriced: dict[str, None] = {}
    for node in spot:
        model = node.gpu_model or ""
        try:
            on_demand = prices.gpu_rate(model, CapacityType.ON_DEMAND)
            rate = prices.gpu_rate(model, CapacityType.SPOT)
        except MissingPriceError:
            unpriced[model or f"(node {node.name}: no GPU model)"] = None
            continue
        hours = up_seconds.get(node.name, 0.0) * node.gpu_count / SECONDS_PER_HOUR
        lost = lost_gpu_seconds.get(node.name, 0.0) / SECONDS_PER_HOUR
        savings.spot_gpu_hours += hours
        savings.on_demand_cost += hours * on_demand.hourly
        savings.spot_cost += hours * rate.hourly
        savings.lost_gpu_hours += lost
        savings.lost_cost += lost * on_demand.hourly
        savings.estimated = savings.estimated or rate.estimated or on_demand.estimated
    savings.unpriced = list(unpriced)
    if unpriced:
        savings.notes.append(
            f"no price for GPU model(s) {', '.join(unpriced)} of spot nodes: left out"
        )
    if savings.estimated:
        savings.notes.append(
            "a spot price was estimated from the on-demand price (the list's estimate)"
        )
    savings.gross_saved = savings.on_demand_cost - savings.spot_cost
    savings.net_saved = savings.gross_saved - savings.lost_cost
    return savings.rounded()
