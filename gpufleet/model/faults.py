"""Faults a scenario injects into the simulated cluster: an XID on one GPU at a time.

Owns :class:`GpuFault`, plain data read from a scenario's ``GpuFault`` objects
(:mod:`gpufleet.io.faults`): at ``at`` seconds of simulated time GPU ``gpu`` of node ``node``
reports XID ``xid`` and is unhealthy until ``recover_after`` seconds later (for good when None).
Every XID a scenario names counts as fatal there (the scenario says it happened); which XIDs a
real node's agent treats as fatal is the agent's business. It does not run anything
(:mod:`gpufleet.backends.sim.cluster` turns faults into ``DeviceHealthChanged`` events).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: What NVIDIA's XID catalogue says of the XIDs scenarios name most
#: (https://docs.nvidia.com/deploy/xid-errors/), for the reason a device is told unhealthy.
XID_MEANINGS = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}


@dataclass(frozen=True, slots=True)
class GpuFault:
    """GPU ``gpu`` of node ``node`` fails with XID ``xid`` at ``at`` seconds, and recovers
    ``recover_after`` seconds later (None: never). ``name`` says where it came from, for
    messages."""

    at: float
    node: str
    gpu: int
    xid: int
    recover_after: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.at) or self.at < 0:
            raise ValueError(f"a fault's time must be 0 or later, got {self.at}")
        if self.gpu < 0 or self.xid < 1:
            raise ValueError(f"a fault needs a GPU index >= 0 and an XID >= 1: {self}")
        if self.recover_after is not None and not self.recover_after > 0:
            raise ValueError(f"a fault recovers after more than 0 s, got {self.recover_after}")

    @property
    def reason(self) -> str:
        """``XID 79: GPU has fallen off the bus``."""
        meaning = XID_MEANINGS.get(self.xid)
        return f"XID {self.xid}" + (f": {meaning}" if meaning else "")

    @property
    def recovers_at(self) -> float | None:
        return None if self.recover_after is None else self.at + self.recover_after
