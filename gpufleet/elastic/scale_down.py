"""The node-pool autoscaler's scale-down: which nodes to drain and remove, and why the others
stay.

:func:`decide_scale_down` takes the cluster's nodes, the pods running on them (with their
placements and workloads), the pools, ``now``, when the last scale-up was asked for, and what
it returned last turn (:attr:`ScaleDownDecision.unneeded_since`); it returns
:class:`RemoveNode` actions with reasons in words, the timers to hand back next turn, and why
each pool node it kept is kept. Pure: a world calls it each turn.

What it follows. Cluster Autoscaler: a node is *unneeded* when the requests of its pods are
below ``utilization_threshold`` of its allocatable (the larger of CPU and memory; on a GPU node
its GPUs only, ``--scale-down-gpu-utilization-threshold``) and every pod on it can be placed on
the other nodes; it is removed once it has been unneeded for ``unneeded_time`` without a break
(``--scale-down-unneeded-time``, 10 minutes), never within ``delay_after_add`` of a scale-up
(``--scale-down-delay-after-add``), empty nodes up to ``max_empty`` a turn
(``--max-empty-bulk-delete``) and nodes that must be drained ``max_drain`` at a time
(``--max-drain-parallelism``, 1). Whether the pods fit elsewhere is asked of the scheduling
core's own placement (:class:`~gpufleet.scheduling.engine.PlacementEngine`, best-fit, with every
filter: taints, affinity, inter-pod rules, devices) on a trial of a snapshot; the nodes found
unneeded in one turn are simulated away one after the other, so that their pods never count on
room another removal takes (as CA does). Karpenter's consolidation: a pod annotated
``karpenter.sh/do-not-disrupt: "true"`` blocks its node, as does CA's
``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``; candidates are tried cheapest to
disrupt first (empty nodes, then the ones unneeded longest, then the least used, then the most
expensive pool's). A pool never goes below its minimum (0 allowed: pools scale to zero).

Where it differs. A node holding a pod of a gang (a workload of more than one pod that must run
together) or of a non-preemptible workload is never removed: evicting one pod would break the
gang, and non-preemptible work was promised it would not be interrupted. Karpenter's
replacement of a node by a cheaper one, PodDisruptionBudgets and DaemonSet pods are not
modelled; nodes of no known pool (by the ``gpufleet.dev/node-pool`` label) are never removed.

What it does not do: add nodes (:mod:`.nodepools`), or evict anything (the world drains the
node, and its pods are placed by the scheduler, wherever it then sees fit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.economics.runs import gpus_held
from gpufleet.model import Node, Placement, Pod
from gpufleet.model.nodepools import NODE_POOL_LABEL, NodePool
from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import PlacementEngine, Unschedulable
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies.bestfit import bestfit_policy
from gpufleet.scheduling.put_back import put_back

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


@dataclass(frozen=True, slots=True)
class ScaleDownConfig:
    """Cluster Autoscaler's knobs, with its defaults (see the module docstring)."""

    utilization_threshold: float = 0.5
    gpu_utilization_threshold: float = 0.5
    unneeded_time: float = 600.0
    delay_after_add: float = 600.0
    max_empty: int = 10
    max_drain: int = 1


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A pod running on ``placement.node``, and its workload."""

    pod: Pod
    placement: Placement
    workload: Workload


@dataclass(frozen=True, slots=True)
class RemoveNode:
    """Drain ``node`` (of ``pool``) and remove it; ``moves``: where its pods fit now (pod key
    -> node), as the trial placed them."""

    node: str
    pool: str
    reason: str
    moves: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScaleDownDecision:
    """What to remove; since when each pool node has been unneeded (hand it back next turn);
    and why each other pool node stays."""

    actions: tuple[RemoveNode, ...] = ()
    unneeded_since: Mapping[str, float] = field(default_factory=dict)
    kept: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Candidate:
    node: Node
    pool: NodePool
    pods: list[RunningPod]
    utilization: float
    what: str  # "GPUs" or "CPU and memory"


def decide_scale_down(
    nodes: Sequence[Node],
    running: Sequence[RunningPod],
    pools: Sequence[NodePool],
    now: float,
    unneeded_since: Mapping[str, float] | None = None,
    last_scale_up: float | None = None,
    config: ScaleDownConfig | None = None,
    snapshot: PlacementEngine | None = None,
) -> ScaleDownDecision:
    """See the module docstring. ``snapshot``: a placement engine whose table already holds
    ``nodes`` with ``running`` on them (the scheduler's own, at the end of its turn), used on
    a trial that is rolled back before this returns; None: one is built, when some node's pods
    must be tried elsewhere."""
    config = config or ScaleDownConfig()
    if snapshot is None:
        return _decide(nodes, running, pools, now, unneeded_since, last_scale_up, config, None)
    table = snapshot.table
    mark = table.begin_trial()
    try:
        return _decide(nodes, running, pools, now, unneeded_since, last_scale_up, config, snapshot)
    finally:
        table.rollback(mark)


def _decide(
    nodes: Sequence[Node],
    running: Sequence[RunningPod],
    pools: Sequence[NodePool],
    now: float,
    unneeded_since: Mapping[str, float] | None,
    last_scale_up: float | None,
    config: ScaleDownConfig,
    snapshot: PlacementEngine | None,
) -> ScaleDownDecision:
    previous = unneeded_since or {}
    by_name = {pool.name: pool for pool in pools}
    engine: PlacementEngine | None = snapshot

    def trial_engine() -> PlacementEngine:
        nonlocal engine
        if engine is None:
            engine = _snapshot(nodes, running)
        return engine

    gone: set[str] = set()  # simulated away, in the order they were found unneeded
    on_node: dict[str, list[RunningPod]] = {node.name: [] for node in nodes}
    for run in running:
        if run.placement.node in on_node:
            on_node[run.placement.node].append(run)
    members: dict[str, int] = {}
    candidates: list[_Candidate] = []
    for node in nodes:
        pool = by_name.get(node.labels.get(NODE_POOL_LABEL, ""))
        if pool is None:
            continue
        members[pool.name] = members.get(pool.name, 0) + 1
        pods = on_node[node.name]
        used, what = _utilization(node, pods)
        candidates.append(_Candidate(node, pool, pods, used, what))
    candidates.sort(
        key=lambda c: (
            bool(c.pods),
            previous.get(c.node.name, now),
            c.utilization,
            -c.pool.hourly_price,
            c.node.name,
        )
    )
    cooling = last_scale_up is not None and now < last_scale_up + config.delay_after_add
    actions: list[RemoveNode] = []
    kept: dict[str, str] = {}
    since: dict[str, float] = {}
    empty_removed = drained = 0
    for candidate in candidates:
        node, pool = candidate.node, candidate.pool
        # What runs there now, pods moved in by an earlier simulated removal included.
        candidate.pods = on_node[node.name]
        candidate.utilization, candidate.what = _utilization(node, candidate.pods)
        why_not = _blocked(candidate, config)
        if why_not is None and members[pool.name] <= pool.min_nodes:
            why_not = f"its pool {pool.name} is at its minimum of {pool.min_nodes} node(s)"
        moved: list[RunningPod] = []
        if why_not is None and candidate.pods:
            why_not = _move_elsewhere(trial_engine(), candidate, gone, moved)
        if why_not is not None:
            kept[node.name] = why_not
            continue
        for run in moved:
            on_node[run.placement.node].append(run)
        moves = {run.pod.key: run.placement.node for run in moved}
        # Unneeded: simulated away from here on (its pods now count where they moved).
        gone.add(node.name)
        members[pool.name] -= 1
        start = since[node.name] = previous.get(node.name, now)
        waited = now - start
        empty = not candidate.pods
        if cooling:
            assert last_scale_up is not None
            resumes = last_scale_up + config.delay_after_add
            kept[node.name] = (
                f"unneeded since {start:g} s; scale-down waits until {resumes:g} s "
                f"({config.delay_after_add:g} s after the last scale-up)"
            )
        elif waited < config.unneeded_time:
            kept[node.name] = (
                f"unneeded for {waited:g} s of the {config.unneeded_time:g} s before removal"
            )
        elif empty and empty_removed >= config.max_empty:
            kept[node.name] = f"unneeded, but {config.max_empty} empty node(s) go this turn"
        elif not empty and drained >= config.max_drain:
            kept[node.name] = f"unneeded, but {config.max_drain} node(s) are drained at a time"
        else:
            empty_removed += empty
            drained += not empty
            actions.append(
                RemoveNode(node.name, pool.name, _reason(candidate, waited, moves), moves)
            )
    return ScaleDownDecision(tuple(actions), since, kept)


def _snapshot(nodes: Sequence[Node], running: Sequence[RunningPod]) -> PlacementEngine:
    """The cluster as the core sees it: every running pod on the devices it holds."""
    table = NodeTable(list(nodes))
    engine = PlacementEngine(table, bestfit_policy())
    for run in running:
        row = table.row_of.get(run.placement.node)
        if row is None or not table.alive[row]:
            continue
        put_back(table, run.pod, run.placement, engine.demand(run.pod))
    return engine


def _utilization(node: Node, pods: Sequence[RunningPod]) -> tuple[float, str]:
    """The share of its allocatable the pods on ``node`` request: its GPUs on a GPU node,
    else the larger of CPU and memory."""
    if node.gpu_count:
        held = sum(gpus_held(r.placement.gpu_milli, r.placement.mig_slices, node)[0] for r in pods)
        return held / node.gpu_count, "GPUs"
    cpu = sum(r.pod.cpu_milli for r in pods) / max(node.cpu_milli, 1)
    memory = sum(r.pod.memory_mib for r in pods) / max(node.memory_mib, 1)
    return max(cpu, memory), "CPU and memory"


def _blocked(candidate: _Candidate, config: ScaleDownConfig) -> str | None:
    """Why the node must stay whatever the room elsewhere (None: it need not)."""
    for run in candidate.pods:
        pod, workload = run.pod, run.workload
        if workload.gang_size > 1:
            return f"it holds pod {pod.key} of gang {workload.key}"
        if not workload.preemptible:
            return f"it holds pod {pod.key} of non-preemptible workload {workload.key}"
        if pod.annotations.get(SAFE_TO_EVICT, "").strip().lower() == "false":
            return f'pod {pod.key} is annotated {SAFE_TO_EVICT}: "false"'
        if pod.annotations.get(DO_NOT_DISRUPT, "").strip().lower() == "true":
            return f'pod {pod.key} is annotated {DO_NOT_DISRUPT}: "true"'
    threshold = (
        config.gpu_utilization_threshold
        if candidate.node.gpu_count
        else config.utilization_threshold
    )
    if candidate.utilization >= threshold:
        return (
            f"{candidate.utilization:.0%} of its {candidate.what} requested "
            f"(at or above {threshold:.0%})"
        )
    return None


def _move_elsewhere(
    engine: PlacementEngine, candidate: _Candidate, gone: set[str], moved: list[RunningPod]
) -> str | None:
    """Place the candidate's pods on the other nodes that stay, on a trial kept when all fit
    (None) and rolled back otherwise (why not)."""
    table = engine.table
    allowed = table.alive[: table.size].copy()
    for name in (candidate.node.name, *gone):
        row = table.row_of.get(name)
        if row is not None:
            allowed[row] = False
    mark = table.begin_trial()
    for run in candidate.pods:
        placed = engine.place(run.pod, explain=False, restrict=allowed)
        if isinstance(placed, Unschedulable):
            table.rollback(mark)
            moved.clear()
            return f"its pod {run.pod.key} fits on no other node"
        moved.append(RunningPod(run.pod, placed.placement, run.workload))
    table.commit(mark)
    return None


def _reason(candidate: _Candidate, waited: float, moves: Mapping[str, str]) -> str:
    if not candidate.pods:
        return f"empty for {waited:g} s"
    targets = sorted(set(moves.values()))
    return (
        f"{candidate.utilization:.0%} of its {candidate.what} requested for {waited:g} s; its "
        f"{len(candidate.pods)} pod(s) fit on {', '.join(targets)}"
    )


__all__ = [
    "DO_NOT_DISRUPT",
    "SAFE_TO_EVICT",
    "RemoveNode",
    "RunningPod",
    "ScaleDownConfig",
    "ScaleDownDecision",
    "decide_scale_down",
]
