"""One way to build a scheduling core, shared by every backend.

Owns the construction of a :class:`~gpufleet.scheduling.core.SchedulerCore` from nodes, queues,
quotas, a policy name, a seed and a scheduling profile (which plugins at each extension point;
the default one unless given): the node table, the policy with its target workload, and the
seeded tie-break order of the nodes. The simulator and the Kubernetes backend both build their
cores here, so the same state gives the same decisions in both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from gpufleet.model import GpuRequest, Node, Pod
from gpufleet.model.queues import Queue, ResourceQuota
from gpufleet.model.times import TimeFormat
from gpufleet.scheduling.config import AdmissionConfig
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile
from gpufleet.scheduling.registry import Registry
from gpufleet.scheduling.target import TargetWorkload, typical_shapes

IntArray = np.ndarray[tuple[int], np.dtype[np.int64]]


def tie_rank(table: NodeTable, seed: int) -> IntArray:
    """A random tie-break order of the nodes (so equal scores do not favour the first)."""
    rng = np.random.default_rng(seed)
    rank = np.empty(table.size, np.int64)
    rank[rng.permutation(table.size)] = np.arange(table.size)
    return rank


def target_of(pods: Iterable[Pod], counts: Sequence[float] | None = None) -> TargetWorkload:
    """The target workload of the pods known (one whole GPU when none are); ``counts``: how
    many pods each of ``pods`` stands for (default: one)."""
    known = list(pods)
    if not known:
        known, counts = [Pod("typical", cpu_milli=1000, gpu=GpuRequest.whole(1))], None
    return typical_shapes(known, weights=counts)


def build_core(
    nodes: Sequence[Node],
    policy: str,
    seed: int = 0,
    queues: Mapping[str, Queue] | None = None,
    resource_quotas: Iterable[ResourceQuota] = (),
    config: AdmissionConfig | None = None,
    target: TargetWorkload | None = None,
    explain: bool = True,
    *,
    time_format: TimeFormat,
    profile: Profile = DEFAULT_PROFILE,
    registry: Registry | None = None,
) -> SchedulerCore:
    """A core over ``nodes``; ``time_format`` says how the instants in its messages read, and
    so which clock ``now`` is: ``simulated_time`` for a simulated cluster (seconds since it
    started), ``wall_clock_time`` where the clock is the wall clock (Kubernetes, ``serve
    --local``); no default, so that no world gets another's. ``profile`` names its plugins,
    looked up in ``registry`` (by default the built-in plugins and policies)."""
    registry = registry or Registry.default()
    table = NodeTable(list(nodes))
    context = PolicyContext(target or target_of(()), seed)
    return SchedulerCore(
        table,
        make_policy(policy, table, context, registry.policies),
        tie_rank=tie_rank(table, seed),
        explain=explain,
        queues=dict(queues or {}),
        resource_quotas=resource_quotas,
        config=config,
        time_format=time_format,
        profile=profile,
        registry=registry,
    )
