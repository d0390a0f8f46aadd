"""When the local machine starts a process again in place, and after how long.

Owns the kubelet's rules for a container whose pod has a ``restartPolicy``, as the local
machine (:mod:`.machine`) applies them to a process: :func:`restarts_after` (``Always``: any
end; ``OnFailure``: a failure, a lost run included; ``Never`` or none: no end) and
:class:`CrashBackoff`, the delay before each restart (CrashLoopBackOff: 10 s, doubling to
5 min, and back to 10 s once a run has lasted 10 min: :mod:`gpufleet.job_controller.backoffs`'
constants and doubling), injectable so that tests need not wait.
It also owns :class:`RunCounts`, what a run keeps in its labels of its workload's history (its
failures against a backoff limit, its restarts in place, its back-off streak, its time limit,
an Indexed Job's failures of each index and its failed indexes),
so that a restarted server goes on counting. It starts and stops nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.job_controller.backoffs import KUBELET_BACKOFF, KUBELET_BACKOFF_RESET_S, backoff
from gpufleet.model.jobs import RestartPolicy


@dataclass(frozen=True, slots=True)
class CrashBackoff:
    """The delay before restarting a process in place (see the module docstring)."""

    initial_s: float = KUBELET_BACKOFF[0]
    cap_s: float = KUBELET_BACKOFF[1]
    reset_after_s: float = KUBELET_BACKOFF_RESET_S

    def delay(self, streak: int) -> float:
        """The delay before the restart that follows ``streak`` restarts without a reset."""
        return backoff((self.initial_s, self.cap_s), streak + 1)


def restarts_after(policy: RestartPolicy | None, succeeded: bool) -> bool:
    """Whether a process with ``policy`` is started again in place after this end."""
    if policy is RestartPolicy.ALWAYS:
        return True
    return policy is RestartPolicy.ON_FAILURE and not succeeded


@dataclass(frozen=True, slots=True)
class RunCounts:
    """A workload's history as its runs keep it: failures counted against its backoff limit,
    restarts in place, restarts since its back-off was reset, when its time limit passes, and
    an Indexed Job's failed runs of each index (index, failures) and its failed indexes."""

    failures: int = 0
    restarts: int = 0
    streak: int = 0
    deadline_at: float | None = None
    index_failures: tuple[tuple[int, int], ...] = ()
    failed_indexes: tuple[int, ...] = ()

    def labels(self) -> dict[str, str]:
        """The labels a run keeps (only those that are not their default)."""
        found = {"failures": self.failures, "restarts": self.restarts, "streak": self.streak}
        labels = {name: str(value) for name, value in found.items() if value}
        if self.deadline_at is not None:
            labels["deadline_at"] = repr(self.deadline_at)
        if self.index_failures:
            labels["index_failures"] = ",".join(f"{i}:{n}" for i, n in self.index_failures)
        if self.failed_indexes:
            labels["failed_indexes"] = ",".join(str(i) for i in self.failed_indexes)
        return labels

    @classmethod
    def of(cls, labels: Mapping[str, str]) -> RunCounts:
        deadline_at = labels.get("deadline_at")
        pairs = [p.split(":") for p in labels.get("index_failures", "").split(",") if p]
        failed = [int(i) for i in labels.get("failed_indexes", "").split(",") if i]
        return cls(
            int(labels.get("failures", "0")),
            int(labels.get("restarts", "0")),
            int(labels.get("streak", "0")),
            None if deadline_at is None else float(deadline_at),
            tuple(sorted((int(i), int(n)) for i, n in pairs)),
            tuple(sorted(failed)),
        )

    def most(self, other: RunCounts) -> RunCounts:
        """The larger counts of two runs of one workload (its latest start's)."""
        return RunCounts(
            max(self.failures, other.failures),
            max(self.restarts, other.restarts),
            max(self.streak, other.streak),
            self.deadline_at if self.deadline_at is not None else other.deadline_at,
            _most_each(self.index_failures, other.index_failures),
            tuple(sorted({*self.failed_indexes, *other.failed_indexes})),
        )


def _most_each(
    one: tuple[tuple[int, int], ...], other: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    """The larger count of each index of two runs' counts."""
    counts = dict(one)
    for index, count in other:
        counts[index] = max(count, counts.get(index, 0))
    return tuple(sorted(counts.items()))
