"""This machine as the live world behind ``gpufleet serve --local``.

Owns :class:`LiveLocalMachine`: a :class:`~gpufleet.backends.local.machine.LocalMachine` as
the control plane's live world (:class:`~gpufleet.service.live_world.LiveWorld`, which the
simulated cluster meets too; kept here, not in ``backends/local``, which knows nothing of the
simulator's job controllers that the protocol names).
The plane reads each workload's processes from its manifest before it accepts it and hands
them here (:meth:`~LiveLocalMachine.give_processes`); a workload that then arrives
(:meth:`~LiveLocalMachine.submit`, the same call as the simulator's) goes to the machine with
them. What a simulated world has and this one has not: job controllers (:class:`NoJobs`: a
Job's retries and completions and a restart policy's restarts are the machine's, on its
processes), and run times known in advance.

A restart is not put back pod by pod (it is no :class:`~gpufleet.service.live_world.
PodByPodWorld`, the simulator's way): the plane calls :meth:`LocalMachine.recover` once with
every pod it believes runs or waits, then :meth:`LocalMachine.resume` for each workload
(:mod:`gpufleet.service.local_restore`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpufleet.backends.local.machine import LocalMachine, WallClock
from gpufleet.backends.sim.jobs import JobRun
from gpufleet.control.backend import ClusterState
from gpufleet.model import Node, Pod
from gpufleet.model.actions import Action
from gpufleet.model.events import ClusterEvent
from gpufleet.model.processes import ProcessSpec
from gpufleet.model.workload import TimedWorkload


class NoJobs:
    """The local machine's job controllers: none (a pod that ends is over). A workload
    forgotten (deleted once finished) is told to ``forgotten``."""

    def __init__(self, forgotten: Callable[[str], None] | None = None) -> None:
        self._forgotten = forgotten

    def adopt(self, timed: TimedWorkload, states: Mapping[str, Mapping[str, Any]]) -> None:
        pass

    def states(self, workload_key: str) -> dict[str, dict[str, Any]]:
        return {}

    def of(self, workload_key: str) -> list[JobRun]:
        return []

    def forget(self, workload_key: str) -> None:
        if self._forgotten is not None:
            self._forgotten(workload_key)


class LiveLocalMachine:
    """See the module docstring."""

    def __init__(self, machine: LocalMachine) -> None:
        self.machine = machine
        self.jobs = NoJobs(self.forget)
        self._processes: dict[str, dict[str, ProcessSpec]] = {}

    @property
    def clock(self) -> WallClock:
        return self.machine.clock

    # ----------------------------------------------------------------------------- inputs
    def give_processes(self, workload_key: str, specs: Mapping[str, ProcessSpec]) -> None:
        """The process of each pod (by key) of a workload that is about to arrive."""
        self._processes[workload_key] = dict(specs)

    def processes(self, workload_key: str) -> dict[str, ProcessSpec] | None:
        return self._processes.get(workload_key)

    def submit(self, timed: TimedWorkload) -> None:
        """A workload arrives now, with the processes given for it (KeyError: none were)."""
        workload = timed.workload
        self.machine.submit(workload, self._processes[workload.key])

    def forget(self, workload_key: str) -> None:
        """A finished workload is deleted: its processes are not needed again."""
        self._processes.pop(workload_key, None)

    def cancel(self, pod_keys: Iterable[str]) -> list[str]:
        return self.machine.cancel(pod_keys)

    def demote(self, pod_keys: Iterable[str], reason: str) -> bool:
        return self.machine.demote(pod_keys, reason)

    def release(self, timed: TimedWorkload) -> None:
        self.machine.release(timed.workload)

    # ----------------------------------------------------------------------------- reading
    def work_of(self, pod_key: str) -> tuple[float, float | None] | None:
        return None  # a process runs until it ends: nothing is known in advance

    def current_nodes(self) -> Sequence[Node]:
        return (self.machine.node,)

    @property
    def pending(self) -> Mapping[str, Pod]:
        return self.machine.waiting

    # ----------------------------------------------------------------------------- protocol
    def list_state(self) -> ClusterState:
        return self.machine.list_state()

    def poll_events(self) -> Sequence[ClusterEvent]:
        return self.machine.poll_events()

    def apply(self, actions: Sequence[Action]) -> None:
        self.machine.apply(actions)

    def wait(self, deadline: float = math.inf) -> None:
        self.machine.wait(deadline)

    @property
    def done(self) -> bool:
        return self.machine.done

    def wake(self) -> None:
        self.machine.wake()

    def stop(self) -> None:
        self.machine.stop()
