"""Run multi-tenant simulations (policy x seed x variant) on a process pool, with live progress.

The multi-tenant counterpart of :mod:`gpufleet.backends.sim.batch`: each worker process gets
the prepared scenarios once (pool initializer), runs the tasks it is given through
:func:`~gpufleet.backends.sim.run.run_workloads` (the FIFO variant through the scenario's
:meth:`~gpufleet.backends.sim.scenarios.TenantScenario.fifo`), and reports progress through a
queue so that the caller can draw a bar per run. With one worker or one task, everything runs
in this process. Results come back as :class:`~gpufleet.report.tenancy.LabelledRun`.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

from gpufleet.backends.sim.run import run_workloads
from gpufleet.cli.scenarios import Prepared
from gpufleet.report.tenancy import LabelledRun, Variant
from gpufleet.scheduling.admission import AdmissionConfig

#: Called with (task index, pods arrived so far, pods in all).
ProgressCallback = Callable[[int, int, int], None]
Channel = queue.Queue[tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class TenancyTask:
    policy: str
    seed: int
    variant: Variant


@dataclass(frozen=True, slots=True)
class Shared:
    """What every task reads: the scenario of each seed, admission settings, explain time."""

    by_seed: dict[int, Prepared]
    config: AdmissionConfig
    explain_at: float | None = None


_shared: Shared | None = None
_channel: Channel | None = None


def _init_worker(shared: Shared, channel: Channel | None) -> None:
    global _shared, _channel
    _shared = shared
    _channel = channel


def run_task(index: int, task: TenancyTask) -> LabelledRun:
    """Run one task against the scenarios installed in this process."""
    shared = _shared
    assert shared is not None, "worker not initialised"
    channel = _channel

    def report(done: int, total: int) -> None:
        if channel is not None:
            channel.put((index, done, total))

    prepared = shared.by_seed[task.seed]
    scenario = prepared.scenario
    quotas = prepared.resource_quotas
    if task.variant is Variant.FIFO:
        scenario = scenario.fifo()
        quotas = ()
    result = run_workloads(
        prepared.nodes,
        scenario.workloads,
        task.policy,
        task.seed,
        queues=scenario.queues,
        resource_quotas=quotas,
        config=shared.config,
        progress=report,
        explain_at=shared.explain_at,
    )
    return LabelledRun(task.policy, task.seed, task.variant, result)


def run_tenancy_tasks(
    shared: Shared,
    tasks: Sequence[TenancyTask],
    workers: int,
    on_progress: ProgressCallback | None = None,
) -> list[LabelledRun]:
    """Run ``tasks`` (results in their order) on ``workers`` processes."""
    if workers <= 1 or len(tasks) <= 1:
        local: Channel = queue.Queue()
        _init_worker(shared, local)
        results = []
        for index, task in enumerate(tasks):
            stop = _forward(local, on_progress)
            try:
                results.append(run_task(index, task))
            finally:
                stop()
        return results
    manager = multiprocessing.Manager()
    try:
        channel: Channel = manager.Queue()
        stop = _forward(channel, on_progress)
        try:
            with ProcessPoolExecutor(
                max_workers=min(workers, len(tasks)),
                initializer=_init_worker,
                initargs=(shared, channel),
            ) as pool:
                futures: list[Future[LabelledRun]] = [
                    pool.submit(run_task, i, task) for i, task in enumerate(tasks)
                ]
                return [f.result() for f in futures]
        finally:
            stop()
    finally:
        manager.shutdown()


def _forward(channel: Channel, on_progress: ProgressCallback | None) -> Callable[[], None]:
    """Pass progress messages to ``on_progress`` until the returned stop() is called."""
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
