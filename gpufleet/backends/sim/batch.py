"""Run many simulations (policies x seeds) on a process pool, with live progress.

Each worker process receives the cluster and workload once (pool initializer), then runs the
(policy, seed) tasks it is given and reports progress through a queue, so the caller can draw
one progress bar per run. With one worker, or one run, everything runs in this process.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

from gpufleet.backends.sim.cluster import Mode
from gpufleet.backends.sim.results import FillRun, ReplayRun
from gpufleet.backends.sim.run import run_fill, run_replay
from gpufleet.model import Node
from gpufleet.model.workload import TimedPod
from gpufleet.scheduling.target import TargetWorkload

RunResult = FillRun | ReplayRun
#: Called with (task index, pods done, pods in all).
ProgressCallback = Callable[[int, int, int], None]


@dataclass(frozen=True, slots=True)
class Task:
    policy: str
    seed: int


@dataclass(frozen=True, slots=True)
class Scenario:
    """What every task shares: the cluster, the workload, the mode and its knobs."""

    nodes: tuple[Node, ...]
    workload: tuple[TimedPod, ...]
    mode: Mode
    target: TargetWorkload | None = None
    inflation: float = 1.3


_scenario: Scenario | None = None
_progress: queue.Queue[tuple[int, int, int]] | None = None


def _init_worker(scenario: Scenario, progress: queue.Queue[tuple[int, int, int]] | None) -> None:
    global _scenario, _progress
    _scenario = scenario
    _progress = progress


def run_task(index: int, task: Task) -> RunResult:
    """Run one task against the scenario installed in this process."""
    scenario = _scenario
    assert scenario is not None, "worker not initialised"
    channel = _progress

    def report(done: int, total: int) -> None:
        if channel is not None:
            channel.put((index, done, total))

    if scenario.mode is Mode.FILL:
        return run_fill(
            scenario.nodes,
            [t.pod for t in scenario.workload],
            task.policy,
            task.seed,
            scenario.target,
            scenario.inflation,
            report,
        )
    return run_replay(
        scenario.nodes, scenario.workload, task.policy, task.seed, scenario.target, report
    )


def run_many(
    scenario: Scenario,
    tasks: Sequence[Task],
    workers: int,
    on_progress: ProgressCallback | None = None,
) -> list[RunResult]:
    """Run ``tasks`` (in order of the returned list) on ``workers`` processes."""
    if workers <= 1 or len(tasks) <= 1:
        local: queue.Queue[tuple[int, int, int]] = queue.Queue()
        _init_worker(scenario, local)
        results = []
        for index, task in enumerate(tasks):
            stop = _drain_in_thread(local, on_progress)
            try:
                results.append(run_task(index, task))
            finally:
                stop()
        return results
    manager = multiprocessing.Manager()
    try:
        channel: queue.Queue[tuple[int, int, int]] = manager.Queue()
        stop = _drain_in_thread(channel, on_progress)
        try:
            with ProcessPoolExecutor(
                max_workers=min(workers, len(tasks)),
                initializer=_init_worker,
                initargs=(scenario, channel),
            ) as pool:
                futures: list[Future[RunResult]] = [
                    pool.submit(run_task, i, task) for i, task in enumerate(tasks)
                ]
                return [f.result() for f in futures]
        finally:
            stop()
    finally:
        manager.shutdown()


def _drain_in_thread(
    channel: queue.Queue[tuple[int, int, int]], on_progress: ProgressCallback | None
) -> Callable[[], None]:
    """Forward progress messages to ``on_progress`` until the returned stop() is called."""
    finished = threading.Event()

    def drain() -> None:
        while True:
            try:
                index, done, total = channel.get(timeout=0.1)
            except queue.Empty:
                if finished.is_set():
                    return
                continue
            except (EOFError, OSError):
                return
            if on_progress is not None:
                on_progress(index, done, total)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()

    def stop() -> None:
        finished.set()
        thread.join(timeout=5)

    return stop
