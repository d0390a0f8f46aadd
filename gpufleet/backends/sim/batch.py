"""Run many simulations (policies x seeds) on a process pool, with live progress.

:func:`run_pool` is the pool: each worker process receives what the tasks share once (pool
initializer), then runs the tasks it is given and reports progress through a queue, so the
caller can draw one progress bar per run; with one worker, or one task, everything runs in
this process. :func:`run_many` runs fill-up and replay tasks on it (the multi-tenant runs of
``gpufleet simulate --scenario`` use it too).
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import TypeVar, cast

from gpufleet.backends.sim.cluster import Mode
from gpufleet.backends.sim.results import FillRun, ReplayRun
from gpufleet.backends.sim.run import run_fill, run_replay
from gpufleet.model import Node
from gpufleet.model.workload import TimedPod
from gpufleet.scheduling.target import TargetWorkload

RunResult = FillRun | ReplayRun
#: Called with (task index, pods done, pods in all).
ProgressCallback = Callable[[int, int, int], None]
S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


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


#: A task's progress report: (pods done, pods in all).
Report = Callable[[int, int], None]

_shared: object = None
_run: Callable[[object, object, Report], object] | None = None
_progress: queue.Queue[tuple[int, int, int]] | None = None


def _init_worker(
    shared: object,
    run: Callable[[object, object, Report], object],
    progress: queue.Queue[tuple[int, int, int]] | None,
) -> None:
    global _shared, _run, _progress
    _shared, _run, _progress = shared, run, progress


def _run_installed(index: int, task: object) -> object:
    """Run one task with what the pool installed in this process, reporting progress."""
    assert _run is not None, "worker not initialised"
    channel = _progress

    def report(done: int, total: int) -> None:
        if channel is not None:
            channel.put((index, done, total))

    return _run(_shared, task, report)


def run_pool(
    shared: S,
    tasks: Sequence[T],
    workers: int,
    run: Callable[[S, T, Report], R],
    on_progress: ProgressCallback | None = None,
) -> list[R]:
    """``run(shared, task, report)`` for each of ``tasks`` (results in their order) on
    ``workers`` processes; ``shared`` goes to each worker once, and ``run`` must be a
    module-level function (workers import it). With one worker or one task, everything runs
    in this process."""
    install = cast(Callable[[object, object, Report], object], run)
    if workers <= 1 or len(tasks) <= 1:
        local: queue.Queue[tuple[int, int, int]] = queue.Queue()
        _init_worker(shared, install, local)
        results = []
        for index, task in enumerate(tasks):
            stop = _drain_in_thread(local, on_progress)
            try:
                results.append(cast(R, _run_installed(index, task)))
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
                initargs=(shared, install, channel),
            ) as pool:
                futures: list[Future[object]] = [
                    pool.submit(_run_installed, i, task) for i, task in enumerate(tasks)
                ]
                return [cast(R, f.result()) for f in futures]
        finally:
            stop()
    finally:
        manager.shutdown()


def run_task(scenario: Scenario, task: Task, report: Report) -> RunResult:
    """Run one (policy, seed) task of ``scenario``."""
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
    return run_pool(scenario, tasks, workers, run_task, on_progress)


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
