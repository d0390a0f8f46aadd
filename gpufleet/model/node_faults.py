"""Nodes a scenario takes away from the simulated cluster: spot interruptions and node failures.

Owns :class:`NodeFault`, plain data read from a scenario's ``SpotInterruption`` and
``NodeFailure`` objects (:mod:`gpufleet.io.fleet.node_faults`), :class:`NodeSelection` (which nodes
it strikes: by name, by labels, or by how they are bought) and the published rates its
defaults use. A fault strikes each chosen node at the times it lists, or at random times of a
given rate per node-hour (a Poisson process, drawn per seed by the simulator); a spot
interruption gives ``notice`` seconds of warning first, a node failure none. The node is gone
then, and comes back ``back_after`` seconds later (a spot node is replaced by a new one of the
same shape; a failed node is repaired), or never.

Defaults and where they come from:

* **The notice**: two minutes, the *Spot Instance interruption notice* AWS gives
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
  Google Cloud gives Spot VMs 30 seconds between ACPI G2 soft off and G3 mechanical off
  (Compute Engine API, ``scheduling.skipGuestOsShutdown``): write ``notice: 30s`` for GKE.
* **A spot rate**: AWS's Spot Instance Advisor (https://aws.amazon.com/ec2/spot/instance-advisor/)
  publishes, per instance type and region, the *frequency of interruption*: "the rate at which
  Spot has reclaimed capacity during the trailing month", in bands of <5%, 5-10%, 10-15%,
  15-20% and >20%. A band is read as the chance that a node is reclaimed within a month (730
  hours), taken at the band's upper bound (>20%: at its lower bound, 20%, the least it says),
  and turned into a Poisson rate per node-hour: -ln(1 - p) / 730. GPU instance types mostly
  sit in the top band, so it is the default: 20% a month, 3.06e-4 per node-hour.
* **A node failure rate**: Meta's Llama 3 pre-training run saw 419 unexpected interruptions in
  a 54-day snapshot on 16,384 H100 GPUs, 2,048 servers of 8 (*The Llama 3 Herd of Models*,
  arXiv:2407.21783, section 3.3.4): 419 / (2,048 x 54 x 24) = 1.58e-4 per node-hour, the
  default of a ``NodeFailure`` that gives neither times nor a rate.
* **A spot node's replacement**: five minutes after it is gone. Karpenter starts a replacement
  as soon as it hears the interruption (https://karpenter.sh/docs/concepts/disruption/
  #interruption), and a GPU node needs minutes to boot, load its driver and advertise its
  GPUs; ``replaceAfter: never`` plays capacity that does not come back. A failed node comes
  back only when the scenario says when (``recoverAfter``).

It plays nothing (:mod:`gpufleet.backends.sim.node_faults` does) and reads no files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.node import Node

#: Seconds of warning AWS gives before it reclaims a Spot Instance.
AWS_SPOT_NOTICE_S = 120.0
#: Seconds between a GCP Spot VM's soft off and its hard off.
GCP_SPOT_NOTICE_S = 30.0
#: Hours in a month, as AWS counts a month for its monthly figures (8,760 / 12).
HOURS_PER_MONTH = 730.0
#: The AWS Spot Instance Advisor's frequency-of-interruption bands, each as the monthly chance
#: of an interruption it stands for (its upper bound; >20%: its lower bound).
SPOT_FREQUENCY_BANDS: Mapping[str, float] = {
    "<5%": 0.05,
    "5-10%": 0.10,
    "10-15%": 0.15,
    "15-20%": 0.20,
    ">20%": 0.20,
}
DEFAULT_SPOT_FREQUENCY = ">20%"
#: Unexpected interruptions per node-hour in Llama 3's pre-training (see the module docstring).
LLAMA3_FAILURES_PER_NODE_HOUR = 419 / (2048 * 54 * 24)
#: How long after a spot node is gone its replacement joins, unless the scenario says.
DEFAULT_SPOT_REPLACE_AFTER_S = 300.0


def monthly_chance_to_rate(chance: float) -> float:
    """The Poisson rate per node-hour under which a node is struck at least once in a month
    with probability ``chance`` (0 < chance < 1)."""
    if not 0.0 < chance < 1.0:
        raise ValueError(f"a monthly chance is between 0 and 1, got {chance}")
    return -math.log1p(-chance) / HOURS_PER_MONTH


def band_rate(band: str) -> float:
    """The rate per node-hour of an AWS frequency-of-interruption band (``">20%"``)."""
    chance = SPOT_FREQUENCY_BANDS.get(band.replace(" ", ""))
    if chance is None:
        raise ValueError(
            f"unknown interruption frequency {band!r}: expected one of "
            f"{', '.join(repr(b) for b in SPOT_FREQUENCY_BANDS)}"
        )
    return monthly_chance_to_rate(chance)


class NodeFaultKind(StrEnum):
    """What takes a node away (the scenario object's kind)."""

    SPOT_INTERRUPTION = "SpotInterruption"
    NODE_FAILURE = "NodeFailure"


@dataclass(frozen=True, slots=True)
class NodeSelection:
    """Which nodes a fault strikes: those named (``names``), else those whose labels hold all
    of ``labels`` and, when ``capacity_type`` is given, that are bought that way (``spot``:
    read from their labels as the cost report reads them). Nothing given: every node."""

    names: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    capacity_type: str | None = None

    def matches(self, node: Node, capacity_of: Callable[[Mapping[str, str]], str]) -> bool:
        """Whether ``node`` is chosen; ``capacity_of`` reads how a node is bought from its
        labels (``gpufleet.economics.runs.capacity_type``)."""
        if self.names:
            return node.name in self.names
        labels = node.labels
        if any(labels.get(key) != value for key, value in self.labels.items()):
            return False
        return self.capacity_type is None or str(capacity_of(labels)) == self.capacity_type

    def describe(self) -> str:
        """``nodes n1, n2``, ``nodes labelled pool=a``, ``spot nodes``, ``every node``."""
        if self.names:
            return f"nodes {', '.join(self.names)}"
        parts = [f"{key}={value}" for key, value in sorted(self.labels.items())]
        what = f"{self.capacity_type} nodes" if self.capacity_type else "nodes"
        if parts:
            return f"{what} labelled {', '.join(parts)}"
        return what if self.capacity_type else "every node"


@dataclass(frozen=True, slots=True)
class NodeFault:
    """``kind`` strikes the nodes of ``selection`` at ``times`` (seconds of simulated time),
    or at random at ``rate_per_node_hour`` (a Poisson process per node), after ``notice``
    seconds of warning; each comes back ``back_after`` seconds after it is gone (None: never).
    ``name`` is the object's; ``where`` says where it came from, for messages."""

    kind: NodeFaultKind
    name: str
    selection: NodeSelection = field(default_factory=NodeSelection)
    times: tuple[float, ...] = ()
    rate_per_node_hour: float | None = None
    notice: float = 0.0
    back_after: float | None = None
    where: str = ""

    def __post_init__(self) -> None:
        if bool(self.times) == (self.rate_per_node_hour is not None):
            raise ValueError(f"{self.label}: give either times or a rate, not both or neither")
        for time in self.times:
            if not math.isfinite(time) or time < 0:
                raise ValueError(f"{self.label}: a time must be 0 or later, got {time}")
        rate = self.rate_per_node_hour
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"{self.label}: a rate must be above 0, got {rate}")
        if not (math.isfinite(self.notice) and self.notice >= 0):
            raise ValueError(f"{self.label}: a notice must be 0 s or more, got {self.notice}")
        back = self.back_after
        if back is not None and not (math.isfinite(back) and back > 0):
            raise ValueError(f"{self.label}: a node comes back after more than 0 s, got {back}")

    @property
    def label(self) -> str:
        """``SpotInterruption spot-a``."""
        return f"{self.kind} {self.name}"

    @property
    def is_spot(self) -> bool:
        return self.kind is NodeFaultKind.SPOT_INTERRUPTION

    @property
    def cause(self) -> str:
        """What the node's pods were lost to, for messages: ``spot interruption``."""
        return "spot interruption" if self.is_spot else "node failure"
