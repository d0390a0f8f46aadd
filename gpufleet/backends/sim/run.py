"""Run one simulation (cluster, workload, policy, seed) in fill or replay mode."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.fill import fill_order
from gpufleet.backends.sim.results import FillRun, ReplayRun
from gpufleet.control.loop import run as run_loop
from gpufleet.model import Node, Pod
from gpufleet.model.workload import TimedPod
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.target import TargetWorkload, typical_shapes

#: Called with (pods arrived so far, pods in all).
Progress = Callable[[int, int], None]
PROGRESS_EVERY = 500


def count_impossible(core: SchedulerCore, pods: Sequence[Pod]) -> int:
    """Pods that could not fit on any node even if the cluster were empty."""
    verdict: dict[tuple[object, ...], bool] = {}
    impossible = 0
    for pod in pods:
        fits = verdict.get(pod.signature)
        if fits is None:
            fits = verdict[pod.signature] = core.engine.fits_when_empty(pod)
        impossible += not fits
    return impossible


def _progress_hook(
    sim: SimulatedCluster, total: int, progress: Progress | None
) -> Callable[[], None] | None:
    if progress is None:
        return None
    counter = [0]

    def tick() -> None:
        counter[0] += 1
        if counter[0] % PROGRESS_EVERY == 0:
            progress(min(sim.arrivals_seen, total), total)

    return tick


def run_fill(
    nodes: Sequence[Node],
    trace: Sequence[Pod],
    policy: str,
    seed: int,
    target: TargetWorkload | None = None,
    inflation: float = 1.3,
    progress: Progress | None = None,
) -> FillRun:
    """The FGD protocol's fill-up experiment (see :mod:`gpufleet.backends.sim.fill`)."""
    started = time.perf_counter()
    target = target if target is not None else typical_shapes(trace)
    table = NodeTable(nodes)
    order = fill_order(trace, table.size, table.total_gpu_milli(), seed, inflation)
    core = SchedulerCore(
        table,
        make_policy(policy, table, PolicyContext(target, seed)),
        tie_rank=order.node_rank,
        explain=False,
    )
    impossible = count_impossible(core, order.pods)
    sim = SimulatedCluster(nodes, [TimedPod(p) for p in order.pods], Mode.FILL, target)
    run_loop(sim, core, _progress_hook(sim, len(order.pods), progress))
    if progress is not None:
        progress(len(order.pods), len(order.pods))
    return sim.recorder.fill_result(
        policy, seed, time.perf_counter() - started, len(order.pods), impossible
    )


def run_replay(
    nodes: Sequence[Node],
    workload: Sequence[TimedPod],
    policy: str,
    seed: int,
    target: TargetWorkload | None = None,
    progress: Progress | None = None,
) -> ReplayRun:
    """Time-based replay: arrivals at creation time, departures after their run time."""
    started = time.perf_counter()
    pods = [t.pod for t in workload]
    target = target if target is not None else typical_shapes(pods)
    table = NodeTable(nodes)
    import numpy as np

    rng = np.random.default_rng(seed)
    rank = np.empty(table.size, np.int64)
    rank[rng.permutation(table.size)] = np.arange(table.size)
    core = SchedulerCore(
        table, make_policy(policy, table, PolicyContext(target, seed)), tie_rank=rank
    )
    sim = SimulatedCluster(nodes, workload, Mode.REPLAY, target)
    run_loop(sim, core, _progress_hook(sim, len(workload), progress))
    if progress is not None:
        progress(len(workload), len(workload))
    never_ran = {key: sim.recorder.messages.get(key, "") for key in sim.pending}
    return sim.recorder.replay_result(
        policy, seed, time.perf_counter() - started, len(workload), never_ran
    )
