"""Faults a scenario injects into the simulated cluster: an XID on one GPU at a time.

Owns :class:`GpuFault`, plain data read from a scenario's ``GpuFault`` objects
(:mod:`gpufleet.io.fleet.faults`): at ``at`` seconds of simulated time GPU ``gpu`` of node ``node``
reports XID ``xid`` and is unhealthy until ``recover_after`` seconds later (for good when None).
Every XID a scenario names makes the device unhealthy there (the scenario says it happened);
which XIDs a real node's agent treats as fatal is the agent's business.

Whether the pods on the device crash: neither the kubelet nor NVIDIA's device plugin stops a
pod whose GPU turns unhealthy (the plugin only stops advertising it); the pod runs on until its
program fails on the device. NVIDIA's XID catalogue says which errors end the applications on
the GPU and which leave them running; ``crash_pods`` follows it unless the scenario says
(:attr:`GpuFault.crashes_pods`). It does not run anything (:mod:`gpufleet.backends.sim.cluster`
turns faults into ``DeviceHealthChanged`` events and crashed pods).
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
#: XIDs after which the applications on the GPU run on, as NVIDIA's catalogue describes them
#: (recording events and an error-rate warning); every other XID crashes them.
XIDS_APPLICATIONS_SURVIVE = frozenset({63, 64, 92})


@dataclass(frozen=True, slots=True)
class GpuFault:
    """GPU ``gpu`` of node ``node`` fails with XID ``xid`` at ``at`` seconds, and recovers
    ``recover_after`` seconds later (None: never). ``name`` says where it came from, for
    messages. ``crash_pods``: whether the pods on the GPU crash (None: as the XID says,
    :attr:`crashes_pods`)."""

    at: float
    node: str
    gpu: int
    xid: int
    recover_after: float | None = None
    name: str = ""
    crash_pods: bool | None = None

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
    def crashes_pods(self) -> bool:
        """Whether the pods using the GPU crash when it fails: as the scenario says, else
        unless the XID is one NVIDIA says leaves applications running."""
        if self.crash_pods is not None:
            return self.crash_pods
        return self.xid not in XIDS_APPLICATIONS_SURVIVE

    @property
    def recovers_at(self) -> float | None:
        return None if self.recover_after is None else self.at + self.recover_after
