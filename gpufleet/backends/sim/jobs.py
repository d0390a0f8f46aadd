"""The controllers of the simulated cluster: what follows when a pod of a Job, a training job,
a Ray cluster or job (or a bare pod that may fail) ends, as Kubernetes' Job controller, the
Kubeflow operators and KubeRay decide it.

:class:`JobRun` keeps one object's progress (tasks done, failures, restarts) and answers each
end of a pod's attempt with a :class:`Verdict`:

* **Job** (batch/v1): ``len(pods)`` (its parallelism) run at a time until ``completions``
  succeed; a pod that succeeds while completions are left runs the next one where it is (the
  Job's quota and place stay taken, as Kueue keeps a Job's quota until it finishes; a slot
  with nothing left to run ends: Kueue's reclaimable pods). A failed container restarts in
  place with ``OnFailure`` (the kubelet's back-off: 10 s doubling to 5 min); the Job fails once
  the restarts of its live pods reach ``backoffLimit`` (or one, for a limit of 0). With
  ``Never`` the pod fails and a new pod is made after the Job controller's back-off (10 s
  doubling to 6 min) and scheduled again; the Job fails once more than ``backoffLimit`` pods
  have failed. ``backoffLimitPerIndex`` fails an index instead (the Job goes on, and fails at
  the end, or at once beyond ``maxFailedIndexes``). ``activeDeadlineSeconds`` fails it too.
  A ``podFailurePolicy`` decides first, its first matching rule on the exit code (or, for a
  pod lost with its node, on the ``DisruptionTarget`` condition): ``FailJob`` fails the Job
  (reason ``PodFailurePolicy``), ``Ignore`` makes a new pod at once without counting the
  failure, ``FailIndex`` fails the pod's index, ``Count`` counts it as usual.
* **A pod lost with its node** (a spot interruption, a node failure: :meth:`JobRun.lost`) is,
  in Kubernetes, a pod that failed with the ``DisruptionTarget`` condition, whatever its
  restart policy (its node is gone, so nothing restarts in place). A Job (and an MPIJob's
  Launcher) counts it as a failed pod (its ``status.failed``, against ``backoffLimit``,
  ``OnFailure`` pods too) unless its ``podFailurePolicy`` says otherwise; the training
  operators and KubeRay make the pod again without counting it (their limits count container
  restarts of live pods); a bare Pod's workload is put back in its queue. The attempt it was
  running is not over: it goes on when the pod runs again (like an eviction's).
* **PyTorchJob** (training operator v1): ``OnFailure`` and ``Always`` restart in place
  (``Always`` after a success too); their restarts, over live pods, count against
  ``runPolicy.backoffLimit`` (none by default). ``Never`` fails the job; ``ExitCode`` makes a
  new pod for exit codes of 128 and more and fails the job for others. The job succeeds when
  its Master has (without one: all Workers).
* **MPIJob**: the Launcher is retried as the operator's launcher Job is (the Job rules above,
  ``runPolicy.backoffLimit`` default 6); a Worker restarts in place with ``OnFailure`` or
  ``Always`` and fails the job otherwise. The job succeeds when the Launcher does.
* **RayCluster**: pods restart in place (``Always``, ``OnFailure``) or are made again
  (``Never``), without limit. **RayJob**: the same for the cluster; when its Ray job (the
  submitter's run, or the head's) fails, a new cluster is made, up to ``backoffLimit`` times
  (default 0); the RayJob ends with its Ray job.
* **Pod**: restarts in place unless its policy is ``Never``; then it fails.

When a job ends, the simulated cluster stops its other pods (but those that run until deleted).
This module decides; the cluster carries the verdicts out. It reads no clock. A Job's own
rules (its backoff limits, its indexes, its completions, its deadline, the back-offs) are
:mod:`gpufleet.job_controller`'s, which the local machine asks too; this module keeps the
simulated pods' bookkeeping and the other controllers' rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpufleet.job_controller.decisions import (
    Decision,
    Follows,
    JobCounts,
    JobRules,
    container_restarted,
    deadline_exceeded,
    fail_index,
    pod_failed,
    through,
)
from gpufleet.model.jobs import (
    DISRUPTION_TARGET,
    RETRYABLE_EXIT_CODE,
    JobKind,
    JobSpec,
    Lifetime,
    PodFailureAction,
    PodFailureRule,
    ReplicaSet,
    RestartPolicy,
)

_IN_PLACE = (RestartPolicy.ALWAYS, RestartPolicy.ON_FAILURE)


class Next(StrEnum):
    """What happens to a pod whose attempt ended."""

    DONE = "done"  # it succeeded and leaves
    NEXT = "next"  # it runs its Job's next completion, in place
    RESTART = "restart"  # its container restarts in place after ``delay``
    REPLACE = "replace"  # it fails; a new pod follows after ``delay`` and is scheduled again
    FAILED = "failed"  # it fails for good
    RECREATE = "recreate"  # all of the job's pods go and come back as a new gang (RayJob)


class Outcome(StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class Verdict:
    next: Next
    delay: float = 0.0
    #: The job ended with this outcome (its other pods are to stop).
    ended: Outcome | None = None
    reason: str = ""
    message: str = ""
    #: NEXT or REPLACE: the pod runs a task it has not run before (all of its work).
    fresh: bool = False


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of a task's container: whether it fails, when and how."""

    task: int
    number: int
    fails: bool
    after: float | None
    exit_code: int


class JobRun:
    """The progress of one object's pods under its controller; see the module docstring."""

    def __init__(self, spec: JobSpec, namespace: str) -> None:
        self.spec = spec
        self.key = f"{namespace}/{spec.name}"
        self.namespace = namespace
        self.outcome: Outcome | None = None
        self.reason = ""
        self.message = ""
        self.succeeded: set[int] = set()
        self.failed_indexes: set[int] = set()
        #: Attempts that failed; pods that failed and were not restarted in place (a Job's
        #: ``status.failed``); in-place restarts; new clusters made (RayJob).
        self.attempt_failures = 0
        self.failed_pods = 0
        self.restarts = 0
        self.retries = 0
        self._replica = {name: r for r in spec.replicas for name in r.pods}
        self._task = {name: i for i, name in enumerate(spec.pod_names)}
        #: Restarts of each live pod's current container (its kubelet restartCount).
        self._live: dict[str, int] = dict.fromkeys(spec.pod_names, 0)
        self._attempts: dict[int, int] = {}
        self._index_failures: dict[int, int] = {}
        self._owned = set(self._task.values())
        self._next_task = len(self._task)

    # ----------------------------------------------------------------------------- queries
    def replica(self, pod_name: str) -> ReplicaSet:
        return self._replica[pod_name]

    def task(self, pod_name: str) -> int:
        return self._task[pod_name]

    @property
    def pod_keys(self) -> list[str]:
        return [f"{self.namespace}/{name}" for name in self.spec.pod_names]

    @property
    def completions(self) -> tuple[int, int]:
        """(completions done, completions to do): a Job's, else its driver pods' (a Master, a
        Launcher, a RayJob's Ray job)."""
        if self.spec.kind is JobKind.JOB:
            return len(self.succeeded), self.spec.tasks
        drivers = [self._task[n] for r in self.spec.replicas if r.driver for n in r.pods]
        return sum(task in self.succeeded for task in drivers), len(drivers)

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def state(self) -> dict[str, Any]:
        """Its progress as plain data (JSON), for :meth:`restored`."""
        return {
            "outcome": None if self.outcome is None else self.outcome.value,
            "reason": self.reason,
            "message": self.message,
            "succeeded": sorted(self.succeeded),
            "failed_indexes": sorted(self.failed_indexes),
            "counts": [self.attempt_failures, self.failed_pods, self.restarts, self.retries],
            "task": dict(self._task),
            "live": dict(self._live),
            "attempts": {str(k): v for k, v in self._attempts.items()},
            "index_failures": {str(k): v for k, v in self._index_failures.items()},
            "owned": sorted(self._owned),
            "next_task": self._next_task,
        }

    @classmethod
    def restored(cls, spec: JobSpec, namespace: str, state: Mapping[str, Any]) -> JobRun:
        """The run whose :meth:`state` was ``state`` (a new one when it is empty)."""
        run = cls(spec, namespace)
        if not state:
            return run
        run.outcome = None if state["outcome"] is None else Outcome(state["outcome"])
        run.reason, run.message = state["reason"], state["message"]
        run.succeeded = set(state["succeeded"])
        run.failed_indexes = set(state["failed_indexes"])
        run.attempt_failures, run.failed_pods, run.restarts, run.retries = state["counts"]
        run._task = {str(k): int(v) for k, v in state["task"].items()}
        run._live = {str(k): int(v) for k, v in state["live"].items()}
        run._attempts = {int(k): int(v) for k, v in state["attempts"].items()}
        run._index_failures = {int(k): int(v) for k, v in state["index_failures"].items()}
        run._owned = set(state["owned"])
        run._next_task = int(state["next_task"])
        return run

    def current_attempt(self, pod_name: str) -> Attempt:
        """The attempt the pod's task runs now (the last one started)."""
        task = self._task[pod_name]
        number = max(0, self._attempts.get(task, 1) - 1)
        failures = self._replica[pod_name].failures
        return Attempt(task, number, failures.fails(number), failures.after, failures.exit_code)

    def restarts_of(self, pod_name: str) -> int:
        """Restarts in place of the pod's current container."""
        return self._live.get(pod_name, 0)

    # ----------------------------------------------------------------------------- events
    def start(self, pod_name: str) -> Attempt:
        """A new attempt of the pod's task begins (it was bound, or its container restarted)."""
        task = self._task[pod_name]
        number = self._attempts.get(task, 0)
        self._attempts[task] = number + 1
        self._live.setdefault(pod_name, 0)
        failures = self._replica[pod_name].failures
        return Attempt(task, number, failures.fails(number), failures.after, failures.exit_code)

    def ended(self, pod_name: str, failed: bool, exit_code: int = 1) -> Verdict:
        """The pod's attempt ended (``failed``: with ``exit_code``); what follows."""
        if self.outcome is not None:  # ended meanwhile: the pod only leaves
            self._live.pop(pod_name, None)
            return Verdict(Next.DONE if not failed else Next.FAILED)
        if failed:
            self.attempt_failures += 1
        kind = self.spec.kind
        if kind is JobKind.JOB:
            return self._job(pod_name, failed, exit_code=exit_code)
        if kind is JobKind.MPI_JOB and self._replica[pod_name].driver:
            return self._job(pod_name, failed, batch=False, exit_code=exit_code)
        if kind in (JobKind.PYTORCH_JOB, JobKind.MPI_JOB):
            return self._training(pod_name, failed, exit_code)
        if kind in (JobKind.RAY_CLUSTER, JobKind.RAY_JOB):
            return self._ray(pod_name, failed)
        return self._pod(pod_name, failed)

    def lost(self, pod_name: str) -> Verdict:
        """The pod was lost with its node (see the module docstring): what follows."""
        if self.outcome is not None:  # ended meanwhile: the pod only leaves
            self._live.pop(pod_name, None)
            return Verdict(Next.FAILED)
        kind = self.spec.kind
        driver = self._replica[pod_name].driver
        if kind is JobKind.JOB or (kind is JobKind.MPI_JOB and driver):
            disrupted = frozenset({DISRUPTION_TARGET})
            return self._pod_failed(pod_name, kind is JobKind.JOB, None, disrupted)
        self.failed_pods += 1
        self._live[pod_name] = 0  # a new pod, its containers not restarted yet
        return Verdict(Next.REPLACE)

    def deadline_passed(self) -> Verdict:
        decision = deadline_exceeded(self._counts())
        return self._fail(Next.FAILED, decision.reason, decision.message)

    def recreated(self) -> None:
        """A RayJob's pods were all made again: their containers start from nothing."""
        self._live = dict.fromkeys(self.spec.pod_names, 0)

    def replaced(self, pod_name: str) -> None:
        """The new pod of a replaced one exists (its container has not restarted yet)."""
        self._live[pod_name] = 0

    # ----------------------------------------------------------------------------- kinds
    def _job(self, pod_name: str, failed: bool, batch: bool = True, exit_code: int = 1) -> Verdict:
        """A batch/v1 Job (or the launcher Job of an MPIJob, ``batch`` False)."""
        task = self._task[pod_name]
        policy = self._replica[pod_name].restart_policy
        if not failed:
            self.succeeded.add(task)
            self._owned.discard(task)
            self._live.pop(pod_name, None)
            if not batch:
                return self._succeed(Next.DONE)
            return self._after_task(pod_name)
        if policy in _IN_PLACE:  # the Job's own pods' restarts count (an MPIJob's workers' not)
            return self._restart(pod_name, limit=True, scope=self._replica[pod_name])
        return self._pod_failed(pod_name, batch, exit_code, frozenset())

    def _pod_failed(
        self, pod_name: str, batch: bool, exit_code: int | None, conditions: frozenset[str]
    ) -> Verdict:
        """A Job's pod failed for good (``exit_code``; None: lost, carrying ``conditions``):
        its podFailurePolicy, then its backoff limits."""
        spec = self.spec
        task = self._task[pod_name]
        self._live.pop(pod_name, None)
        matched = spec.failure_rule(exit_code, conditions) if batch else None
        if matched is not None:
            index, rule = matched
            if rule.action is PodFailureAction.IGNORE:
                return Verdict(Next.REPLACE)
            if rule.action is PodFailureAction.FAIL_JOB:
                self.failed_pods += 1
                message = self._rule_message(pod_name, exit_code, conditions, rule, index)
                return self._fail(Next.FAILED, "PodFailurePolicy", message)
            if rule.action is PodFailureAction.FAIL_INDEX:
                return self._index_failed(pod_name, task, fail_index(
                    self._rules(batch), self._counts(), task
                ))  # fmt: skip
        decision = pod_failed(self._rules(batch), self._counts(), task)
        self._take(decision.counts)
        if decision.follows is Follows.FAILED:
            return self._fail(Next.FAILED, decision.reason, decision.message)
        if decision.follows is Follows.INDEX_FAILED:
            return self._index_failed(pod_name, task, decision)
        return Verdict(Next.REPLACE, decision.delay)

    def _index_failed(self, pod_name: str, task: int, decision: Decision) -> Verdict:
        """The pod's index failed for good (its limit per index, or a FailIndex rule):
        ``decision`` says whether the Job goes on."""
        self._take(decision.counts)
        self._owned.discard(task)
        if decision.follows is Follows.FAILED:
            return self._fail(Next.FAILED, decision.reason, decision.message)
        verdict = self._after_task(pod_name)
        if verdict.next is Next.NEXT:  # the failed pod's place goes to a new pod
            return Verdict(Next.REPLACE, fresh=True)
        return Verdict(Next.FAILED, ended=verdict.ended, reason=verdict.reason,
                       message=verdict.message)  # fmt: skip

    def _rule_message(
        self,
        pod_name: str,
        exit_code: int | None,
        conditions: frozenset[str],
        rule: PodFailureRule,
        index: int,
    ) -> str:
        """What the Job controller says when a podFailurePolicy rule fails the Job."""
        pod = f"{self.namespace}/{pod_name}"
        action = rule.action.value
        if exit_code is None:
            condition = next(k for k, _ in rule.conditions if k in conditions)
            return f"Pod {pod} has condition {condition} matching {action} rule at index {index}"
        return (
            f"Container of pod {pod} failed with exit code {exit_code} matching {action} rule "
            f"at index {index}"
        )

    def _after_task(self, pod_name: str) -> Verdict:
        """A Job's pod is through with its task: all done, the next task, or nothing left."""
        decision = through(self._rules(), self._counts(), len(self.succeeded))
        if decision.follows is Follows.FAILED:
            return self._fail(Next.DONE, decision.reason, decision.message)
        if decision.follows is Follows.SUCCEEDED:
            return self._succeed(Next.DONE)
        task = self._unstarted()
        if task is None:
            return Verdict(Next.DONE)
        self._task[pod_name] = task
        self._owned.add(task)
        self._live[pod_name] = 0
        return Verdict(Next.NEXT, fresh=True)

    def _unstarted(self) -> int | None:
        if self.spec.indexed:
            taken = self.succeeded | self.failed_indexes | self._owned
            return next((i for i in range(self.spec.tasks) if i not in taken), None)
        if len(self.succeeded) + len(self._owned) >= self.spec.tasks:
            return None
        task = self._next_task
        self._next_task += 1
        return task

    def _training(self, pod_name: str, failed: bool, exit_code: int) -> Verdict:
        replica = self._replica[pod_name]
        policy = replica.restart_policy
        if not failed:
            if policy is RestartPolicy.ALWAYS:  # the kubelet restarts it after a success too
                return self._restart(pod_name, limit=self.spec.kind is JobKind.PYTORCH_JOB)
            self.succeeded.add(self._task[pod_name])
            self._live.pop(pod_name, None)
            return self._succeed_if_drivers_done()
        if policy in _IN_PLACE:
            return self._restart(pod_name, limit=self.spec.kind is JobKind.PYTORCH_JOB)
        self.failed_pods += 1
        self._live.pop(pod_name, None)
        retryable = exit_code >= RETRYABLE_EXIT_CODE
        if (
            policy is RestartPolicy.EXIT_CODE
            and retryable
            and self.spec.kind is JobKind.PYTORCH_JOB
        ):
            return Verdict(Next.REPLACE)
        return self._fail(
            Next.FAILED,
            "Failed",
            f"{self.spec.kind} {self.key} failed because {replica.role} {pod_name} failed "
            f"(exit code {exit_code}, restartPolicy {policy.value})",
        )

    def _ray(self, pod_name: str, failed: bool) -> Verdict:
        replica = self._replica[pod_name]
        if self.spec.kind is JobKind.RAY_JOB and replica.driver:
            if not failed:
                self.succeeded.add(self._task[pod_name])
                return self._succeed(Next.DONE)
            self.failed_pods += 1
            limit = self.spec.backoff_limit or 0
            if self.retries >= limit:
                return self._fail(
                    Next.FAILED, "BackoffLimitExceeded",
                    f"the Ray job failed {self.retries + 1} time(s); backoffLimit is {limit}",
                )  # fmt: skip
            self.retries += 1
            return Verdict(Next.RECREATE)
        if not failed:
            self.succeeded.add(self._task[pod_name])
            self._live.pop(pod_name, None)
            return self._succeed_if_drivers_done()
        if replica.restart_policy in _IN_PLACE:
            return self._restart(pod_name, limit=False)
        self.failed_pods += 1
        return Verdict(Next.REPLACE)  # KubeRay makes the pod again

    def _pod(self, pod_name: str, failed: bool) -> Verdict:
        if not failed:
            self.succeeded.add(self._task[pod_name])
            self._live.pop(pod_name, None)
            return self._succeed_if_drivers_done()
        if self._replica[pod_name].restart_policy in _IN_PLACE:
            return self._restart(pod_name, limit=False)
        self.failed_pods += 1
        self._live.pop(pod_name, None)
        return self._fail(Next.FAILED, "Failed", f"pod {pod_name} failed (restartPolicy Never)")

    # ----------------------------------------------------------------------------- helpers
    def _restart(self, pod_name: str, limit: bool, scope: ReplicaSet | None = None) -> Verdict:
        """The container restarts in place; with ``limit``, its job's backoffLimit counts the
        restarts of its live pods that restart in place (of ``scope`` only, when given), as the
        Job controller and the training operator do."""
        count = self._live[pod_name] = self._live.get(pod_name, 0) + 1
        self.restarts += 1
        counted = sum(
            n
            for name, n in self._live.items()
            if (scope is None or self._replica[name] is scope)
            and self._replica[name].restart_policy in _IN_PLACE
        )
        rules = JobRules(self.spec.backoff_limit if limit else None)
        kind = str(self.spec.kind)
        decision = container_restarted(rules, self._counts(), counted, count, kind)
        if decision.follows is Follows.FAILED:
            return self._fail(Next.FAILED, decision.reason, decision.message)
        return Verdict(Next.RESTART, decision.delay)

    def _rules(self, batch: bool = True) -> JobRules:
        """The Job's rules (an MPIJob's launcher Job, not ``batch``, has no indexes)."""
        spec = self.spec
        per_index = spec.backoff_limit_per_index if batch else None
        return JobRules(spec.backoff_limit, per_index, spec.max_failed_indexes, spec.tasks)

    def _counts(self) -> JobCounts:
        return JobCounts(
            self.failed_pods, dict(self._index_failures), frozenset(self.failed_indexes)
        )

    def _take(self, counts: JobCounts) -> None:
        """The Job's counts after a decision."""
        self.failed_pods = counts.failed
        self._index_failures = dict(counts.index_failures)
        self.failed_indexes = set(counts.failed_indexes)

    def _succeed_if_drivers_done(self) -> Verdict:
        drivers = [self._task[name] for r in self.spec.replicas if r.driver for name in r.pods]
        if drivers and all(task in self.succeeded for task in drivers):
            return self._succeed(Next.DONE)
        return Verdict(Next.DONE)

    def _succeed(self, pod_next: Next) -> Verdict:
        self.outcome = Outcome.SUCCEEDED
        self.reason = "Completed"
        self.message = f"{self.spec.kind} completed"
        return Verdict(pod_next, ended=Outcome.SUCCEEDED, reason=self.reason, message=self.message)

    def _fail(self, pod_next: Next, reason: str, message: str) -> Verdict:
        self.outcome = Outcome.FAILED
        self.reason = reason
        self.message = message
        return Verdict(pod_next, ended=Outcome.FAILED, reason=reason, message=message)

    def stops(self, lifetime: Lifetime) -> bool:
        """Whether a pod of this lifetime stops when its job ends."""
        return lifetime is not Lifetime.FOREVER
