"""The annotations of an alert (``summary``, ``description``): one definition, two renderings.

Owns what each annotation of a rule's alerts says, as parts (literal text, one of the alert's
labels, the value compared, a part shown only when a label is set), and the two renderings of
those parts that must agree: :func:`go_template`, the Go template Prometheus expands (the
exported rules' ``annotations``, :mod:`gpufleet.io.fleet.prometheus_rules`), and :func:`render`, the
text gpufleet writes itself for the same alert (its webhooks and its pushes to Alertmanager,
:func:`gpufleet.telemetry.alert_dispatch.rule_annotations`). A label an alert lacks renders
empty in both (Prometheus' ``missingkey=zero``); the value renders as Go prints a float64.

A rule's own ``summary`` may reference ``{{ $labels.NAME }}`` and ``{{ $value }}`` (Prometheus'
syntax, :data:`SUMMARY_REFERENCE`); any other ``{{`` is text, escaped in the template so that
Prometheus prints it as gpufleet does (the rule reader refuses it: :func:`check_summary`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.model.alerts import Aggregation, AlertRule, promql_duration, promql_number

#: A reference a rule's summary may make: an alert's label (group 1: its name) or its value.
SUMMARY_REFERENCE = re.compile(
    r"\{\{[ \t]*(?:\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)|\$value)[ \t]*\}\}"
)
#: What Go's template lexer starts an action with.
_OPEN = "{{"


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class LabelRef:
    """The alert's label ``name`` (empty when it has none)."""

    name: str


@dataclass(frozen=True, slots=True)
class ValueRef:
    """The value compared: to one decimal (``printf "%.1f"``), or as Go prints a float64."""

    one_decimal: bool = False


@dataclass(frozen=True, slots=True)
class IfLabel:
    """``then`` when the alert's label ``name`` is set and not empty."""

    name: str
    then: tuple[Part, ...]


Part = Text | LabelRef | ValueRef | IfLabel


def check_summary(text: str) -> None:
    """ValueError unless every ``{{`` of ``text`` starts a :data:`SUMMARY_REFERENCE` (what
    both gpufleet and Prometheus expand alike)."""
    at = text.find(_OPEN)
    while at >= 0:
        found = SUMMARY_REFERENCE.match(text, at)
        if found is None:
            raise ValueError(
                f"summary may use {{{{ $labels.NAME }}}} and {{{{ $value }}}} only "
                f"(expanded by gpufleet and by Prometheus alike), not {text[at : at + 40]!r}"
            )
        at = text.find(_OPEN, found.end())


def summary_parts(text: str) -> tuple[Part, ...]:
    """A rule's own summary as parts: its references expanded, the rest (any other ``{{``
    included) text."""
    parts: list[Part] = []
    done = 0
    for found in SUMMARY_REFERENCE.finditer(text):
        if found.start() > done:
            parts.append(Text(text[done : found.start()]))
        parts.append(LabelRef(found[1]) if found[1] else ValueRef())
        done = found.end()
    if done < len(text):
        parts.append(Text(text[done:]))
    return tuple(parts)


def rule_summary(rule: AlertRule) -> tuple[Part, ...]:
    """Where the alert is (the GPU, its model, node and holder; or the pod), then what the
    rule says (its ``summary``, or its condition)."""
    if rule.metric.per_workload:
        where: tuple[Part, ...] = (
            Text("pod "),
            LabelRef("namespace"),
            Text("/"),
            LabelRef("pod"),
        )
    else:
        where = (
            Text("GPU "),
            LabelRef("gpu"),
            Text(" ("),
            LabelRef("modelName"),
            Text(") on "),
            LabelRef("Hostname"),
            IfLabel(
                "pod", (Text(", held by pod "), LabelRef("namespace"), Text("/"), LabelRef("pod"))
            ),
        )
    if rule.summary:
        what = summary_parts(rule.summary)
    else:
        condition = f"{rule.metric.value} {rule.comparison.value} {promql_number(rule.threshold)}"
        what = (Text(condition),)
    return (*where, Text(": "), *what)


def rule_description(rule: AlertRule) -> tuple[Part, ...]:
    """``gpufleet rule NAME: <aggregated metric> is <value> (<comparison> <threshold>)``, with
    the metric's unit."""
    unit = rule.metric.unit
    space = "" if unit in ("", "%") else " "
    return (
        Text(f"gpufleet rule {rule.name}: {aggregated_name(rule)} is "),
        ValueRef(one_decimal=True),
        Text(
            f"{space}{unit} ({rule.comparison.value} {promql_number(rule.threshold)}{space}{unit})"
        ),
    )


def aggregated_name(rule: AlertRule) -> str:
    """``avg of DCGM_FI_DEV_GPU_UTIL over 1h``, for people (the metric alone with ``last``
    and no window)."""
    if rule.aggregation is Aggregation.LAST and rule.window_s == 0:
        return rule.metric.value
    fn = rule.aggregation.value
    if rule.aggregation is Aggregation.QUANTILE:
        fn = f"quantile {promql_number(rule.quantile or 0.0)}"
    return f"{fn} of {rule.metric.value} over {promql_duration(rule.window_s)}"


def annotation_templates(rule: AlertRule) -> dict[str, str]:
    """The exported rule's ``annotations``: Go templates for Prometheus."""
    return {
        "summary": go_template(rule_summary(rule)),
        "description": go_template(rule_description(rule)),
    }


def render_annotations(rule: AlertRule, labels: Mapping[str, str], value: float) -> dict[str, str]:
    """The annotations of ``rule``'s alert with ``labels`` and ``value``, as Prometheus
    expands :func:`annotation_templates`."""
    return {
        "summary": render(rule_summary(rule), labels, value),
        "description": render(rule_description(rule), labels, value),
    }


def go_template(parts: Sequence[Part]) -> str:
    """The parts as a Go template (``{{`` of text written as a string action)."""
    written = []
    for part in parts:
        match part:
            case Text(text):
                written.append(text.replace(_OPEN, '{{ "{{" }}'))
            case LabelRef(name):
                written.append(f"{{{{ $labels.{name} }}}}")
            case ValueRef(one_decimal):
                written.append('{{ $value | printf "%.1f" }}' if one_decimal else "{{ $value }}")
            case IfLabel(name, then):
                written.append(f"{{{{ if $labels.{name} }}}}{go_template(then)}{{{{ end }}}}")
    return "".join(written)


def render(parts: Sequence[Part], labels: Mapping[str, str], value: float) -> str:
    """The parts for an alert with ``labels`` and ``value``, as Prometheus renders
    :func:`go_template` of them."""
    written = []
    for part in parts:
        match part:
            case Text(text):
                written.append(text)
            case LabelRef(name):
                written.append(labels.get(name, ""))
            case ValueRef(one_decimal):
                written.append(go_fixed1(value) if one_decimal else go_float(value))
            case IfLabel(name, then):
                if labels.get(name):
                    written.append(render(then, labels, value))
    return "".join(written)


def _go_special(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return None


def go_fixed1(value: float) -> str:
    """``value`` as Go's ``printf "%.1f"`` writes it."""
    return _go_special(value) or f"{value:.1f}"


def go_float(value: float) -> str:
    """``value`` as Go prints a float64 (``%v``): the shortest digits that read back as it,
    in exponent form (``1.5e+06``, ``1e-05``) when its exponent is below -4 or 6 and above
    (``strconv.FormatFloat(v, 'g', -1, 64)``)."""
    special = _go_special(value)
    if special is not None:
        return special
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    # repr is the shortest round-tripping form, as Go's; Decimal splits it into digits.
    exact = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, exact.digits))
    assert isinstance(exact.exponent, int)
    point = len(digits) + exact.exponent  # the decimal point after this many digits
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"
