"""What the local machine does when a run ends, and when a time limit or back-off passes.

Owns :class:`GangEnds`, a part of :class:`~.machine.LocalMachine` given its
:class:`~.machine_state.MachineState` and the :class:`~.gang_starts.GangStarts` that starts a
gang or a completion again: a run's end taken in (its gang stopped with it, started again, or
placed again whole), a Job's retries, its indexes' retries and failures and its completions'
ends as :mod:`gpufleet.job_controller` decides them, restarts in place after the kubelet's
back-off (:class:`~.restarts.CrashBackoff`), and time limits (``activeDeadlineSeconds``)
enforced. The rules are described in :mod:`.machine`'s docstring; starting is
:mod:`.gang_starts`'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpufleet.backends.local.gang_starts import GangStarts
from gpufleet.backends.local.gangs import BoundPod, Gang, deleted_event, part, places_free
from gpufleet.backends.local.machine_state import MachineState
from gpufleet.backends.local.restarts import restarts_after
from gpufleet.backends.local.supervisor import RunEnd
from gpufleet.job_controller.decisions import (
    Follows,
    JobCounts,
    deadline_exceeded,
    failed_indexes_remain,
    index_failed,
    pod_failed,
)
from gpufleet.model.events import JobEnded, PodDeleted, PodEnd, PodRestarted, WorkloadAdded


class GangEnds:
    """Ends of the local machine's runs, and their Job rules (see the module docstring)."""

    def __init__(self, state: MachineState, starts: GangStarts) -> None:
        self._state = state
        self._starts = starts

    def next_deadline(self) -> float:
        """When the next time limit of a run not yet stopping passes (inf: none)."""
        return min(
            (
                b.deadline_at
                for b in self._state.bound.values()
                if b.deadline_at is not None and b.stopping is None and b.run_id is not None
            ),
            default=math.inf,
        )

    def enforce_deadlines(self) -> None:
        """Stop the gangs whose time limit has passed (see the module docstring)."""
        state = self._state
        now = state.clock.now()
        if self.next_deadline() > now:
            return
        expired: dict[str, list[BoundPod]] = {}
        for bound in state.bound.values():
            if bound.run_id is None or bound.stopping is not None or bound.deadline_at is None:
                continue
            if bound.deadline_at <= now:
                expired.setdefault(bound.workload, []).append(bound)
        for workload_key, bounds in expired.items():
            first = min(bounds, key=lambda b: b.rank)
            name = workload_key.partition("/")[2] or workload_key
            decision = deadline_exceeded(JobCounts())
            reason, message = decision.reason, decision.message
            state.events.append(JobEnded(name, first.pod.key, "Failed", reason, message))
            for bound in list(state.bound.values()):
                if bound.workload == workload_key:
                    state.stop_pod(bound, PodEnd.FAILED, f"{reason}: {message}")

    def ended(self, end: RunEnd) -> None:
        state = self._state
        key = state.by_run.get(end.run_id)
        if key is None:
            return
        bound = state.bound[key]
        gang = state.gangs.get(bound.workload)
        if (
            bound.stopping is None
            and bound.restarting
            and gang is not None
            and gang.failed_for_good is None
        ):
            self._member_down(gang, bound)  # stopped (or ended) to start again with its gang
            return
        if (
            bound.stopping is None
            and gang is not None
            and gang.failed_for_good is None
            and restarts_after(gang.restart_policy, end.succeeded)
        ):
            self._restart_in_place(gang, bound, end)
            return
        failed = not end.succeeded and bound.stopping is None
        if failed and gang is not None and self._retry_index(gang, bound, end):
            return
        if failed and self._retry(bound, end):
            return
        if end.succeeded and bound.stopping is None and gang is not None:
            done = gang.completion_of.pop(key, None)
            if done is not None:
                gang.done.add(done)
            following = gang.next_completion()
            if following is not None and self._starts.run_next_completion(gang, bound, following):
                return
            gang.succeeded.add(key)
            self._end_with_failed_indexes(gang, key)
        state.forget(key)
        state.events.append(deleted_event(key, end, bound.stopping))
        if failed:
            why = f"{key} of its gang failed ({end.describe()})"
            for other in state.holding(bound.workload):
                state.stop_pod(other, PodEnd.FAILED, why)
        evicted = bound.stopping is not None and bound.stopping[0] is PodEnd.EVICTED
        if not evicted:
            # It is over (an evicted workload waits to be bound again, with its processes).
            state.drop_if_over(bound.workload)
        if gang is None or bound.workload not in state.gangs:
            return
        if gang.place_again:  # the rest of its gang may wait for it to be placed again
            self.gang_down(gang)
        elif evicted and bound.requeue and not state.holding(bound.workload):
            state.events.append(WorkloadAdded(part(gang.workload, gang.needed)))

    def _retry(self, bound: BoundPod, end: RunEnd) -> bool:
        """A run of ``bound`` failed: count the failure and start its gang again when all
        have ended (see the module docstring). False when it is not retried (no backoff
        limit, past it, or its gang failed for good: the Job has failed)."""
        state = self._state
        gang = state.gangs.get(bound.workload)
        limit = None if gang is None else gang.backoff_limit
        if gang is None or limit is None or gang.failed_for_good is not None:
            return False
        key = bound.pod.key
        decision = pod_failed(gang.job_rules, gang.job_counts)
        gang.take(decision.counts)
        if decision.follows is Follows.FAILED:
            name = bound.workload.partition("/")[2] or bound.workload
            state.events.append(JobEnded(name, key, "Failed", decision.reason, decision.message))
            return False
        # The gang starts again at once: the Job controller's back-off (``decision.delay``) is
        # not waited out here, so that a local retry is prompt.
        for other in state.holding(bound.workload):
            if other is not bound:
                state.stop_to_restart(other)
        message = (
            f"is started again ({end.describe()}; failure {gang.failures} of backoffLimit {limit})"
        )
        state.events.append(PodRestarted(key, message))
        bound.restarting = True
        self._member_down(gang, bound)
        return True

    def _retry_index(self, gang: Gang, bound: BoundPod, end: RunEnd) -> bool:
        """A run of an Indexed Job with a limit per index failed: retry its index alone, or
        fail the index and go on (see the module docstring). True when that is all; False
        when the Job's own rules take it from here (no limit per index, or the Job failed)."""
        state = self._state
        per_index, completion = gang.backoff_limit_per_index, bound.completion
        if per_index is None or completion is None or gang.failed_for_good is not None:
            return False
        key, name = bound.pod.key, bound.workload.partition("/")[2] or bound.workload
        decision = pod_failed(gang.job_rules, gang.job_counts, completion)
        gang.take(decision.counts)
        if decision.follows is Follows.REPLACE:  # its pod runs it again at once, in place
            count = gang.index_failures[completion]
            retried = (
                f"runs index {completion} again ({end.describe()}; failure {count} of "
                f"backoffLimitPerIndex {per_index})"
            )
            if self._starts.run_next_completion(gang, bound, completion, retried):
                return True
            decision = index_failed(gang.job_rules, gang.job_counts, completion)
            gang.take(decision.counts)
        if completion in gang.failed_indexes:  # failed for good: it is not run again
            gang.completion_of.pop(key, None)
        if decision.follows is Follows.FAILED:
            gang.failed_for_good = decision.message
            state.events.append(JobEnded(name, key, "Failed", decision.reason, decision.message))
            return False
        following = gang.next_completion()
        failed = f"index {completion} failed ({end.describe()}; backoffLimitPerIndex {per_index})"
        if following is not None and self._starts.run_next_completion(
            gang, bound, following, f"{failed}: runs index {following}"
        ):
            return True
        # Nothing left for it to run: it ends, failed; the rest of its gang runs on.
        self._end_with_failed_indexes(gang, key)
        state.forget(key)
        state.events.append(deleted_event(key, end, None))
        state.drop_if_over(bound.workload)
        return True

    def _end_with_failed_indexes(self, gang: Gang, key: str) -> None:
        """The pod ``key`` is through with its indexes: if it is the last of its gang and
        some indexes failed, its Job fails (``FailedIndexes``), before the pod's end."""
        state = self._state
        if not gang.failed_indexes or gang.indexes_ended or gang.failed_for_good is not None:
            return
        if any(b.pod.key != key for b in state.holding(gang.workload.key)):
            return
        gang.indexes_ended = True
        name = gang.workload.key.partition("/")[2] or gang.workload.key
        decision = failed_indexes_remain(gang.job_counts)
        state.events.append(JobEnded(name, key, "Failed", decision.reason, decision.message))

    def _restart_in_place(self, gang: Gang, bound: BoundPod, end: RunEnd) -> None:
        """A run whose restart policy says so has ended: its gang starts again where it is
        after the kubelet's back-off (counted from its end), the restart counted."""
        state = self._state
        ended_at = state.clock.now() if end.record is None else end.record.ended_at
        started_at = ended_at if bound.started_at is None else bound.started_at
        if ended_at - started_at >= state.crash_backoff.reset_after_s:
            gang.streak = 0
        delay = state.crash_backoff.delay(gang.streak)
        gang.streak += 1
        gang.restarts += 1
        gang.restart_at = ended_at + delay
        for other in state.holding(bound.workload):
            if other is not bound:
                state.stop_to_restart(other)
        message = (
            f"ended ({end.describe()}) and is restarted in place after a back-off of "
            f"{delay:g}s (restart {gang.restarts}, restartPolicy {gang.restart_policy})"
        )
        state.events.append(PodRestarted(bound.pod.key, message))
        bound.restarting = True
        self._member_down(gang, bound)

    def next_restart(self) -> float:
        """When the next restart in place is due (inf: none)."""
        due = (g.restart_at for g in self._state.gangs.values() if g.restart_at is not None)
        return min(due, default=math.inf)

    def restart_due(self) -> None:
        """Start the gangs whose back-off has passed (those all of whose members ended)."""
        state = self._state
        now = state.clock.now()
        for gang in list(state.gangs.values()):
            if gang.restart_at is not None and gang.restart_at <= now:
                gang.restart_at = None
                self.gang_down(gang)

    def _member_down(self, gang: Gang, bound: BoundPod) -> None:
        """A member to start again with its gang has ended: once all have, the gang starts
        again where it was, or, when it cannot (a member has no place, or its GPUs are taken:
        after a restart), is placed again whole."""
        if bound.run_id is not None:
            self._state.by_run.pop(bound.run_id, None)
        bound.run_id = None
        self.gang_down(gang)

    def gang_down(self, gang: Gang) -> None:
        """If every member to start again has ended: start or place the gang again."""
        state = self._state
        holding = state.holding(gang.workload.key)
        if not holding and gang.place_again:  # its last member was evicted meanwhile
            self._place_again(gang, holding)
            return
        if not holding or gang.restart_at is not None:
            return  # gone (cancelled, evicted), or backing off
        if not all(m.run_id is None and m.stopping is None and m.restarting for m in holding):
            return
        for member in holding:
            member.restarting = False
        placed = all(p.key in state.bound for p in gang.needed)
        others = [b.placement for b in state.bound.values() if b.workload != gang.workload.key]
        free = places_free([m.placement for m in holding], others, state.inventory, state.node.name)
        if gang.place_again or not placed or not free:
            self._place_again(gang, holding)
        else:
            self._starts.start_gang(gang, retry=True)

    def _place_again(self, gang: Gang, holding: Sequence[BoundPod]) -> None:
        """The gang gives its places back and waits to be placed again, whole (those of its
        pods that have yet to succeed), its time limit kept."""
        state = self._state
        why = "its gang is placed again"
        for member in holding:
            state.forget(member.pod.key)
            state.events.append(PodDeleted(member.pod.key, PodEnd.REPLACED, why))
        gang.place_again, gang.keep_deadline = False, True
        state.events.append(WorkloadAdded(part(gang.workload, gang.needed)))
