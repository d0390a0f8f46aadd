"""``kind: GPUAlertRule`` objects read into :class:`~gpufleet.model.alerts.AlertRule`, and the
rules gpufleet ships.

Owns the format (pydantic, ``extra="forbid"``)::

    apiVersion: gpufleet.dev/v1alpha1
    kind: GPUAlertRule
    metadata: {name: gpu-utilisation-low}
    spec:
      metric: DCGM_FI_DEV_GPU_UTIL   # or FB_USED, gpufleet_gpu_memory_used_percent, GPU_TEMP,
                                     # POWER_USAGE, XID_ERRORS, gpufleet_workload_gpu_util
      aggregation: avg               # avg | max | min | last (default) | quantile
      quantile: 0.95                 # with aggregation: quantile only
      window: 1h                     # required but with last (which looks back 5m)
      comparison: "<"                # > >= < <= == !=
      threshold: 20
      for: 2h                        # default 0: fires in the first round it holds
      severity: warning              # info | warning (default) | critical
      scope: {namespace: ml, labels: {modelName: NVIDIA H100 80GB HBM3}}
      # labels the metric's series carry only (``series_labels``: a queue or a team label is
      # refused, Prometheus would match nothing); allocated: true, only GPUs a pod holds
      minRunning: 1h                 # workload metrics only: how long it must have run
      summary: GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is idle

(a summary may use ``{{ $labels.NAME }}`` and ``{{ $value }}``, which gpufleet's notifications
expand as Prometheus expands the exported rule's; any other ``{{`` is refused), the reading of
files and directories of them (:func:`read_alert_rules`: errors name the file, the document,
the rule and the field; an unknown metric lists the known ones; two rules of one name are
refused), and :func:`builtin_alert_rules`: the seeds' rules, shipped as
``gpufleet/data/alert_rules.yaml`` and read by this same reader. It evaluates nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fields import check_object_fields
from gpufleet.io.manifests import describe, manifests_of_kind, named_object
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.io.validation import validation_error
from gpufleet.model.alert_annotations import check_summary
from gpufleet.model.alerts import (
    LABEL_NAME,
    Aggregation,
    AlertMetric,
    AlertRule,
    AlertScope,
    Comparison,
    Severity,
    label_set,
)

KIND = "GPUAlertRule"
API_VERSIONS = ("gpufleet.dev/v1alpha1",)
#: Where the built-in rules live, inside the package.
BUILTIN_RULES_FILE = "alert_rules.yaml"
SPEC_FIELDS = (
    "metric", "aggregation", "quantile", "window", "comparison", "threshold", "for", "severity",
    "scope", "minRunning", "summary",
)  # fmt: skip

#: Other spellings of a metric, to the name a rule uses.
_METRIC_ALIASES = {
    **{metric.name.lower(): metric for metric in AlertMetric},
    **{metric.value.removeprefix("DCGM_FI_DEV_").lower(): metric for metric in AlertMetric},
}
_COMPARISON_WORDS = {
    "gt": Comparison.GT,
    "ge": Comparison.GE,
    "gte": Comparison.GE,
    "lt": Comparison.LT,
    "le": Comparison.LE,
    "lte": Comparison.LE,
    "eq": Comparison.EQ,
    "ne": Comparison.NE,
}


def known_metrics() -> str:
    return ", ".join(metric.value for metric in AlertMetric)


def parse_metric(value: str) -> AlertMetric:
    """A metric by its name (``DCGM_FI_DEV_GPU_UTIL``) or short name (``GPU_UTIL``)."""
    text = value.strip()
    for metric in AlertMetric:
        if text == metric.value:
            return metric
    found = _METRIC_ALIASES.get(text.lower())
    if found is None:
        raise ValueError(f"unknown metric {quoted(value)} (known: {known_metrics()})")
    return found


def parse_comparison(value: str) -> Comparison:
    text = value.strip()
    try:
        return Comparison(text)
    except ValueError:
        pass
    found = _COMPARISON_WORDS.get(text.lower())
    if found is None:
        known = " ".join(c.value for c in Comparison)
        raise ValueError(
            f"expected one of {known} (or gt, ge, lt, le, eq, ne), got {quoted(value)}"
        )
    return found


def _duration(value: object) -> float:
    return parse_duration_seconds(value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class ScopeSpec(_Strict):
    namespace: str | None = Field(default=None, min_length=1)
    queue: str | None = Field(default=None, min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    allocated: bool = False

    @field_validator("labels")
    @classmethod
    def _label_names(cls, labels: dict[str, str]) -> dict[str, str]:
        for key in labels:
            if not LABEL_NAME.fullmatch(key):
                raise ValueError(
                    f"label {quoted(key)} is not a Prometheus label name "
                    "(letters, digits and _, not starting with a digit)"
                )
        return labels


class AlertRuleSpec(_Strict):
    """``spec`` of a GPUAlertRule."""

    metric: AlertMetric
    aggregation: Aggregation = Aggregation.LAST
    quantile: float | None = None
    window: float = 0.0
    comparison: Comparison
    threshold: float
    for_: float = Field(default=0.0, alias="for")
    severity: Severity = Severity.WARNING
    scope: ScopeSpec = Field(default_factory=ScopeSpec)
    min_running: float = Field(default=0.0, alias="minRunning")
    summary: str = ""

    @field_validator("metric", mode="before")
    @classmethod
    def _metric(cls, value: object) -> AlertMetric:
        if not isinstance(value, str):
            raise ValueError(
                f"expected a metric name (known: {known_metrics()}), got {describe(value)}"
            )
        return parse_metric(value)

    @field_validator("comparison", mode="before")
    @classmethod
    def _comparison(cls, value: object) -> Comparison:
        if not isinstance(value, str):
            raise ValueError(f"expected a comparison such as > or <, got {describe(value)}")
        return parse_comparison(value)

    @field_validator("summary")
    @classmethod
    def _summary(cls, value: str) -> str:
        check_summary(value)
        return value

    @field_validator("window", "for_", "min_running", mode="before")
    @classmethod
    def _durations(cls, value: object) -> float:
        return _duration(value)

    def rule(self, name: str) -> AlertRule:
        return AlertRule(
            name=name,
            metric=self.metric,
            comparison=self.comparison,
            threshold=self.threshold,
            aggregation=self.aggregation,
            window_s=self.window,
            for_s=self.for_,
            severity=self.severity,
            scope=AlertScope(
                self.scope.namespace,
                self.scope.queue,
                label_set(self.scope.labels),
                self.scope.allocated,
            ),
            quantile=self.quantile,
            min_running_s=self.min_running,
            summary=self.summary,
        )


def alert_rule_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> AlertRule:
    """One GPUAlertRule object (see the module docstring)."""
    context, name, _ = named_object(obj, source, location, KIND, API_VERSIONS, namespaced=False)
    check_object_fields(context, obj, SPEC_FIELDS)
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    try:
        parsed = AlertRuleSpec.model_validate(spec)
    except ValidationError as error:
        raise _spec_error(error, spec, source, context.location) from None
    try:
        return parsed.rule(name)
    except ValueError as error:
        raise context.error("spec", str(error)) from None


def _spec_error(
    error: ValidationError, spec: Mapping[str, Any], source: str, location: str | None
) -> InputError:
    """The first problem, its field written from the top of the object (``spec.window``)."""
    found = validation_error(error, spec, source, location, AlertRuleSpec)
    field = "spec" if found.field is None else f"spec.{found.field}"
    return InputError(found.source, found.reason, found.location, field)


def read_alert_rules(path: str | Path) -> list[AlertRule]:
    """Every GPUAlertRule of a file or of a directory's ``*.yaml`` files, in order; another
    kind, or two rules of one name, is an error."""
    rules: list[AlertRule] = []
    seen: dict[str, str] = {}
    for manifest, source in manifests_of_kind(path, KIND, API_VERSIONS[0]):
        rule = alert_rule_from_object(manifest, source, manifest.location)
        where = f"{source}:{manifest.location}"
        if rule.name in seen:
            raise InputError(
                source,
                f"a second {KIND} named {quoted(rule.name)}; the first is at {seen[rule.name]}",
                manifest.location,
                "metadata.name",
            )
        seen[rule.name] = where
        rules.append(rule)
    return rules


def builtin_rules_path() -> Path:
    return Path(str(resources.files("gpufleet") / "data" / BUILTIN_RULES_FILE))


def builtin_alert_rules() -> list[AlertRule]:
    """The rules gpufleet ships (the seeds' recommendations): GPU memory above 90%, average
    utilisation below 20% over 1 h on GPUs a pod holds (paid for and idle; not on GPUs nobody
    holds), temperature above 85 C, any XID, and a workload below 40% utilisation for an hour
    after running an hour."""
    return read_alert_rules(builtin_rules_path())
