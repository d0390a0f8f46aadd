"""What a scheduling core knows about its queues, as numbers: usage, borrowed, share, counts.

Shared by every edge that reports queue status (the control plane's API, the Kubernetes
Queue status): computed from the core's view of what runs and what waits
(:meth:`~gpufleet.scheduling.core.SchedulerCore.view`; a workload waiting out a backoff counts
as pending), in model units (milli-CPU, MiB, milli-GPU). It formats nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.view import SchedulerView


@dataclass(frozen=True, slots=True)
class QueueNumbers:
    name: str
    #: Its whole subtree's usage, per resource key.
    usage: dict[str, int] = field(default_factory=dict)
    #: Usage beyond its nominal quota.
    borrowed: dict[str, int] = field(default_factory=dict)
    share: float = 0.0
    pending: int = 0
    running: int = 0


def queue_numbers(
    core: SchedulerCore, view: SchedulerView | None = None
) -> dict[str, QueueNumbers]:
    """Each queue's numbers, from ``view`` (the core's, taken now, unless given)."""
    queues = core.quotas.queues
    children: dict[str, list[str]] = {}
    for queue in queues.values():
        if queue.parent is not None:
            children.setdefault(queue.parent, []).append(queue.name)
    view = view or core.view()
    own: dict[str, dict[str, int]] = {name: {} for name in queues}
    running: dict[str, int] = dict.fromkeys(queues, 0)
    for workload in view.running:
        name = workload.queue
        running[name] = running.get(name, 0) + 1
        bucket = own.setdefault(name, {})
        for resource, amount in workload.usage.items():
            bucket[resource] = bucket.get(resource, 0) + amount
    pending: dict[str, int] = dict.fromkeys(queues, 0)
    for waiting in view.waiting:
        pending[waiting.queue] = pending.get(waiting.queue, 0) + 1

    def subtree(name: str) -> dict[str, int]:
        total = dict(own.get(name, {}))
        for child in children.get(name, ()):
            for resource, amount in subtree(child).items():
                total[resource] = total.get(resource, 0) + amount
        return total

    out: dict[str, QueueNumbers] = {}
    for name, queue in queues.items():
        usage = {k: v for k, v in sorted(subtree(name).items()) if v}
        borrowed = {
            k: usage[k] - queue.nominal.get(k, 0)
            for k in usage
            if usage[k] > queue.nominal.get(k, 0) and (queue.nominal or queue.parent)
        }
        share = core.quotas.tree.share(name)[-1] if core.quotas.tree.keys else 0.0
        out[name] = QueueNumbers(
            name,
            usage,
            borrowed,
            round(float(share), 4),
            pending.get(name, 0),
            running.get(name, 0),
        )
    return out
