"""What follows when a pod of a Job ends, as Kubernetes' Job controller and kubelet decide it.

Owns the pure decision, the same for every world: the Job's rules (:class:`JobRules`: its
``backoffLimit``, ``backoffLimitPerIndex``, ``maxFailedIndexes`` and ``completions``) and its
counts (:class:`JobCounts`: its failed pods, an Indexed Job's failures of each index and its
failed indexes) in, one end of a pod in, a :class:`Decision` out (what :class:`Follows`, after
which delay, with which reason and message, and the counts after it):

* :func:`pod_failed`: a pod failed for good (``restartPolicy`` Never, or lost with its node):
  it counts in ``status.failed``; past ``backoffLimit`` the Job fails
  (``BackoffLimitExceeded``); with ``backoffLimitPerIndex`` its index is retried until it
  failed more than that, then the index fails (:func:`index_failed`); otherwise a new pod
  replaces it after the Job controller's back-off.
* :func:`index_failed` (:func:`fail_index`: a ``FailIndex`` rule's, the pod's failure
  counted): an index failed for good: past ``maxFailedIndexes`` the Job fails at once
  (``MaxFailedIndexesExceeded``); else it goes on.
* :func:`through`: a pod is through with its completion: with all completions succeeded or
  failed, the Job succeeded, or failed for its failed indexes (``FailedIndexes``).
* :func:`container_restarted`: a container restarts in place (``OnFailure``) after the
  kubelet's back-off; the restarts of the live pods reach ``backoffLimit`` (for a limit of 0:
  any): the Job fails.
* :func:`deadline_exceeded`: its ``activeDeadlineSeconds`` passed: the Job fails.

It starts, stops and schedules nothing, does no I/O and reads no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpufleet.job_controller.backoffs import JOB_BACKOFF, KUBELET_BACKOFF, backoff

#: The reasons Kubernetes gives a Job failed: more failed pods (or restarts) than its
#: ``backoffLimit``; active longer than its ``activeDeadlineSeconds``; more failed indexes
#: than its ``maxFailedIndexes``; some indexes failed when all were through.
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
MAX_FAILED_INDEXES_EXCEEDED = "MaxFailedIndexesExceeded"
FAILED_INDEXES = "FailedIndexes"


class Follows(StrEnum):
    """What follows the end of a Job's pod."""

    RESTART = "restart"  # its container restarts in place after the decision's delay
    REPLACE = "replace"  # a new pod runs its task (its index) after the decision's delay
    INDEX_FAILED = "index-failed"  # its index failed for good; the Job goes on
    SUCCEEDED = "succeeded"  # the Job succeeded
    FAILED = "failed"  # the Job failed (the decision's reason and message say why)
    NOTHING = "nothing"  # the Job goes on (its other completions are still to do)


@dataclass(frozen=True, slots=True)
class JobRules:
    """A Job's rules for its pods' ends (None: not given)."""

    backoff_limit: int | None = None
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    completions: int = 1


@dataclass(frozen=True, slots=True)
class JobCounts:
    """A Job's counts: its failed pods (``status.failed``), an Indexed Job's failed pods of
    each index and its indexes failed for good."""

    failed: int = 0
    index_failures: Mapping[int, int] = field(default_factory=dict)
    failed_indexes: frozenset[int] = frozenset()

    def failures_of(self, index: int) -> int:
        return self.index_failures.get(index, 0)


@dataclass(frozen=True, slots=True)
class Decision:
    """What follows a pod's end (see the module docstring), and the Job's counts after it."""

    follows: Follows
    counts: JobCounts
    delay: float = 0.0
    reason: str = ""
    message: str = ""

    @property
    def job_ended(self) -> bool:
        return self.follows in (Follows.SUCCEEDED, Follows.FAILED)


def pod_failed(rules: JobRules, counts: JobCounts, index: int | None = None) -> Decision:
    """A pod of the Job failed for good (running ``index``, an Indexed Job's, or None)."""
    counts = replace(counts, failed=counts.failed + 1)
    limit = rules.backoff_limit
    if limit is not None and counts.failed > limit:
        return backoff_limit_exceeded(counts, limit)
    per_index = rules.backoff_limit_per_index
    if per_index is not None and index is not None:
        times = counts.failures_of(index) + 1
        counts = replace(counts, index_failures={**counts.index_failures, index: times})
        if times <= per_index:
            return Decision(Follows.REPLACE, counts, backoff(JOB_BACKOFF, times))
        return index_failed(rules, counts, index)
    return Decision(Follows.REPLACE, counts, backoff(JOB_BACKOFF, counts.failed))


def fail_index(rules: JobRules, counts: JobCounts, index: int) -> Decision:
    """A pod of the Job failed and a ``FailIndex`` rule fails its index at once (counted as a
    failed pod, not against ``backoffLimit``)."""
    return index_failed(rules, replace(counts, failed=counts.failed + 1), index)


def index_failed(rules: JobRules, counts: JobCounts, index: int) -> Decision:
    """The Job's ``index`` failed for good (its failure counted already): whether the Job
    goes on."""
    counts = replace(counts, failed_indexes=counts.failed_indexes | {index})
    most = rules.max_failed_indexes
    if most is not None and len(counts.failed_indexes) > most:
        message = f"Job has exceeded the maximum of {most} failed indexes"
        return Decision(Follows.FAILED, counts, reason=MAX_FAILED_INDEXES_EXCEEDED, message=message)
    return Decision(Follows.INDEX_FAILED, counts)


def through(rules: JobRules, counts: JobCounts, succeeded: int) -> Decision:
    """A pod is through with its completion, ``succeeded`` completions done: whether the Job
    is over (succeeded, or failed for its failed indexes)."""
    if succeeded + len(counts.failed_indexes) < rules.completions:
        return Decision(Follows.NOTHING, counts)
    if counts.failed_indexes:
        return failed_indexes_remain(counts)
    return Decision(Follows.SUCCEEDED, counts)


def failed_indexes_remain(counts: JobCounts) -> Decision:
    """All of the Job's indexes are through and some failed: the Job fails for them."""
    message = f"Job has failed indexes {listing(counts.failed_indexes)}"
    return Decision(Follows.FAILED, counts, reason=FAILED_INDEXES, message=message)


def container_restarted(
    rules: JobRules, counts: JobCounts, live_restarts: int, restarts: int, kind: str = "Job"
) -> Decision:
    """A container of the Job's pod failed and restarts in place (``OnFailure``): its
    ``restarts``-th restart, ``live_restarts`` over the Job's live pods (this one included)
    counting against its ``backoffLimit`` as Kubernetes counts them (for a limit of 0: any)."""
    limit = rules.backoff_limit
    if limit is not None and ((live_restarts > 0) if limit == 0 else (live_restarts >= limit)):
        return backoff_limit_exceeded(counts, limit, kind)
    return Decision(Follows.RESTART, counts, backoff(KUBELET_BACKOFF, restarts))


def backoff_limit_exceeded(counts: JobCounts, limit: int, kind: str = "Job") -> Decision:
    message = f"{kind} has reached the specified backoff limit ({limit})"
    return Decision(Follows.FAILED, counts, reason=BACKOFF_LIMIT_EXCEEDED, message=message)


def deadline_exceeded(counts: JobCounts) -> Decision:
    """The Job was active longer than its ``activeDeadlineSeconds``."""
    message = "active longer than its time limit (activeDeadlineSeconds)"
    return Decision(Follows.FAILED, counts, reason=DEADLINE_EXCEEDED, message=message)


def listing(indexes: Iterable[int]) -> str:
    """Indexes as Kubernetes lists them in a Job's message (the first 20, and how many more)."""
    shown = sorted(indexes)
    text = ",".join(str(i) for i in shown[:20])
    return text + (f" and {len(shown) - 20} more" if len(shown) > 20 else "")
