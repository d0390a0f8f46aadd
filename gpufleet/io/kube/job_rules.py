"""The controller rules of workload objects, read into :class:`~gpufleet.model.jobs.JobSpec`.

Owns the reading of what decides a pod's fate when it ends: a pod template's
``restartPolicy``, the simulated failure annotations (``gpufleet.dev/sim-failures``,
``gpufleet.dev/sim-fail-after``, ``gpufleet.dev/sim-exit-code``), and a batch/v1 Job's
``completions``, ``completionMode``, ``backoffLimit`` (default 6), ``backoffLimitPerIndex``,
``maxFailedIndexes``, ``activeDeadlineSeconds`` and ``podFailurePolicy`` (its rules on exit
codes and on pod conditions), checked as the API server checks them; and what a Job of
``parallelism: 0`` is (:func:`paused_job_note`: valid, it runs no pods). The
training and Ray operators' rules are read by their own readers (``pytorch_jobs``,
``operator_jobs``) with the helpers here. It reads a job array's range too
(:func:`parse_array`: Slurm's ``--array FIRST-LAST[%MOST]``, as ``gpufleet run --array`` writes
it and keeps it in the Job's ``gpufleet.dev/array`` annotation). What a rule does when a pod
ends is the simulated cluster's business (:mod:`gpufleet.backends.sim.jobs`); this module only
reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.kube.resources import Annotations
from gpufleet.io.manifests import Context, describe
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.model.jobs import (
    DEFAULT_BACKOFF_LIMIT,
    JobKind,
    JobSpec,
    PodFailureAction,
    PodFailureRule,
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
#: The API server's bounds on a podFailurePolicy: rules, exit codes per rule, conditions per rule.
MAX_FAILURE_RULES = 20
MAX_EXIT_CODES = 255
MAX_POD_CONDITIONS = 20
EXIT_CODE_OPERATORS = ("In", "NotIn")
CONDITION_STATUSES = ("True", "False", "Unknown")
#: The annotation of a Job made by ``gpufleet run --array``: its range, ``FIRST-LAST``.
ARRAY_ANNOTATION = "gpufleet.dev/array"
_ARRAY = re.compile(r"^(\d+)-(\d+)(?:%(\d+))?$")


def parse_array(text: str) -> tuple[int, int, int | None]:
    """Slurm's job array range ``FIRST-LAST[%MOST]`` (``0-99``, ``1-10%2``): (its first task
    id, how many tasks, how many run at a time: None for all). A ValueError says what is
    wrong."""
    found = _ARRAY.match(text.strip())
    if found is None:
        raise ValueError(f"expected FIRST-LAST or FIRST-LAST%MOST (0-99, 1-10%2), got {text!r}")
    first, last = int(found.group(1)), int(found.group(2))
    if last < first:
        raise ValueError(f"expected FIRST <= LAST, got {text!r}")
    most = None if found.group(3) is None else int(found.group(3))
    if most is not None and most < 1:
        raise ValueError(f"expected at least 1 task at a time, got {text!r}")
    return first, last - first + 1, most


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


def paused_job_note(namespace: str, name: str, spec: Mapping[str, Any]) -> str | None:
    """What a batch/v1 Job of ``parallelism: 0`` is, in a line (every path shows it the same
    way), or None for any other Job. Kubernetes takes such a Job: it runs no pods and stays
    active, in effect paused, until its parallelism is raised; gpufleet reads it as valid and
    makes no workload of it. ``spec`` has been read already (its parallelism is checked)."""
    if spec.get("parallelism", 1) != 0:
        return None
    return (
        f"Job {namespace}/{name}: parallelism 0 runs no pods (Kubernetes keeps it active "
        "until its parallelism is raised)"
    )


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
    rules = pod_failure_policy(context, spec.get("podFailurePolicy"), f"{path}.podFailurePolicy")
    if rules and policy is not RestartPolicy.NEVER:
        raise context.error(
            f"{path}.podFailurePolicy",
            f"requires restartPolicy Never in the pod template, got {quoted(policy.value)}",
        )
    for i, rule in enumerate(rules):
        if rule.action is PodFailureAction.FAIL_INDEX and per_index is None:
            raise context.error(
                f"{path}.podFailurePolicy.rules[{i}].action",
                "FailIndex requires backoffLimitPerIndex",
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
        pod_failure_policy=rules,
    )


def pod_failure_policy(context: Context, value: object, path: str) -> tuple[PodFailureRule, ...]:
    """A Job's ``podFailurePolicy`` (none when absent), checked as the API server checks it."""
    if value is None:
        return ()
    policy = context.mapping(value, path)
    for key in policy:
        if key != "rules":
            raise context.error(f"{path}.{key}", "unknown field (expected: rules)")
    items = context.sequence(policy.get("rules"), f"{path}.rules")
    if len(items) > MAX_FAILURE_RULES:
        raise context.error(
            f"{path}.rules", f"expected at most {MAX_FAILURE_RULES} rules, got {len(items)}"
        )
    return tuple(_failure_rule(context, item, f"{path}.rules[{i}]") for i, item in enumerate(items))


def _failure_rule(context: Context, item: object, path: str) -> PodFailureRule:
    rule = context.mapping(item, path, required=True)
    for key in rule:
        if key not in ("action", "onExitCodes", "onPodConditions"):
            raise context.error(
                f"{path}.{key}", "unknown field (expected: action, onExitCodes, onPodConditions)"
            )
    actions = [a.value for a in PodFailureAction]
    action = rule.get("action")
    if action not in actions:
        raise context.error(
            f"{path}.action", f"expected {_either(actions)}, got {describe(action)}"
        )
    codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
    if (codes is None) == (conditions is None):
        both = "both are given" if codes is not None else "neither is given"
        raise context.error(path, f"give one of onExitCodes or onPodConditions: {both}")
    if codes is not None:
        values, within = _exit_codes(context, codes, f"{path}.onExitCodes")
        return PodFailureRule(PodFailureAction(action), values, within)
    patterns = context.sequence(conditions, f"{path}.onPodConditions")
    if not 1 <= len(patterns) <= MAX_POD_CONDITIONS:
        raise context.error(
            f"{path}.onPodConditions",
            f"expected 1 to {MAX_POD_CONDITIONS} patterns, got {len(patterns)}",
        )
    pairs = []
    for j, pattern in enumerate(patterns):
        where = f"{path}.onPodConditions[{j}]"
        entry = context.mapping(pattern, where, required=True)
        for key in entry:
            if key not in ("type", "status"):
                raise context.error(f"{where}.{key}", "unknown field (expected: type, status)")
        kind = context.label_key(context.text(entry.get("type"), f"{where}.type"), f"{where}.type")
        status = context.text(entry.get("status"), f"{where}.status", "True")
        if status not in CONDITION_STATUSES:
            raise context.error(
                f"{where}.status", f"expected {_either(CONDITION_STATUSES)}, got {quoted(status)}"
            )
        pairs.append((kind, status))
    return PodFailureRule(PodFailureAction(action), conditions=tuple(pairs))


def _exit_codes(context: Context, value: object, path: str) -> tuple[tuple[int, ...], bool]:
    """(the exit codes, whether the operator is In) of an ``onExitCodes`` requirement."""
    requirement = context.mapping(value, path, required=True)
    for key in requirement:
        if key not in ("containerName", "operator", "values"):
            raise context.error(
                f"{path}.{key}", "unknown field (expected: containerName, operator, values)"
            )
    if requirement.get("containerName") is not None:
        context.text(requirement["containerName"], f"{path}.containerName")
    operator = requirement.get("operator")
    if operator not in EXIT_CODE_OPERATORS:
        raise context.error(
            f"{path}.operator", f"expected {_either(EXIT_CODE_OPERATORS)}, got {describe(operator)}"
        )
    items = context.sequence(requirement.get("values"), f"{path}.values")
    if not 1 <= len(items) <= MAX_EXIT_CODES:
        raise context.error(
            f"{path}.values", f"expected 1 to {MAX_EXIT_CODES} exit codes, got {len(items)}"
        )
    codes = [context.integer(code, f"{path}.values[{i}]") for i, code in enumerate(items)]
    for i in range(1, len(codes)):
        if codes[i] <= codes[i - 1]:
            raise context.error(
                f"{path}.values[{i}]",
                f"expected exit codes in increasing order without repeats, got {codes[i]} "
                f"after {codes[i - 1]}",
            )
    if operator == "In" and 0 in codes:
        raise context.error(f"{path}.values", "the In operator may not list exit code 0")
    return tuple(codes), operator == "In"


def _either(names: Sequence[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
