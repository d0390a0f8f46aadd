"""Idle policies that act, in ``gpufleet serve``: after each observatory round, the steps due.

Owns :class:`IdleReclaimer`, subscribed to a plane's
:class:`~gpufleet.service.observatory.Observatory` (:meth:`IdleReclaimer.on_round`). Each
round it copies the running workloads that hold GPUs out of the plane's records (under the
plane's lock: :func:`idle_candidates`), asks its :class:`~gpufleet.telemetry.idle.IdleEngine`
which step of which policy is due over the observatory's series (outside that lock: a
Prometheus query may take seconds), and carries each out through the plane's idle actions
(:class:`~gpufleet.service.capabilities.IdleActions`): Notify is the event alone; Checkpoint,
``request_checkpoint``; Stop, ``stop_idle`` (embedded and local: cancelled, a local run with
SIGTERM, the grace, SIGKILL; Kubernetes: its pods evicted); ScaleToZero, ``scale_to_zero``;
Preemptible, ``demote``. Every step is a Warning event
on the workload (reason ``IdleReclaim<Action>``) with the numbers that triggered it (mean
utilisation, window, threshold, idle for, GPUs) and what the plane did; a dry run records a
Normal event "dry run: would ..." and does nothing else. A step the world refused for now (an
eviction a PodDisruptionBudget forbids) is due again next round, its refusal told once.

The engine's state (which step each workload is at, since when it is idle) lives as long as the
reclaimer: a restarted server starts every workload from the first step again. What a step
means is the plane's; who is idle is the engine's.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from gpufleet.backends.sim.idle_reclaim import is_training
from gpufleet.model.idle import IdleAction, IdleCandidate, IdleDecision, IdlePolicy
from gpufleet.service.capabilities import IdleActions
from gpufleet.service.observatory import Observatory, ObservedRound
from gpufleet.service.plane_book import IdleOutcome
from gpufleet.service.records import POD_RUNNING, WorkloadRecord
from gpufleet.service.store import StoredEvent
from gpufleet.telemetry.idle import IdleEngine
from gpufleet.telemetry.series_query import SeriesUnavailableError

log = logging.getLogger(__name__)

#: Decisions kept in memory (each is also an event in the plane's store).
DECISIONS_KEPT = 1000


class ReclaimingPlane(Protocol):
    """What the reclaimer needs of a plane (every plane has it): its records, its observatory,
    its events, and what the steps do there (its ``idle_actions``)."""

    lock: threading.RLock
    observatory: Observatory | None

    @property
    def idle_actions(self) -> IdleActions: ...

    @property
    def records(self) -> dict[str, WorkloadRecord]: ...

    def record_event(
        self, key: str, type_: str, reason: str, message: str, at: float | None = None
    ) -> StoredEvent: ...


def idle_candidates(records: Mapping[str, WorkloadRecord]) -> list[IdleCandidate]:
    """The workloads with running pods that hold GPUs, as the policies see them: started when
    their first running pod started (else when the workload did)."""
    found: list[IdleCandidate] = []
    for record in records.values():
        if not record.active:
            continue
        running = [p for p in record.pods.values() if p.state == POD_RUNNING and p.gpus > 0]
        if not running:
            continue
        starts = [p.started for p in running if p.started is not None]
        started = min(starts) if starts else record.started
        if started is None:
            continue
        workload = record.timed.workload
        found.append(
            IdleCandidate(
                key=record.key,
                namespace=workload.namespace,
                name=workload.name,
                queue=workload.queue,
                kind=record.kind,
                pods=tuple(p.pod.name for p in running),
                started_at=started,
                gpus=sum(p.gpus for p in running),
                labels=dict(workload.labels),
                training=is_training(workload, record.kind),
                checkpointable=workload.checkpoint_interval is not None,
                preemptible=workload.preemptible,
            )
        )
    return found


class IdleReclaimer:
    """See the module docstring. ``dry_run``: every decision is reported, none acted on."""

    def __init__(
        self, plane: ReclaimingPlane, policies: Iterable[IdlePolicy], dry_run: bool = False
    ) -> None:
        self.plane = plane
        self.engine = IdleEngine(policies, dry_run=dry_run)
        #: The latest decisions taken, oldest first.
        self.decisions: deque[IdleDecision] = deque(maxlen=DECISIONS_KEPT)
        #: Workloads whose step the world refused, and was told so (told once).
        self._refused: set[str] = set()

    def on_round(self, observed: ObservedRound) -> None:
        """The observatory's subscriber: :meth:`judge` at the round's time."""
        self.judge(observed.now)

    def judge(self, now: float) -> list[IdleDecision]:
        """Decide at ``now`` and act; returns the decisions taken."""
        observatory = self.plane.observatory
        if observatory is None or not self.engine.policies:
            return []
        with self.plane.lock:
            candidates = idle_candidates(self.plane.records)
        try:
            decisions = self.engine.decide(now, candidates, observatory.series)
        except SeriesUnavailableError as error:
            log.warning("idle policies not judged at %s: %s", now, error)
            return []
        for decision in decisions:
            try:
                self.act(decision)
            except Exception:  # one workload's failure must not stop the others
                log.exception("idle policy %s on %s failed", decision.policy, decision.workload)
        self.decisions.extend(decisions)
        return decisions

    def act(self, decision: IdleDecision) -> None:
        """Carry out one decision through the plane and record its event."""
        if decision.dry_run:
            self.plane.record_event(
                decision.workload, "Normal", decision.reason, decision.message, decision.at
            )
            return
        outcome = self._carry_out(decision)
        if not outcome.done:
            self._again_next_round(decision)
            if decision.workload in self._refused:
                return
            self._refused.add(decision.workload)
        else:
            self._refused.discard(decision.workload)
        message = decision.message + (f"; {outcome.note}" if outcome.note else "")
        self.plane.record_event(decision.workload, "Warning", decision.reason, message, decision.at)

    def _carry_out(self, decision: IdleDecision) -> IdleOutcome:
        key, action = decision.workload, decision.action
        if action is IdleAction.NOTIFY:
            return IdleOutcome()
        if action is IdleAction.CHECKPOINT:
            return self.plane.idle_actions.request_checkpoint(key, decision.at)
        if action is IdleAction.STOP:
            return self.plane.idle_actions.stop_idle(key, decision.policy)
        if action is IdleAction.SCALE_TO_ZERO:
            return self.plane.idle_actions.scale_to_zero(key, decision.policy)
        return self.plane.idle_actions.demote(key)

    def _again_next_round(self, decision: IdleDecision) -> None:
        """Put the workload back before this step, due at once (the engine moved past it)."""
        state = self.engine.states.get(decision.workload)
        if state is None:
            return
        policy = next(p for p in self.engine.policies if p.name == decision.policy)
        state.steps_taken = decision.step
        state.last_step_at = decision.at - policy.steps[decision.step].after_s


def reclaimer_for(
    plane: ReclaimingPlane, policies: Sequence[IdlePolicy], dry_run: bool = False
) -> IdleReclaimer | None:
    """A reclaimer subscribed to the plane's observatory (None: no policies, or a plane that
    observes nothing, which is logged)."""
    if not policies:
        return None
    if plane.observatory is None:
        log.warning("idle policies given, but this plane observes no GPUs: they do nothing")
        return None
    reclaimer = IdleReclaimer(plane, policies, dry_run)
    plane.observatory.subscribe(reclaimer.on_round)
    return reclaimer
