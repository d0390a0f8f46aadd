"""What a scheduling core holds, as the numbers of the metrics' gauges.

Owns :func:`read_state`: from a core, the workloads waiting (by queue and why) and their pods,
the workloads running, the GPUs held (by queue and GPU model), those of the nodes and those it
withholds as unhealthy (by node and index), and each
queue's nominal quota, usage, borrowed amount and weighted share, as a :class:`SchedulerState`
of plain numbers in base units (cores, bytes, GPUs). It reads the core's view
(:meth:`~gpufleet.scheduling.core.SchedulerCore.view`), node table and quotas, and changes
nothing; it walks every waiting and running workload, so it is read when metrics are scraped,
not on every turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.control.gc_bursts import short_lived_burst
from gpufleet.control.status import queue_numbers
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.resources import CPU, GPU, GPU_MODEL_PREFIX, MEMORY
from gpufleet.scheduling.core import SchedulerCore

#: What a workload waits for when the core has not tried it yet.
UNTRIED = "untried"
#: A waiting workload whose victims are being evicted.
PREEMPTING = "preempting"
#: The model label of GPUs whose node names none.
UNKNOWN_MODEL = "unknown"
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """The numbers of :data:`gpufleet.metrics.families.SCHEDULER`'s gauges; keys are their
    label values, in the families' label order."""

    pending_workloads: Counter[tuple[str, str]] = field(default_factory=Counter)
    pending_pods: Counter[str] = field(default_factory=Counter)
    running_workloads: Counter[str] = field(default_factory=Counter)
    allocated_gpus: dict[tuple[str, str], float] = field(default_factory=dict)
    cluster_gpus: Counter[str] = field(default_factory=Counter)
    #: 1 per (node, GPU index) withheld as unhealthy.
    unhealthy_gpus: dict[tuple[str, str], float] = field(default_factory=dict)
    nominal_quota: dict[tuple[str, str], float] = field(default_factory=dict)
    usage: dict[tuple[str, str], float] = field(default_factory=dict)
    borrowed: dict[tuple[str, str], float] = field(default_factory=dict)
    weighted_share: dict[str, float] = field(default_factory=dict)


def base_unit(resource: str, amount: int) -> float:
    """A model amount (milli-CPU, MiB, milli-GPU, units) in its base unit (cores, bytes,
    GPUs, units)."""
    if resource in (CPU, GPU) or resource.startswith(GPU_MODEL_PREFIX):
        return amount / MILLI_PER_GPU
    if resource == MEMORY:
        return float(amount * MIB)
    return float(amount)


def read_state(core: SchedulerCore) -> SchedulerState:
    """See the module docstring."""
    # The view is made and dropped here, with no reference cycles (control.gc_bursts).
    with short_lived_burst():
        return _read(core)


def _read(core: SchedulerCore) -> SchedulerState:
    state = SchedulerState()
    view = core.view()
    for waiting in view.waiting:
        preempting = waiting.waiting_for == PREEMPTING
        reason = PREEMPTING if preempting else waiting.reason or UNTRIED
        state.pending_workloads[(waiting.queue, reason)] += 1
        state.pending_pods[waiting.queue] += waiting.pods
    milli: Counter[tuple[str, str]] = Counter()
    # Workloads being evicted hold their devices until their pods are gone.
    for admitted in (*view.running, *view.evicting):
        for model, held in admitted.gpu_milli.items():
            milli[(admitted.queue, model or UNKNOWN_MODEL)] += held
    state.allocated_gpus.update({k: v / MILLI_PER_GPU for k, v in milli.items()})
    table = core.table
    for row, node in enumerate(table.nodes):
        if node.gpu_count and table.alive[row]:
            state.cluster_gpus[node.gpu_model or UNKNOWN_MODEL] += node.gpu_count
    for row in table.unhealthy_rows():
        if table.alive[row]:
            name = table.nodes[row].name
            for index in table.unhealthy_indices(row):
                state.unhealthy_gpus[(name, str(index))] = 1.0
    for name, numbers in queue_numbers(core, view).items():
        _add(state.nominal_quota, name, core.quotas.queues[name].nominal)
        _add(state.usage, name, numbers.usage)
        _add(state.borrowed, name, numbers.borrowed)
        state.weighted_share[name] = numbers.share
        state.running_workloads[name] = numbers.running
        state.pending_pods.setdefault(name, 0)
    return state


def _add(into: dict[tuple[str, str], float], queue: str, amounts: Mapping[str, int]) -> None:
    for resource, amount in amounts.items():
        into[(queue, resource)] = base_unit(resource, amount)
