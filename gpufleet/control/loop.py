"""The control loop: join a scheduling core and a cluster backend.

poll events -> core.handle -> core cycles until idle -> backend.apply -> backend.wait, until the
backend is done (a finished simulation) or ``stop`` says so. Simulation and production differ
only in how the backend waits.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gpufleet.control.backend import ClusterBackend, ClusterState
from gpufleet.model.events import NodeAdded, PodAdded, PodBound
from gpufleet.scheduling.core import SchedulerCore


def sync(core: SchedulerCore, state: ClusterState) -> None:
    """Bring the core in line with a full listing (nodes it lacks, running and pending pods)."""
    for node in state.nodes:
        if node.name not in core.table.row_of:
            core.handle(NodeAdded(node))
    for pod, placement in state.running:
        core.handle(PodBound(pod, placement))
    for pod in state.pending:
        core.handle(PodAdded(pod))


def run(
    backend: ClusterBackend,
    core: SchedulerCore,
    on_iteration: Callable[[], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Run until the backend is done and the core has nothing timed left to do (a backoff, a
    gang's ready deadline), or ``stop`` says so; returns the number of loop iterations."""
    sync(core, backend.list_state())
    iterations = 0
    while not (stop is not None and stop()):
        core.handle_all(backend.poll_events())
        actions = core.run_until_idle(backend.clock.now())
        if actions:
            backend.apply(actions)
        backend.wait(core.next_timer())
        iterations += 1
        if on_iteration is not None:
            on_iteration()
        if backend.done and core.next_timer(aging=False) == math.inf:
            break
    return iterations
