"""What the live planes need of the world they run on, as a small protocol.

:class:`LiveWorld` is met by :class:`~gpufleet.backends.sim.live.LiveSimCluster` (the simulated
cluster on a scaled wall clock: ``gpufleet serve``) and
:class:`~gpufleet.service.local_world.LiveLocalMachine` (this machine's GPUs, workloads run as
processes: ``gpufleet serve --local``). The plane and its parts
(:mod:`~gpufleet.service.live_plane`, :mod:`~gpufleet.service.live_recording`,
:mod:`~gpufleet.service.live_restore`) are written against it only; what differs between
the worlds beyond it (how a submission is read, how a restart finds its runs again, what a
turn records of a process) is a part the plane of that world gives: see
:mod:`gpufleet.service.local_plane`.

It declares; it does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from gpufleet.backends.sim.jobs import JobRun
from gpufleet.control.backend import ClusterBackend
from gpufleet.model import Node, Placement, Pod
from gpufleet.model.workload import TimedWorkload


class JobBook(Protocol):
    """The world's job controllers (Job completions, retries), as the plane reads them."""

    def adopt(self, timed: TimedWorkload, states: Mapping[str, Mapping[str, Any]]) -> None: ...

    def states(self, workload_key: str) -> dict[str, dict[str, Any]]: ...

    def of(self, workload_key: str) -> list[JobRun]: ...

    def forget(self, workload_key: str) -> None: ...


class LiveWorld(ClusterBackend, Protocol):
    """A world that runs while the plane serves: work arrives, is cancelled, comes back."""

    @property
    def jobs(self) -> JobBook: ...

    @property
    def pending(self) -> Mapping[str, Pod]: ...

    def submit(self, timed: TimedWorkload) -> None: ...

    def cancel(self, pod_keys: Iterable[str]) -> list[str]: ...

    def demote(self, pod_keys: Iterable[str], reason: str) -> bool: ...

    def release(self, timed: TimedWorkload) -> None:
        """The owner of a held workload changed it (gates removed, resumed): the world keeps
        its new form and tells the core (``WorkloadReleased``)."""

    def work_of(self, pod_key: str) -> tuple[float, float | None] | None: ...

    def current_nodes(self) -> Sequence[Node]: ...

    def wake(self) -> None: ...

    def stop(self) -> None: ...


class PodByPodWorld(LiveWorld, Protocol):
    """A live world whose running pods are put back one by one at a start, each on exactly
    its devices with the work it had left (the simulated cluster; this machine finds its runs
    again itself)."""

    def restore(
        self,
        pod: Pod,
        placement: Placement,
        remaining: float | None,
        checkpoint: float | None,
        in_gang: bool,
        started: float,
        timed: TimedWorkload | None = None,
    ) -> None: ...
