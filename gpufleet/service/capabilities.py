"""What a control plane can do that not every world can: the optional capabilities.

A plane (:class:`~gpufleet.service.protocol.Plane`) offers each as an object, or None where its
world has none, and its callers check: a run's output and terminal (:class:`PodLogs`,
:class:`Terminals`: kept by a plane whose pods are this machine's processes, ``serve
--local``), an owner's changes to a waiting workload (:class:`WaitingChanges`: ungate, resume,
suspend, on the embedded planes; on Kubernetes the pods' owner and the Job's update make
them), and what the idle policies do (:class:`IdleActions`, every plane its own way).

Where one is absent, the API answers as :func:`no_logs`, :func:`no_terminal` and
:func:`no_waiting_changes` say (a 404 or a 409 naming the world and what to use instead),
after checking the caller may see the workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpufleet.service.auth import Principal
from gpufleet.service.plane_book import LOG_CHUNK, ConflictError, IdleOutcome, NotFoundError
from gpufleet.service.records import WorkloadRecord


@dataclass(frozen=True, slots=True)
class PodLog:
    """A slice of one run's output (``serve --local``): ``text``, the bytes from ``offset`` to
    ``next_offset`` of run ``attempt`` of ``attempts``; ``running``: that run goes on;
    ``finished``: the workload has ended (nothing more will be written)."""

    pod: str
    attempt: int
    attempts: int
    offset: int
    next_offset: int
    text: str
    running: bool
    finished: bool


@dataclass(frozen=True, slots=True)
class AttachPoint:
    """Where a workload's terminal is (``serve --local``, a run with ``tty``): its pod, the
    socket its run's shim relays the terminal over, and the file the run's end is recorded in
    (:mod:`gpufleet.backends.local.terminal`)."""

    pod: str
    socket_path: str
    exit_path: str


class PodLogs(Protocol):
    """The output of a workload's pods' runs."""

    def pod_log(
        self,
        principal: Principal,
        key: str,
        pod: str | None = None,
        attempt: int | None = None,
        offset: int = 0,
        limit: int = LOG_CHUNK,
        tail: int | None = None,
    ) -> PodLog:
        """Output of one run of a pod of the workload ``key``, from byte ``offset``, or its
        last ``tail`` bytes."""
        ...


class Terminals(Protocol):
    """The terminals of running workloads (``gpufleet run -it``)."""

    def attach_point(self, principal: Principal, key: str) -> AttachPoint:
        """Where the terminal of the workload ``key``'s running run is."""
        ...


class WaitingChanges(Protocol):
    """What a workload's owner changes of a waiting workload."""

    def ungate(
        self, principal: Principal, key: str, gates: Sequence[str] = ()
    ) -> WorkloadRecord: ...

    def resume(self, principal: Principal, key: str) -> WorkloadRecord: ...

    def suspend(self, principal: Principal, key: str) -> WorkloadRecord: ...


class IdleActions(Protocol):
    """What the idle policies' steps do to a running workload
    (:mod:`gpufleet.service.idle_actions`)."""

    def stop_idle(self, key: str, by: str) -> IdleOutcome:
        """Stop the running workload ``key`` for the idle policy ``by``."""
        ...

    def scale_to_zero(self, key: str, by: str) -> IdleOutcome:
        """Scale the workload's Deployment or StatefulSet to zero (or stop it, and say so)."""
        ...

    def request_checkpoint(self, key: str, at: float) -> IdleOutcome:
        """Ask the workload to checkpoint."""
        ...

    def demote(self, key: str) -> IdleOutcome:
        """Lower the running workload ``key`` to preemptible at the lowest priority."""
        ...


def no_logs(key: str, backend_name: str) -> NotFoundError:
    """A world that keeps no logs: a 404 saying which does."""
    return NotFoundError(
        f"workload {key}: no logs here (this control plane runs on a {backend_name} "
        "cluster; logs are kept by `gpufleet serve --local`)"
    )


def no_terminal(key: str, backend_name: str) -> NotFoundError:
    """A world with no terminals: a 404 saying which has them."""
    return NotFoundError(
        f"workload {key}: no terminal to attach to here (this control plane runs on a "
        f"{backend_name} cluster; `gpufleet serve --local` runs `gpufleet run -it`)"
    )


#: The changes of :class:`WaitingChanges`, by name.
UNGATE, RESUME, SUSPEND = "ungate", "resume", "suspend"


def no_waiting_changes(key: str, backend_name: str, change: str) -> ConflictError:
    """A world where the workload's owner makes ``change`` (on Kubernetes: the pods' owner
    removes their gates, the Job's own update suspends or resumes it): a 409 saying how."""
    if change == UNGATE:
        return ConflictError(
            f"workload {key}: on a {backend_name} cluster the pods' owner removes their "
            "scheduling gates (kubectl patch, or the controller that set them); the scheduler "
            "picks them up then"
        )
    suspend = "true" if change == SUSPEND else "false"
    return ConflictError(
        f"workload {key}: on a {backend_name} cluster the Job's own update suspends "
        f'or resumes it (kubectl patch job NAME -p \'{{"spec":{{"suspend":{suspend}}}}}\')'
    )
