"""``kind: IdlePolicy`` objects read into :class:`~gpufleet.model.idle.IdlePolicy`.

Owns the format (pydantic, ``extra="forbid"``)::

    apiVersion: gpufleet.dev/v1alpha1
    kind: IdlePolicy
    metadata: {name: notebooks}
    spec:
      scope:                          # every condition given must hold; none: all workloads
        namespaces: [ml-dev]
        queues: [research]
        selector: {matchLabels: {team: vision}}
        workloadKinds: [Pod, StatefulSet]   # training jobs only when named here
      threshold: 10                   # mean GPU utilisation (%) below which it is idle
      window: 1h                      # the mean's window (default 1h)
      grace: 1h                       # minimum run time before it is judged (default 1h)
      exemptLabel: {gpufleet.dev/idle-exempt: "true"}   # the default
      dryRun: false                   # report only
      actions:                        # in order, each after the previous by `after`
        - {action: Notify}
        - {action: Checkpoint, after: 15m}
        - {action: Stop, after: 30m}  # or ScaleToZero, or Preemptible

and the reading of one object (:func:`idle_policy_from_object`, for scenario files, the
control plane's ``put_object`` and the Kubernetes plane's objects) and of files or directories
of them (:func:`read_idle_policies`). Errors name the file, the document, the policy and the
field. It evaluates nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fields import check_object_fields
from gpufleet.io.manifests import describe, manifests_of_kind, named_object
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.io.validation import validation_error
from gpufleet.model.idle import (
    DEFAULT_GRACE_S,
    DEFAULT_THRESHOLD_PCT,
    DEFAULT_WINDOW_S,
    EXEMPT_LABEL,
    EXEMPT_VALUE,
    IdleAction,
    IdlePolicy,
    IdleScope,
    IdleStep,
    check_steps,
)

KIND = "IdlePolicy"
API_VERSIONS = ("gpufleet.dev/v1alpha1",)
SPEC_FIELDS = (
    "scope", "threshold", "window", "grace", "exemptLabel", "dryRun", "actions",
)  # fmt: skip


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class SelectorSpec(_Strict):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")


class ScopeSpec(_Strict):
    namespaces: list[str] = Field(default_factory=list)
    queues: list[str] = Field(default_factory=list)
    selector: SelectorSpec = Field(default_factory=SelectorSpec)
    workload_kinds: list[str] = Field(default_factory=list, alias="workloadKinds")

    def scope(self) -> IdleScope:
        return IdleScope(
            frozenset(self.namespaces),
            frozenset(self.queues),
            tuple(sorted(self.selector.match_labels.items())),
            frozenset(self.workload_kinds),
        )


class StepSpec(_Strict):
    action: IdleAction
    after: float = 0.0

    @field_validator("action", mode="before")
    @classmethod
    def _action(cls, value: object) -> IdleAction:
        known = ", ".join(a.value for a in IdleAction)
        if isinstance(value, str):
            for action in IdleAction:
                if value.strip().lower() == action.value.lower():
                    return action
        raise ValueError(f"expected one of {known}, got {describe(value)}")

    @field_validator("after", mode="before")
    @classmethod
    def _after(cls, value: object) -> float:
        return parse_duration_seconds(value)


class IdlePolicySpec(_Strict):
    """``spec`` of an IdlePolicy."""

    scope: ScopeSpec = Field(default_factory=ScopeSpec)
    threshold: float = Field(default=DEFAULT_THRESHOLD_PCT, gt=0, le=100)
    window: float = DEFAULT_WINDOW_S
    grace: float = DEFAULT_GRACE_S
    exempt_label: dict[str, str] = Field(
        default_factory=lambda: {EXEMPT_LABEL: EXEMPT_VALUE}, alias="exemptLabel"
    )
    dry_run: bool = Field(default=False, alias="dryRun")
    actions: list[StepSpec] = Field(min_length=1)

    @field_validator("window", "grace", mode="before")
    @classmethod
    def _durations(cls, value: object) -> float:
        return parse_duration_seconds(value)

    @field_validator("window")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"expected more than 0 s, got {value:g} s")
        return value

    @field_validator("exempt_label")
    @classmethod
    def _one_label(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) != 1:
            raise ValueError(f"expected one label (name: value), got {len(value)}")
        return value

    @field_validator("actions")
    @classmethod
    def _ordered(cls, value: list[StepSpec]) -> list[StepSpec]:
        check_steps(tuple(IdleStep(s.action, s.after) for s in value))
        return value

    def policy(self, name: str) -> IdlePolicy:
        ((key, label_value),) = self.exempt_label.items()
        return IdlePolicy(
            name=name,
            steps=tuple(IdleStep(s.action, s.after) for s in self.actions),
            scope=self.scope.scope(),
            threshold_pct=self.threshold,
            window_s=self.window,
            grace_s=self.grace,
            exempt_label=(key, label_value),
            dry_run=self.dry_run,
        )


def idle_policy_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> IdlePolicy:
    """One IdlePolicy object (see the module docstring)."""
    context, name, _ = named_object(obj, source, location, KIND, API_VERSIONS, namespaced=False)
    check_object_fields(context, obj, SPEC_FIELDS)
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    try:
        parsed = IdlePolicySpec.model_validate(spec)
    except ValidationError as error:
        found = validation_error(error, spec, source, context.location, IdlePolicySpec)
        field = "spec" if found.field is None else f"spec.{found.field}"
        raise InputError(found.source, found.reason, found.location, field) from None
    try:
        return parsed.policy(name)
    except ValueError as error:
        raise context.error("spec", str(error)) from None


def read_idle_policies(path: str | Path) -> list[IdlePolicy]:
    """Every IdlePolicy of a file or of a directory's ``*.yaml`` files, in order; another
    kind, or two policies of one name, is an error."""
    policies: list[IdlePolicy] = []
    seen: dict[str, str] = {}
    for manifest, source in manifests_of_kind(path, KIND, API_VERSIONS[0]):
        policy = idle_policy_from_object(manifest, source, manifest.location)
        check_unique(seen, policy.name, source, manifest.location)
        policies.append(policy)
    return policies


def check_unique(seen: dict[str, str], name: str, source: str, location: str | None) -> None:
    """InputError when a policy of ``name`` was read already (at ``seen[name]``); else
    remembers where this one is."""
    if name in seen:
        raise InputError(
            source,
            f"a second {KIND} named {quoted(name)}; the first is at {seen[name]}",
            location,
            "metadata.name",
        )
    seen[name] = f"{source}:{location}" if location else source
