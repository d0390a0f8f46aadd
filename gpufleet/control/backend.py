"""The seam between the scheduling core and a world: the ClusterBackend protocol.

A backend observes a cluster and carries out actions; outcomes come back as events. The
simulated cluster, a real Kubernetes cluster and the local machine's GPUs all implement it;
they differ only in how :meth:`ClusterBackend.wait` waits (virtual time, a watch stream, or
the wall clock and the runs' ends).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.model import Node, Placement, Pod
from gpufleet.model.actions import Action
from gpufleet.model.events import ClusterEvent


class Clock(Protocol):
    def now(self) -> float: ...


@dataclass(slots=True)
class ManualClock:
    """A clock that moves only when told (virtual time, and fakes in tests)."""

    time: float = 0.0

    def now(self) -> float:
        return self.time

    def advance_to(self, time: float) -> None:
        if time < self.time:
            raise ValueError(f"time cannot go back from {self.time} to {time}")
        self.time = time


@dataclass(frozen=True, slots=True)
class ClusterState:
    """A full resync: nodes, pods waiting, pods running (with where they run)."""

    nodes: Sequence[Node] = ()
    pending: Sequence[Pod] = ()
    running: Sequence[tuple[Pod, Placement]] = field(default_factory=tuple)


class ClusterBackend(Protocol):
    @property
    def clock(self) -> Clock: ...

    def list_state(self) -> ClusterState:
        """Everything, for a full resync."""
        ...

    def poll_events(self) -> Sequence[ClusterEvent]:
        """Changes since the last poll."""
        ...

    def apply(self, actions: Sequence[Action]) -> None:
        """Carry out actions; outcomes come back as events."""
        ...

    def wait(self, deadline: float) -> None:
        """Until the next event or the deadline."""
        ...

    @property
    def done(self) -> bool:
        """True when nothing more will ever happen (a finished simulation)."""
        ...
