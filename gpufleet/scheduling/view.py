"""The core's state as others may read it: frozen values, no live objects.

:meth:`SchedulerCore.view <gpufleet.scheduling.core.SchedulerCore.view>` returns a
:class:`SchedulerView`: what waits (:class:`WaitingWorkload`: why, for what resources, since
when, where it stands in its queue, when it may start) and what runs and where
(:class:`AdmittedWorkload`), as of the core's last cycle. An autoscaler, a budget, a status
page or a metrics exporter reads this instead of the core's parts, which change under it and
whose names are the core's own. :class:`PendingExplanation` is the older, narrower answer to
"why does it wait", kept for the edges that show it.

What it does not do: compute anything (:mod:`.explain` fills the waiting side).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.running import RunningWorkload


@dataclass(frozen=True, slots=True)
class PendingExplanation:
    """Why a workload waits, where it stands in its queue, and when it may start."""

    workload: str
    queue: str
    #: 1 for the next workload its queue will try.
    position: int
    #: "quota", "capacity", "preempting" (victims are leaving), "backoff", "queue order" (behind
    #: the first workload of a StrictFIFO queue), "not tried yet", the name of the admission
    #: check that refused it, or "SchedulingGated" / "Suspended" for a workload held out of its
    #: queue (a pod with scheduling gates, a suspended Job), behind all its queue tries.
    waiting_for: str
    message: str
    #: Seconds of simulated or wall time; None when no plan gives one.
    estimated_start: float | None
    #: It can never fit on the cluster as it stands (Kueue: Inadmissible): no estimate.
    never: bool = False


@dataclass(frozen=True, slots=True)
class WaitingWorkload:
    """A workload waiting to be admitted (its :class:`PendingExplanation`, and more)."""

    key: str
    queue: str
    namespace: str
    #: Its effective priority now (its own, raised by aging when that is on).
    priority: int
    #: Its pods, those that must start together (the gang), and what the gang asks, per
    #: resource key as quotas count it (milli-CPU, MiB, milli-GPU, extended resources);
    #: read-only.
    pods: int
    gang_size: int
    requests: Mapping[str, int]
    #: When it joined the queue this time (the core's clock), and when it first arrived.
    since: float
    queued: float
    #: Times the cycle tried it since it joined the queue.
    attempts: int
    #: 1 for the next workload its queue will try.
    position: int
    #: As :attr:`PendingExplanation.waiting_for`, and what it was told; ``reason`` is why it
    #: was last parked ("quota", "capacity", "preempting", "backoff", an admission check's
    #: name; "" before its first attempt), which ``waiting_for`` words for people.
    waiting_for: str
    message: str
    reason: str
    #: Not tried before this time (a backoff after it failed to start).
    not_before: float
    #: None when no plan gives one, or when the view was asked without estimates.
    estimated_start: float | None
    #: The running workloads it preempted and waits for (empty unless it is preempting).
    victims: tuple[str, ...]
    #: As :attr:`PendingExplanation.never`.
    never: bool = False

    def explanation(self) -> PendingExplanation:
        return PendingExplanation(
            self.key,
            self.queue,
            self.position,
            self.waiting_for,
            self.message,
            self.estimated_start,
            self.never,
        )


@dataclass(frozen=True, slots=True)
class AdmittedWorkload:
    """A workload the core admitted: running, or being evicted."""

    key: str
    queue: str
    namespace: str
    priority: int
    preemptible: bool
    #: What it holds, per resource key as quotas count it; read-only.
    usage: Mapping[str, int]
    #: Pod key -> node, for each of its pods still bound; and the milli-GPU they hold per
    #: GPU model of their nodes ("" where a node names none); read-only.
    nodes: Mapping[str, str]
    gpu_milli: Mapping[str, int]
    started: float
    queued: float
    #: Every pod of its gang reported ready.
    ready: bool
    #: Why it is being evicted (None while it runs).
    evicted_for: str | None


def admitted(running: RunningWorkload, table: NodeTable) -> AdmittedWorkload:
    workload = running.workload
    models = table.row_models
    gpu_milli: dict[str, int] = {}
    nodes: dict[str, str] = {}
    for key, bound in running.bound.items():
        nodes[key] = bound.placement.node
        allocation = bound.allocation
        held = allocation.gpu_milli
        if held:
            model = models[allocation.row] or ""
            gpu_milli[model] = gpu_milli.get(model, 0) + held
    return AdmittedWorkload(
        running.key,
        workload.queue,
        workload.namespace,
        workload.priority,
        workload.preemptible,
        MappingProxyType(dict(running.usage)),
        MappingProxyType(nodes),
        MappingProxyType(gpu_milli),
        running.started,
        running.queued,
        not running.unready,
        running.evicted_for,
    )


@dataclass(frozen=True, slots=True)
class SchedulerView:
    """What the core holds, as of its last cycle (see the module docstring)."""

    now: float
    #: Queue by queue (by name), each in the order its workloads will be tried.
    waiting: tuple[WaitingWorkload, ...]
    running: tuple[AdmittedWorkload, ...]
    evicting: tuple[AdmittedWorkload, ...]
