"""What a workload's controller does when its pods end: the rules of a Kubernetes Job, a
Kubeflow PyTorchJob or MPIJob and a KubeRay RayCluster or RayJob, as plain data, and the
simulated failure model that exercises them.

A :class:`JobSpec` travels with a workload (:class:`~gpufleet.model.workload.TimedWorkload`)
to the simulated cluster, which plays the controller: it restarts a failed container in place,
replaces a failed pod with a new one (scheduled again), starts the next completion of a Job,
and fails the job when a backoff limit or deadline is passed. The scheduling core never reads
it: a pod that must be placed again reaches the core as the events it already understands.

:class:`SimFailures` is the deterministic failure model of the annotations
``gpufleet.dev/sim-failures`` (the first N attempts of each task fail),
``gpufleet.dev/sim-fail-after`` (how long a failing attempt runs before it fails; default: its
whole run time) and ``gpufleet.dev/sim-exit-code`` (the failing attempt's exit code, for the
ExitCode policy). A task is what a controller runs to completion: a Job's completion index
(or the n-th completion of a non-indexed Job), a replica of a training job or Ray cluster, the
Ray job of a RayJob; an attempt is one run of its container, restarted in place or in a new pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

#: Kubernetes' Job default ``backoffLimit`` (retries before the Job fails).
DEFAULT_BACKOFF_LIMIT = 6
#: The first exit code the Kubeflow training operator takes for a retryable failure.
RETRYABLE_EXIT_CODE = 128


class JobKind(StrEnum):
    POD = "Pod"
    JOB = "Job"
    PYTORCH_JOB = "PyTorchJob"
    MPI_JOB = "MPIJob"
    RAY_CLUSTER = "RayCluster"
    RAY_JOB = "RayJob"


class RestartPolicy(StrEnum):
    """Per pod template (or replica type): what follows when its container exits.

    ``Always`` and ``OnFailure`` restart the container in place (same node, same devices),
    ``Always`` even after a success; ``Never`` leaves a failed pod failed (a controller may then
    make a new pod); ``ExitCode`` (Kubeflow) makes a new pod when the exit code is retryable
    (128 or more) and fails the job otherwise.
    """

    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class Lifetime(StrEnum):
    """How long a pod runs when nothing fails."""

    #: For the workload's run time (its ``sim-duration``, else its ``expected-runtime``).
    WORK = "work"
    #: Until its job ends (MPI workers, the cluster of a RayJob that shuts it down after).
    JOB = "job"
    #: Until it is deleted (the cluster of a RayJob that keeps it after the job).
    FOREVER = "forever"


@dataclass(frozen=True, slots=True)
class SimFailures:
    """The first ``attempts`` attempts of each task fail, each ``after`` seconds into its run
    (None: at the end of its run time), exiting with ``exit_code``."""

    attempts: int = 0
    after: float | None = None
    exit_code: int = 1

    def __post_init__(self) -> None:
        if self.attempts < 0:
            raise ValueError(f"negative sim failures: {self.attempts}")
        if self.after is not None and self.after < 0:
            raise ValueError(f"negative sim fail-after: {self.after}")
        if not 1 <= self.exit_code <= 255:
            raise ValueError(f"a failure's exit code is 1..255, got {self.exit_code}")

    def fails(self, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (0 for the first) of a task fails."""
        return attempt < self.attempts


class PodFailureAction(StrEnum):
    """What a batch/v1 Job's ``podFailurePolicy`` rule does with a failed pod it matches."""

    FAIL_JOB = "FailJob"  # the Job fails at once
    FAIL_INDEX = "FailIndex"  # the pod's index fails (with backoffLimitPerIndex)
    IGNORE = "Ignore"  # not counted towards backoffLimit; a new pod is made
    COUNT = "Count"  # counted as any failure (the default)


#: The pod condition a pod lost to a disruption carries (preemption, eviction, a node's
#: taint or loss): what ``onPodConditions`` rules match.
DISRUPTION_TARGET = "DisruptionTarget"


@dataclass(frozen=True, slots=True)
class PodFailureRule:
    """One rule of a Job's ``podFailurePolicy``: ``action`` for a pod that failed with an exit
    code in ``exit_codes`` (``In``; ``NotIn`` when ``exit_codes_in`` is False), or, for a rule
    on pod conditions, that carries one of ``conditions`` ((type, status) pairs)."""

    action: PodFailureAction
    exit_codes: tuple[int, ...] = ()
    exit_codes_in: bool = True
    conditions: tuple[tuple[str, str], ...] = ()

    def matches(self, exit_code: int | None, conditions: frozenset[str]) -> bool:
        """Whether a pod that failed with ``exit_code`` (None: its container did not exit: it
        was lost) and carries the ``conditions`` (types, status True) matches."""
        if self.conditions:
            return any(status == "True" and kind in conditions for kind, status in self.conditions)
        if exit_code is None or exit_code == 0:
            return False
        return (exit_code in self.exit_codes) == self.exit_codes_in


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    """Pods of one replica type (a Job's pods, a PyTorchJob's Workers, a Ray worker group), by
    name in the workload, with their restart policy and failure model. ``driver``: the job
    succeeds when every driver pod has succeeded (a Job's pods, a PyTorchJob's Master, an
    MPIJob's Launcher, a RayJob's submitter)."""

    role: str
    pods: tuple[str, ...]
    restart_policy: RestartPolicy
    failures: SimFailures = field(default_factory=SimFailures)
    lifetime: Lifetime = Lifetime.WORK
    driver: bool = True


@dataclass(frozen=True, slots=True)
class JobSpec:
    """The controller rules of one object's pods; see the module docstring.

    ``completions`` (batch Job): successful pods needed, run ``len(pods)`` (its parallelism)
    at a time (0: one per pod); ``indexed`` gives each completion an index that completes
    once. ``backoff_limit``: retries before the job fails (None: no limit), counted as the
    kind counts them. ``backoff_limit_per_index`` and ``max_failed_indexes``: an Indexed Job's
    limits per index. ``active_deadline``: seconds a job may run, from its start (or its start
    after an eviction), before it fails.
    """

    kind: JobKind
    name: str
    replicas: tuple[ReplicaSet, ...]
    completions: int = 0
    indexed: bool = False
    backoff_limit: int | None = None
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    active_deadline: float | None = None
    pod_failure_policy: tuple[PodFailureRule, ...] = ()

    def failure_rule(
        self, exit_code: int | None, conditions: frozenset[str]
    ) -> tuple[int, PodFailureRule] | None:
        """(its index, the rule) of the first ``podFailurePolicy`` rule a failed pod matches."""
        for index, rule in enumerate(self.pod_failure_policy):
            if rule.matches(exit_code, conditions):
                return index, rule
        return None

    def replica_of(self, pod_name: str) -> ReplicaSet | None:
        for replica in self.replicas:
            if pod_name in replica.pods:
                return replica
        return None

    @property
    def pod_names(self) -> tuple[str, ...]:
        return tuple(name for replica in self.replicas for name in replica.pods)

    @property
    def tasks(self) -> int:
        """Tasks to complete: a Job's completions, else one per pod."""
        return self.completions or len(self.pod_names)
