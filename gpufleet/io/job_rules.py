"""The controller rules of workload objects, read into :class:`~gpufleet.model.jobs.JobSpec`.

Owns the reading of what decides a pod's fate when it ends: a pod template's
``restartPolicy``, the simulated failure annotations (``gpufleet.dev/sim-failures``,
``gpufleet.dev/sim-fail-after``, ``gpufleet.dev/sim-exit-code``), and a batch/v1 Job's
``completions``, ``completionMode``, ``backoffLimit`` (default 6), ``backoffLimitPerIndex``,
``maxFailedIndexes`` and ``activeDeadlineSeconds``, checked as the API server checks them. The
training and Ray operators' rules are read by their own readers (``pytorch_jobs``,
``operator_jobs``) with the helpers here. What a rule does when a pod ends is the simulated
cluster's business (:mod:`gpufleet.backends.sim.jobs`); this module only reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.kube_resources import Annotations
from gpufleet.io.manifests import Context, describe
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.model.jobs import (
    DEFAULT_BACKOFF_LIMIT,
    JobKind,
    JobSpec,
    ReplicaSet,
    RestartPolicy,
    SimFailures,
)
from gpufleet.model.workload import TimedPod

SIM_FAILURES_ANNOTATION = "gpufleet.dev/sim-failures"
SIM_FAIL_AFTER_ANNOTATION = "gpufleet.dev/sim-fail-after"
SIM_EXIT_CODE_ANNOTATION = "gpufleet.dev/sim-exit-code"
POD_RESTART_POLICIES = (RestartPolicy.ALWAYS, RestartPolicy.ON_FAILURE, RestartPolicy.NEVER)
COMPLETION_MODES = ("NonIndexed", "Indexed")


def sim_failures(context: Context, annotations: Annotations) -> SimFailures:
    """The failure model a pod's annotations (its own, its template's or its owner's) give."""
    values = annotations.values
    attempts = 0
    if SIM_FAILURES_ANNOTATION in values:
        attempts = _whole(
            context, values[SIM_FAILURES_ANNOTATION], annotations, SIM_FAILURES_ANNOTATION, 0
        )
    after = None
    if SIM_FAIL_AFTER_ANNOTATION in values:
        after = context.parse(
            parse_duration_seconds,
            values[SIM_FAIL_AFTER_ANNOTATION],
            annotations.path(SIM_FAIL_AFTER_ANNOTATION),
        )
    exit_code = 1
    if SIM_EXIT_CODE_ANNOTATION in values:
        exit_code = _whole(
            context, values[SIM_EXIT_CODE_ANNOTATION], annotations, SIM_EXIT_CODE_ANNOTATION, 1
        )
        if exit_code > 255:
            raise context.error(
                annotations.path(SIM_EXIT_CODE_ANNOTATION),
                f"expected an exit code from 1 to 255, got {exit_code}",
            )
    return SimFailures(attempts, after, exit_code)


def _whole(context: Context, text: str, annotations: Annotations, key: str, minimum: int) -> int:
    stripped = text.strip()
    if not stripped.isdigit() or int(stripped) < minimum:
        raise context.error(
            annotations.path(key), f"expected a whole number >= {minimum}, got {quoted(text[:200])}"
        )
    return int(stripped)


def restart_policy(
    context: Context,
    value: object,
    field: str,
    allowed: Sequence[RestartPolicy] = POD_RESTART_POLICIES,
) -> RestartPolicy | None:
    """A restartPolicy field (None when it is not given)."""
    if value is None:
        return None
    names = [policy.value for policy in allowed]
    if not isinstance(value, str) or value not in names:
        raise context.error(field, f"expected {_either(names)}, got {describe(value)}")
    return RestartPolicy(value)


def optional_whole(
    context: Context, spec: Mapping[str, Any], key: str, path: str, minimum: int = 0
) -> int | None:
    value = spec.get(key)
    return None if value is None else context.integer(value, f"{path}.{key}", minimum)


def pod_rules(kind: JobKind, name: str, pods: Sequence[TimedPod]) -> JobSpec | None:
    """The rules of bare pods (a Pod, a Deployment's replica): only when they may fail, since a
    pod that cannot fail simply ends when its work is done. A Pod restarts in place unless
    its restartPolicy is Never (the default is Always)."""
    if not any(t.failures.attempts for t in pods):
        return None
    replicas = tuple(
        ReplicaSet("Pod", (t.pod.name,), t.restart_policy or RestartPolicy.ALWAYS, t.failures)
        for t in pods
    )
    return JobSpec(kind, name, replicas)


def batch_job(
    context: Context, name: str, spec: Mapping[str, Any], pods: Sequence[TimedPod]
) -> JobSpec:
    """A batch/v1 Job's rules. Its pods are ``min(parallelism, completions)`` (Kueue's pod set);
    ``completions`` of them must succeed. ``context`` names the Job."""
    path = "spec"
    parallelism = context.integer(spec.get("parallelism", 1), f"{path}.parallelism", 0)
    completions = optional_whole(context, spec, "completions", path)
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in COMPLETION_MODES:
        raise context.error(
            f"{path}.completionMode", f"expected {_either(COMPLETION_MODES)}, got {describe(mode)}"
        )
    indexed = mode == "Indexed"
    if indexed and completions is None:
        raise context.error(
            f"{path}.completions", "required when completionMode is Indexed, got nothing"
        )
    per_index = optional_whole(context, spec, "backoffLimitPerIndex", path)
    max_failed = optional_whole(context, spec, "maxFailedIndexes", path)
    for key, value in (("backoffLimitPerIndex", per_index), ("maxFailedIndexes", max_failed)):
        if value is not None and not indexed:
            raise context.error(f"{path}.{key}", "requires completionMode: Indexed")
    if max_failed is not None and per_index is None:
        raise context.error(f"{path}.maxFailedIndexes", "requires backoffLimitPerIndex")
    if max_failed is not None and completions is not None and max_failed > completions:
        raise context.error(
            f"{path}.maxFailedIndexes",
            f"expected at most the {completions} completions, got {max_failed}",
        )
    backoff = optional_whole(context, spec, "backoffLimit", path)
    if backoff is None and per_index is None:
        backoff = DEFAULT_BACKOFF_LIMIT  # with a limit per index, the whole Job has none
    deadline = optional_whole(context, spec, "activeDeadlineSeconds", path, 1)
    template_path = f"{path}.template.spec.restartPolicy"
    policies = {t.restart_policy for t in pods}
    policy = next(iter(policies)) if policies else None
    if policy is RestartPolicy.ALWAYS:
        raise context.error(template_path, "a Job's pods restart OnFailure or Never, got 'Always'")
    # The API server refuses a Job without one; kubectl create job writes Never, as read here.
    policy = policy or RestartPolicy.NEVER
    if per_index is not None and policy is not RestartPolicy.NEVER:
        raise context.error(
            template_path,
            f"backoffLimitPerIndex requires restartPolicy Never, got {quoted(policy.value)}",
        )
    failures = pods[0].failures if pods else SimFailures()
    names = tuple(t.pod.name for t in pods)
    total = completions if completions is not None else min(parallelism, len(names))
    return JobSpec(
        JobKind.JOB,
        name,
        (ReplicaSet("Job", names, policy, failures),),
        completions=total,
        indexed=indexed,
        backoff_limit=backoff,
        backoff_limit_per_index=per_index,
        max_failed_indexes=max_failed,
        active_deadline=None if deadline is None else float(deadline),
    )


def _either(names: Sequence[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
