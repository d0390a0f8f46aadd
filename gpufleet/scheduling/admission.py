"""Admission: may a workload start now under its queue's quota and its namespace's caps?

Wraps the :class:`~gpufleet.scheduling.quota.QuotaTree` with what the cycle needs: the quota
usage of a workload (before placement from its requests; after placement exactly, GPUs counted
per model of the nodes they landed on), Kubernetes ResourceQuota caps per namespace, and
snapshots so that preemption can try evictions and undo them.

What it does not do: place pods (the engine) or choose victims (:mod:`.preemption`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from gpufleet.model import MILLI_PER_GPU, Node, Pod
from gpufleet.model.queues import DEFAULT_QUEUE as DEFAULT_QUEUE  # where it was
from gpufleet.model.queues import (
    Queue,
    ResourceQuota,
    implicit_default_queue,
    queue_ancestors,
    queue_named_by,
)
from gpufleet.model.resources import CPU, GPU, MEMORY, gpu_model_key
from gpufleet.model.workload import Workload
from gpufleet.scheduling.config import AdmissionConfig as AdmissionConfig  # where it was
from gpufleet.scheduling.engine import Bound
from gpufleet.scheduling.quota import IntArray, ModelKeys, QuotaCheck, QuotaTree, Verdict


def cluster_capacity(nodes: Iterable[Node]) -> dict[str, int]:
    """Total CPU, memory, milli-GPU, milli-GPU per model and extended resources (``rdma/hca``)
    of ``nodes`` (the root of quotas)."""
    capacity: dict[str, int] = {CPU: 0, MEMORY: 0, GPU: 0}
    for node in nodes:
        capacity[CPU] += node.cpu_milli
        capacity[MEMORY] += node.memory_mib
        for name, units in node.extended:
            capacity[name] = capacity.get(name, 0) + units
        usable = [g for g in node.gpus if not g.partitioned]
        capacity[GPU] += len(usable) * MILLI_PER_GPU
        for gpu in usable:
            key = gpu_model_key(gpu.model)
            capacity[key] = capacity.get(key, 0) + MILLI_PER_GPU
    return capacity


def model_quota_warnings(queues: Mapping[str, Queue], models: Iterable[str]) -> list[str]:
    """Per-model quotas that no GPU of ``models`` counts under (a misspelt model, or one the
    cluster does not have), one sentence each, naming the queues that name them."""
    named = {k for q in queues.values() for k in (*q.nominal, *q.borrowing_limit, *q.lending_limit)}
    present = sorted(set(models))
    out = []
    for key in ModelKeys(named).unmatched(present):
        holders = sorted(
            name
            for name, q in queues.items()
            if key in q.nominal or key in q.borrowing_limit or key in q.lending_limit
        )
        out.append(
            f"quota {key} (queue {', '.join(holders)}) matches no node's GPU model "
            f"(models: {', '.join(present) or 'none'}); model names match GPU Feature "
            "Discovery products by prefix, e.g. H100 covers NVIDIA-H100-80GB-HBM3"
        )
    return out


def requested(pods: Sequence[Pod], whole_milli: int = MILLI_PER_GPU) -> dict[str, int]:
    """What pods ask before they are placed, as the least they can hold once placed (GPU
    model unknown; memory shares count 0; a whole GPU ``whole_milli``: less than a device
    where some node time-slices its GPUs, see :mod:`gpufleet.model.sharing`)."""
    cpu = memory = gpu = 0
    extended: dict[str, int] = {}
    for pod in pods:  # one pass: every tried workload's request is summed so
        cpu += pod.cpu_milli
        memory += pod.memory_mib
        request = pod.gpu
        gpu += request.count * (request.milli if request.is_shared else whole_milli)
        for name, units in pod.extended:
            extended[name] = extended.get(name, 0) + units
    return {CPU: cpu, MEMORY: memory, GPU: gpu, **extended}


def used(
    bound: Sequence[Bound],
    models: Sequence[str | None],
    key_of: Callable[[str | None], str | None],
) -> dict[str, int]:
    """What placed pods hold: GPUs counted in total and under the per-model quota key of their
    node's GPU model (``key_of``: a :class:`~gpufleet.scheduling.quota.ModelKeys`)."""
    usage: dict[str, int] = {CPU: 0, MEMORY: 0, GPU: 0}
    for placed, model in zip(bound, models, strict=True):
        allocation = placed.allocation
        usage[CPU] += allocation.cpu_milli
        usage[MEMORY] += allocation.memory_mib
        milli = allocation.gpu_milli
        usage[GPU] += milli
        key = key_of(model) if milli else None
        if key is not None:
            usage[key] = usage.get(key, 0) + milli
        for name, units in placed.pod.extended:
            usage[name] = usage.get(name, 0) + units
    return usage


#: Memoised quota verdicts kept at most (over all usage versions seen lately).
_MEMO_SIZE = 8192

#: What :meth:`Quotas.snapshot` takes: usage, non-preemptible usage, namespace usage, and the
#: usage's version (restoring the usage restores it, so what was memoised for it holds again).
QuotaSnapshot = tuple[IntArray, IntArray, dict[str, dict[str, int]], int]


class Quotas:
    """Queue quotas and namespace caps, with their current usage."""

    def __init__(
        self,
        queues: Mapping[str, Queue],
        capacity: Mapping[str, int],
        resource_quotas: Iterable[ResourceQuota] = (),
    ) -> None:
        all_queues = dict(queues)
        if DEFAULT_QUEUE not in all_queues:
            all_queues[DEFAULT_QUEUE] = implicit_default_queue()
        self.queues = all_queues
        #: What the cluster has now (the root of quotas), kept in step with the nodes.
        self.capacity = dict(capacity)
        self.tree = QuotaTree(all_queues, capacity)
        #: Usage of non-preemptible work only, per queue (its subtree), like ``tree.usage``:
        #: KAI's rule keeps it within nominal quota, so that reclaiming every preemptible
        #: workload of a queue always brings the queue back within nominal.
        self.pinned_usage = np.zeros_like(self.tree.usage)
        self.namespace_caps = {rq.namespace: dict(rq.hard) for rq in resource_quotas}
        self.namespace_usage: dict[str, dict[str, int]] = {}
        self.default_for = {ns: q.name for q in all_queues.values() for ns in q.namespaces}
        #: Each queue's ancestors' names (whose namespaces it admits when it names none).
        self.ancestors = {name: queue_ancestors(all_queues, name) for name in all_queues}
        #: Verdicts of :meth:`check` and :meth:`within_nominal` by usage version and question
        #: (a cycle asks the same of many workloads of one queue while no usage changes; trials
        #: go through other versions and come back to it).
        self._checks: dict[tuple[object, ...], QuotaCheck] = {}
        self._nominal: dict[tuple[object, ...], bool] = {}

    def _bound_memo(self) -> None:
        if len(self._checks) + len(self._nominal) > _MEMO_SIZE:
            self._checks.clear()
            self._nominal.clear()

    def refusal(self, workload: Workload) -> tuple[str, str] | None:
        """Why ``workload``'s queue refuses it: (reason, message), or None when it admits its
        namespace and priority class (:meth:`~gpufleet.model.queues.Queue.refusal`)."""
        name = workload.queue
        return self.queues[name].refusal(
            workload.namespace, workload.priority_class, self.ancestors[name]
        )

    def queue_for(self, pod: Pod, admitted_only: bool = False) -> str:
        """The queue of a lone pod: its queue label, its namespace's default, or ``default``.
        ``admitted_only``: the label counts only if that queue admits the pod's namespace (a
        pod placed without gpufleet charges no queue that would not admit it)."""
        named = queue_named_by(pod.labels)
        queue = None if named is None else self.queues.get(named)
        if queue is not None and (
            not admitted_only or queue.admits_namespace(pod.namespace, self.ancestors[queue.name])
        ):
            return queue.name
        return self.default_for.get(pod.namespace, DEFAULT_QUEUE)

    def change_capacity(self, nodes: Iterable[Node], sign: int) -> bool:
        """``nodes`` joined the cluster (``sign`` 1) or left it (-1): the root of quotas grows
        or shrinks by their capacity, so that a queue may use nodes an autoscaler adds (and
        not those gone); whether any quota's limit changed."""
        for key, amount in cluster_capacity(nodes).items():
            self.capacity[key] = self.capacity.get(key, 0) + sign * amount
        if not self.tree.set_capacity(self.capacity):
            return False
        self._checks.clear()
        self._nominal.clear()
        return True

    def vector(self, usage: Mapping[str, int]) -> IntArray:
        return self.tree.vector(usage)

    def check(
        self,
        workload: Workload,
        usage: Mapping[str, int],
        amounts: tuple[int, ...] | None = None,
    ) -> QuotaCheck:
        """Quota of the workload's queue (and the queue's non-preemptible work within its
        nominal quota, on every level, for non-preemptible work), then the hard caps of its
        namespace. ``amounts``: ``tree.limited(usage)`` if the caller has it."""
        self._bound_memo()
        if amounts is None:
            amounts = self.tree.limited(usage)
        # Only the keys quotas limit count, and the namespace only where it has caps.
        capped = workload.namespace in self.namespace_caps
        memo_key = (
            self.tree.version,
            workload.queue,
            workload.preemptible,
            amounts,
            (workload.namespace, *sorted(usage.items())) if capped else None,
        )
        known = self._checks.get(memo_key)
        if known is None:
            known = self._checks[memo_key] = self._check(workload, usage, amounts)
        return known

    def owed_but_taken(
        self, workload: Workload, usage: Mapping[str, int], refused: QuotaCheck
    ) -> bool:
        """Whether ``refused`` (:meth:`check` of ``usage`` for this workload) stops it although
        it stays within its queue's nominal quota on every level: the GPUs it is owed are
        taken (lent to other queues, or the cluster holds fewer than its quotas promise), and
        it waits for them to free as for room on the nodes. Not when it would borrow (what it
        borrows is not owed to it), nor when the nominal rule of non-preemptible work or a
        namespace's cap refuses it."""
        if refused.admits or refused.scope != "queue" or refused.why:
            return False
        return self.within_nominal(workload.queue, usage)

    def _check(
        self, workload: Workload, usage: Mapping[str, int], amounts: tuple[int, ...]
    ) -> QuotaCheck:
        check = self.tree.check_amounts(workload.queue, amounts)
        if check.admits and not workload.preemptible:
            excess = self.tree.nominal_excess_amounts(workload.queue, amounts, self.pinned_usage)
            if excess is not None:
                return replace(excess, why="non-preemptible work stays within nominal quota")
        if not check.admits:
            return check
        caps = self.namespace_caps.get(workload.namespace)
        if caps:
            current = self.namespace_usage.get(workload.namespace, {})
            for key, limit in caps.items():
                want = usage.get(key, 0)
                if want and current.get(key, 0) + want > limit:
                    return QuotaCheck(
                        Verdict.EXCEEDS,
                        workload.namespace,
                        key,
                        current.get(key, 0),
                        want,
                        limit,
                        "ResourceQuota",
                        "namespace",
                    )
        return check

    def charge(self, workload: Workload, usage: Mapping[str, int]) -> None:
        vec = self.tree.vector(usage)
        self.tree.add(workload.queue, vec)
        if not workload.preemptible:
            for i in self.tree.paths[self.tree.index[workload.queue]]:
                self.pinned_usage[i] += vec
        if workload.namespace in self.namespace_caps:
            current = self.namespace_usage.setdefault(workload.namespace, {})
            for key, amount in usage.items():
                current[key] = current.get(key, 0) + amount

    def refund(self, workload: Workload, usage: Mapping[str, int]) -> None:
        vec = self.tree.vector(usage)
        self.tree.remove(workload.queue, vec)
        if not workload.preemptible:
            for i in self.tree.paths[self.tree.index[workload.queue]]:
                self.pinned_usage[i] -= vec
        if workload.namespace in self.namespace_caps:
            current = self.namespace_usage[workload.namespace]
            for key, amount in usage.items():
                current[key] -= amount

    def refund_all(self, items: Iterable[tuple[Workload, Mapping[str, int]]]) -> None:
        """:meth:`refund` of each (workload, usage), summed per queue first (a victim search
        refunds every candidate at once)."""
        tree = self.tree
        no_amounts = (0,) * len(tree.keys)
        by_queue: dict[str, list[int]] = {}
        pinned: dict[str, list[int]] = {}
        for workload, usage in items:
            amounts = tree.limited(usage)
            for into in (by_queue, pinned) if not workload.preemptible else (by_queue,):
                total = into.setdefault(workload.queue, list(no_amounts))
                for j, amount in enumerate(amounts):
                    total[j] += amount
            if workload.namespace in self.namespace_caps:
                current = self.namespace_usage[workload.namespace]
                for key, amount in usage.items():
                    current[key] -= amount
        for queue, total in by_queue.items():
            tree.remove(queue, np.array(total, np.int64))
        for queue, total in pinned.items():
            for i in tree.paths[tree.index[queue]]:
                self.pinned_usage[i] -= np.array(total, np.int64)

    def snapshot(self) -> QuotaSnapshot:
        return (
            self.tree.usage.copy(),
            self.pinned_usage.copy(),
            {ns: dict(u) for ns, u in self.namespace_usage.items()},
            self.tree.version,
        )

    def restore(self, snapshot: QuotaSnapshot) -> None:
        self.tree.usage[:] = snapshot[0]
        self.tree.version = snapshot[3]
        self.pinned_usage[:] = snapshot[1]
        self.namespace_usage = {ns: dict(u) for ns, u in snapshot[2].items()}

    def borrowing_queues(self) -> set[str]:
        flags = self.tree.borrowing()
        return {name for name, i in self.tree.index.items() if flags[i]}

    def subtree_borrowing(self, queue: str) -> bool:
        """Does ``queue`` or one of its ancestors use more than its nominal quota?"""
        flags = self.tree.borrowing()
        return any(bool(flags[i]) for i in self.tree.paths[self.tree.index[queue]])

    def within_nominal(
        self, queue: str, usage: Mapping[str, int], amounts: tuple[int, ...] | None = None
    ) -> bool:
        """Would ``queue`` stay within nominal quota on every level with ``usage`` more?
        ``amounts``: ``tree.limited(usage)`` if the caller has it."""
        self._bound_memo()
        if amounts is None:
            amounts = self.tree.limited(usage)
        memo_key = (self.tree.version, queue, amounts)
        known = self._nominal.get(memo_key)
        if known is None:
            excess = self.tree.nominal_excess_amounts(queue, amounts)
            known = self._nominal[memo_key] = excess is None
        return known

    def zero(self) -> IntArray:
        return np.zeros(len(self.tree.keys), np.int64)
