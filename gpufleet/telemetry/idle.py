"""The idle-policy engine: which step of which policy is due for which running workload.

Owns :class:`IdleEngine`. Each round (:meth:`IdleEngine.decide`, ``now`` passed in) it takes
the policies, the running workloads (:class:`~gpufleet.model.idle.IdleCandidate`) and a
:class:`~gpufleet.telemetry.rules.SeriesQuery`, and returns the
:class:`~gpufleet.model.idle.IdleDecision` of each step now due. The rules:

* a workload answers to the first policy (by name) whose scope holds it and that does not
  exempt it; an exempt or out-of-scope workload is never acted on (training jobs are out of
  scope unless a policy names their kind: :class:`~gpufleet.model.idle.IdleScope`);
* it is judged only once it has run the policy's grace;
* its utilisation is the mean of ``gpufleet_workload_gpu_util`` over the policy's window,
  averaged over its pods weighted by nothing (each pod's series is already a mean over its
  GPUs); a workload none of whose pods has a sample is unknown: nothing happens and its state
  is kept (never taken as 0);
* at or above the threshold its state is forgotten (it starts again from the first step when
  it next falls idle); below it, the first round below starts the clock (``idle since``);
* a step is due once its delay has passed since the previous step (the first: since the
  workload was first found idle); at most one step a round, so none is ever skipped; after the
  last step nothing more happens while the workload stays idle.

Decisions are taken to be carried out (a dry run reports them and moves on the same way, so
it shows the whole sequence). A workload that is gone is forgotten. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.model.alerts import AlertMetric
from gpufleet.model.idle import IdleCandidate, IdleDecision, IdlePolicy
from gpufleet.telemetry.rules import SeriesQuery

WORKLOAD_UTIL = AlertMetric.WORKLOAD_GPU_UTIL.value


@dataclass(slots=True)
class IdleState:
    """Where one workload stands with its policy."""

    policy: str
    idle_since: float
    steps_taken: int = 0
    last_step_at: float | None = None


class IdleEngine:
    """See the module docstring. ``dry_run``: every decision says it is a dry run."""

    def __init__(self, policies: Iterable[IdlePolicy] = (), dry_run: bool = False) -> None:
        self.policies: list[IdlePolicy] = []
        self.dry_run = dry_run
        self.states: dict[str, IdleState] = {}
        self.set_policies(policies)

    def set_policies(self, policies: Iterable[IdlePolicy]) -> None:
        """Replace the policies; a workload whose policy is gone starts again."""
        self.policies = sorted(policies, key=lambda p: p.name)
        names = {p.name for p in self.policies}
        self.states = {k: s for k, s in self.states.items() if s.policy in names}

    def policy_of(self, candidate: IdleCandidate) -> IdlePolicy | None:
        for policy in self.policies:
            if policy.applies_to(candidate):
                return policy
        return None

    def decide(
        self, now: float, candidates: Sequence[IdleCandidate], series: SeriesQuery
    ) -> list[IdleDecision]:
        """The steps due now (see the module docstring)."""
        present = {c.key for c in candidates}
        for gone in [key for key in self.states if key not in present]:
            del self.states[gone]
        judged: list[tuple[IdleCandidate, IdlePolicy]] = []
        for candidate in candidates:
            policy = self.policy_of(candidate)
            if policy is None or now - candidate.started_at < policy.grace_s:
                self.states.pop(candidate.key, None)
                continue
            judged.append((candidate, policy))
        means = self._pod_means(now, {policy.window_s for _, policy in judged}, series)
        decisions: list[IdleDecision] = []
        for candidate, policy in judged:
            mean = workload_mean(candidate, means[policy.window_s])
            if mean is None:
                continue  # unknown: no telemetry for it, never taken as idle
            decision = self._step(now, candidate, policy, mean)
            if decision is not None:
                decisions.append(decision)
        return decisions

    def _pod_means(
        self, now: float, windows: Iterable[float], series: SeriesQuery
    ) -> dict[float, dict[tuple[str, str], float]]:
        """Per window: (namespace, pod) -> the pod's mean utilisation over it (one query a
        window, not one a workload)."""
        found: dict[float, dict[tuple[str, str], float]] = {}
        for window in windows:
            per_pod: dict[tuple[str, str], float] = {}
            for labels, value in series.query(WORKLOAD_UTIL, "avg", window, now, {}).items():
                named = dict(labels)
                per_pod[(named.get("namespace", ""), named.get("pod", ""))] = value
            found[window] = per_pod
        return found

    def _step(
        self, now: float, candidate: IdleCandidate, policy: IdlePolicy, mean: float
    ) -> IdleDecision | None:
        state = self.states.get(candidate.key)
        if mean >= policy.threshold_pct:
            self.states.pop(candidate.key, None)
            return None
        if state is None or state.policy != policy.name:
            state = self.states[candidate.key] = IdleState(policy.name, now)
        if state.steps_taken >= len(policy.steps):
            return None
        step = policy.steps[state.steps_taken]
        since = state.idle_since if state.last_step_at is None else state.last_step_at
        if now - since < step.after_s:
            return None
        index = state.steps_taken
        state.steps_taken += 1
        state.last_step_at = now
        return IdleDecision(
            policy=policy.name,
            workload=candidate.key,
            namespace=candidate.namespace,
            pods=candidate.pods,
            action=step.action,
            step=index,
            steps=len(policy.steps),
            at=now,
            mean_util_pct=mean,
            threshold_pct=policy.threshold_pct,
            window_s=policy.window_s,
            idle_for_s=now - state.idle_since,
            gpus=candidate.gpus,
            kind=candidate.kind,
            owner=candidate.owner,
            dry_run=self.dry_run or policy.dry_run,
        )


def workload_mean(
    candidate: IdleCandidate, per_pod: Mapping[tuple[str, str], float]
) -> float | None:
    """The mean of its pods' utilisation (those with a value); None when none has one."""
    values = [
        per_pod[key]
        for pod in candidate.pods
        if (key := _pod_key(candidate.namespace, pod)) in per_pod
    ]
    return sum(values) / len(values) if values else None


def _pod_key(namespace: str, pod: str) -> tuple[str, str]:
    """``pod`` as (namespace, name): a pod given as ``ns/name`` keeps its own namespace."""
    if "/" in pod:
        ns, _, name = pod.partition("/")
        return ns, name
    return namespace, pod
