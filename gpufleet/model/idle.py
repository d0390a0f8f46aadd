"""Idle-GPU policies and what they decide: plain data.

Owns :class:`IdlePolicy` (``kind: IdlePolicy``: which workloads it watches, :class:`IdleScope`;
the utilisation below which a workload counts as idle, averaged over a window; the grace, a
minimum run time before it is judged; the exemption label; and the ordered
:class:`IdleStep` actions with a delay before each), :class:`IdleCandidate` (a running workload
as a policy sees it) and :class:`IdleDecision` (one step due for one workload, with the numbers
that triggered it). Reading policies from YAML is :mod:`gpufleet.io.fleet.idle_policies`;
deciding is :mod:`gpufleet.telemetry.idle`; carrying a decision out is the service's
(:mod:`gpufleet.service.idle_actions`) or the simulator's. Nothing here reads a series or a clock.

The defaults: 10% mean utilisation over 1 h, judged after 1 h of running. The seeds alert on
pods below 40% that ran more than an hour (the built-in ``abandoned-notebook`` GPUAlertRule);
a policy that stops work acts on a lower bar, under which the simulator's notebook and debug
profiles sit (a few percent on average) and its inference profile does not (5-20% base, 40-80%
at peak, so an hour's mean stays above 10% but at its quietest hours).

Training is left alone unless asked: a workload that is a training job (a PyTorchJob or
MPIJob, or a pod whose usage profile says ``training``; :attr:`IdleCandidate.training`) is in a
policy's scope only when the policy's ``workloadKinds`` names its kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.times import format_duration

#: The label (and value) that exempts a workload from every idle policy, unless a policy says
#: another.
EXEMPT_LABEL = "gpufleet.dev/idle-exempt"
EXEMPT_VALUE = "true"
#: The annotation a Checkpoint step writes (the time it was asked, RFC 3339).
CHECKPOINT_REQUESTED_ANNOTATION = "gpufleet.dev/checkpoint-requested"
#: The label a Preemptible step sets on a workload's pods.
PREEMPTIBLE_LABEL = "gpufleet.dev/preemptible"
#: Kinds that are training jobs by what they are.
TRAINING_KINDS = frozenset({"PyTorchJob", "MPIJob"})

DEFAULT_THRESHOLD_PCT = 10.0
DEFAULT_WINDOW_S = 3600.0
DEFAULT_GRACE_S = 3600.0


class IdleAction(StrEnum):
    """What a step does. Notify and Checkpoint come first (each at most once, in this order);
    one of Stop, ScaleToZero and Preemptible may end the list."""

    NOTIFY = "Notify"
    CHECKPOINT = "Checkpoint"
    STOP = "Stop"
    SCALE_TO_ZERO = "ScaleToZero"
    PREEMPTIBLE = "Preemptible"

    @property
    def final(self) -> bool:
        return self in FINAL_ACTIONS


FINAL_ACTIONS = frozenset({IdleAction.STOP, IdleAction.SCALE_TO_ZERO, IdleAction.PREEMPTIBLE})
_ORDER = {IdleAction.NOTIFY: 0, IdleAction.CHECKPOINT: 1}


@dataclass(frozen=True, slots=True)
class IdleStep:
    """An action, taken ``after_s`` after the previous step (the first: after the workload is
    first found idle)."""

    action: IdleAction
    after_s: float = 0.0


def check_steps(steps: tuple[IdleStep, ...]) -> None:
    """ValueError unless the steps are Notify?, Checkpoint?, then at most one final action,
    with delays of 0 or more."""
    if not steps:
        raise ValueError("expected at least one action")
    seen: set[IdleAction] = set()
    last = -1
    for i, step in enumerate(steps):
        if step.after_s < 0:
            raise ValueError(f"action {i} ({step.action}): a negative delay")
        if step.action in seen:
            raise ValueError(f"action {i}: {step.action} appears twice")
        seen.add(step.action)
        if step.action.final:
            if i != len(steps) - 1:
                raise ValueError(
                    f"action {i}: {step.action} ends the list; nothing may follow it "
                    f"(got {steps[i + 1].action} after it)"
                )
            continue
        rank = _ORDER[step.action]
        if rank < last:
            raise ValueError(f"action {i}: {step.action} must come before Checkpoint")
        last = rank


@dataclass(frozen=True, slots=True)
class IdleScope:
    """Which workloads a policy watches: every condition given must hold (an empty one holds
    for all). ``labels``: each must equal the workload's label."""

    namespaces: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()
    labels: tuple[tuple[str, str], ...] = ()
    workload_kinds: frozenset[str] = frozenset()

    def holds(self, candidate: IdleCandidate) -> bool:
        if self.namespaces and candidate.namespace not in self.namespaces:
            return False
        if self.queues and candidate.queue not in self.queues:
            return False
        if self.workload_kinds and candidate.kind not in self.workload_kinds:
            return False
        if candidate.training and candidate.kind not in self.workload_kinds:
            return False  # training only when the policy names its kind
        return all(candidate.labels.get(key) == value for key, value in self.labels)


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """``kind: IdlePolicy`` (see the module docstring). ``dry_run``: report, never act."""

    name: str
    steps: tuple[IdleStep, ...]
    scope: IdleScope = IdleScope()
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    window_s: float = DEFAULT_WINDOW_S
    grace_s: float = DEFAULT_GRACE_S
    exempt_label: tuple[str, str] = (EXEMPT_LABEL, EXEMPT_VALUE)
    dry_run: bool = False

    def __post_init__(self) -> None:
        check_steps(self.steps)
        if not 0 < self.threshold_pct <= 100:
            raise ValueError(f"threshold: expected 0 < threshold <= 100, got {self.threshold_pct}")
        if self.window_s <= 0:
            raise ValueError(f"window: expected more than 0 s, got {self.window_s}")
        if self.grace_s < 0:
            raise ValueError(f"grace: expected 0 s or more, got {self.grace_s}")

    def exempts(self, candidate: IdleCandidate) -> bool:
        key, value = self.exempt_label
        return candidate.labels.get(key) == value

    def applies_to(self, candidate: IdleCandidate) -> bool:
        return self.scope.holds(candidate) and not self.exempts(candidate)


@dataclass(frozen=True, slots=True)
class IdleCandidate:
    """A running workload holding GPUs, as a policy sees it. ``pods``: (namespace, pod) of
    each pod; ``owner``: the Deployment or StatefulSet that makes its pods (``Kind/name``;
    empty for none), what ScaleToZero scales."""

    key: str
    namespace: str
    name: str
    queue: str
    kind: str
    pods: tuple[str, ...]
    started_at: float
    gpus: float
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    training: bool = False
    checkpointable: bool = False
    preemptible: bool = True
    owner: str = ""


@dataclass(frozen=True, slots=True)
class IdleDecision:
    """One step due for one workload, with the numbers that triggered it: its GPUs' mean
    utilisation over the policy's window, the threshold, how long it has been found idle, the
    GPUs it holds. ``step``: the step's index in the policy's list."""

    policy: str
    workload: str
    namespace: str
    pods: tuple[str, ...]
    action: IdleAction
    step: int
    steps: int
    at: float
    mean_util_pct: float
    threshold_pct: float
    window_s: float
    idle_for_s: float
    gpus: float
    kind: str = ""
    owner: str = ""
    dry_run: bool = False

    @property
    def reason(self) -> str:
        """The Event reason: ``IdleReclaimNotify``, ``IdleReclaimStop``..."""
        return f"IdleReclaim{self.action.value}"

    @property
    def message(self) -> str:
        prefix = "dry run: would " if self.dry_run else ""
        verb = _VERBS[self.action]
        return (
            f"{prefix}{verb} {self.workload}: mean GPU utilisation {self.mean_util_pct:.1f}% "
            f"over {format_duration(self.window_s)} (threshold {self.threshold_pct:g}%), idle "
            f"for {format_duration(self.idle_for_s)}, holding {self.gpus:g} GPU(s); "
            f"IdlePolicy {self.policy}, step {self.step + 1} of {self.steps}"
        )


_VERBS = {
    IdleAction.NOTIFY: "notify the owner of",
    IdleAction.CHECKPOINT: "ask for a checkpoint of",
    IdleAction.STOP: "stop",
    IdleAction.SCALE_TO_ZERO: "scale to zero",
    IdleAction.PREEMPTIBLE: "make preemptible",
}
