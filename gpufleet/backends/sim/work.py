"""One simulated pod's work: what is left of it, where it runs, and its job's attempt.

Owns :class:`PodWork`, the simulated cluster's record of each pod it holds (waiting, running,
or away until a new pod replaces it), :func:`kept_work`, how much of a run's work survives
when the run is cut short (up to its last checkpoint: an interval's, or the one it made when
told its node was going), and :func:`attempt_end`, when a running attempt ends and whether that
end is a failure. It decides nothing about jobs (see :mod:`gpufleet.backends.sim.jobs`) and
moves no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.backends.sim.jobs import Attempt, JobRun
from gpufleet.model import Placement, Pod
from gpufleet.model.jobs import Lifetime
from gpufleet.model.workload import Workload


@dataclass(slots=True)
class PodWork:
    """What is left of one pod's work, and when its current run started."""

    pod: Pod
    remaining: float | None
    checkpoint: float | None = None
    in_gang: bool = False
    started: float = 0.0
    #: Bumped on every bind (and restart), so that the end of an earlier run is ignored.
    run: int = 0
    #: Where it runs (None while it waits).
    placement: Placement | None = None
    #: Its job's controller, the gang it arrived in, its work for a task it has not run yet,
    #: how long it runs, its current attempt and how long that has run, whether the attempt's
    #: scheduled end is a failure, and whether it failed and waits to come back as a new pod.
    job: JobRun | None = None
    workload: Workload | None = None
    full: float | None = None
    lifetime: Lifetime = Lifetime.WORK
    attempt: Attempt | None = None
    ran: float = 0.0
    failing: bool = False
    away: bool = False
    #: Whether it checkpoints when told its node is going, and when it last did so in its
    #: current run (None: not in this run).
    on_notice: bool = False
    saved_at: float | None = None
    #: The workload it was last put to the scheduler in (its gang; None: a lone pod of its own).
    unit: Workload | None = None


def kept_work(work: PodWork, now: float) -> float:
    """Seconds of the current run (from ``work.started``) that survive a cut at ``now``: up to
    its last interval checkpoint, or the checkpoint it made on notice if that is later."""
    ran = max(0.0, now - work.started)
    kept = 0.0
    if work.checkpoint:
        kept = math.floor(ran / work.checkpoint) * work.checkpoint
    if work.saved_at is not None and work.saved_at >= work.started:  # saved in this run
        kept = max(kept, min(ran, work.saved_at - work.started))
    return kept


def attempt_end(work: PodWork, attempt: Attempt) -> tuple[float | None, bool]:
    """(seconds until the running attempt ends, whether that end is a failure). A failing
    attempt fails ``after`` seconds into its run, or at the end of its run time if sooner; a
    pod without a run time of its own (until its job ends, or until deleted) fails only after
    a ``sim-fail-after``."""
    remaining = work.remaining if work.lifetime is Lifetime.WORK else None
    if not attempt.fails:
        return remaining, False
    if attempt.after is None:
        return remaining, remaining is not None
    left = max(0.0, attempt.after - work.ran)
    return (left if remaining is None else min(left, remaining)), True
