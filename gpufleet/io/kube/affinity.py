"""A pod spec's affinity and topology spread constraints as model values.

Owns the reading (with the API server's validation rules, errors naming the field path) of
``spec.affinity``: required node affinity terms (:func:`required_node_affinity`) and, into one
:class:`~gpufleet.model.affinity.PlacementRules` (:func:`placement_rules`), preferred node
affinity, pod affinity and anti-affinity (required and preferred: ``labelSelector``,
``namespaces``, ``namespaceSelector``, ``topologyKey``, ``matchLabelKeys``,
``mismatchLabelKeys``) and ``spec.topologySpreadConstraints`` (``maxSkew``, ``topologyKey``,
``whenUnsatisfiable``, ``labelSelector``, ``minDomains``, ``nodeAffinityPolicy``,
``nodeTaintsPolicy``, ``matchLabelKeys``).

What depends on the pod is resolved here: a term without namespaces means the pod's own
namespace; ``matchLabelKeys`` / ``mismatchLabelKeys`` become ``In`` / ``NotIn`` requirements on
the pod's own label values (keys the pod lacks are ignored, as Kubernetes does). A
``namespaceSelector`` may select every namespace (``{}``) or namespaces by name (the
``kubernetes.io/metadata.name`` label every namespace carries): gpufleet does not read
Namespace objects, so a selector on other namespace labels is refused, naming the field.
It does not decide anything about placement (``scheduling/interpod``, ``scheduling/spread``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.fields import LABEL_SELECTOR_FIELDS, check_fields
from gpufleet.io.manifests import Context, describe, scalar_text
from gpufleet.io.names import NameRule
from gpufleet.model import NodeSelectorRequirement, NodeSelectorTerm
from gpufleet.model.affinity import (
    PlacementRules,
    PodAffinityTerm,
    PreferredNodeTerm,
    SpreadConstraint,
    WeightedPodAffinityTerm,
)
from gpufleet.model.selectors import LABEL_OPERATORS, LabelRequirement, LabelSelector, PodSelector

NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")


# ------------------------------------------------------------------------------ node affinity
def required_node_affinity(
    context: Context, affinity: Mapping[str, Any], path: str
) -> tuple[NodeSelectorTerm, ...]:
    """``nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` (``path``: the
    ``affinity`` mapping's path)."""
    node_affinity = context.mapping(affinity.get("nodeAffinity"), f"{path}.nodeAffinity")
    path = f"{path}.nodeAffinity.{REQUIRED}"
    required = context.mapping(node_affinity.get(REQUIRED), path)
    if not required:
        return ()
    items = context.sequence(required.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    if not items:
        raise context.error(
            f"{path}.nodeSelectorTerms", "required: expected at least one term, got none"
        )
    return tuple(
        node_selector_term(context, item, f"{path}.nodeSelectorTerms[{t}]")
        for t, item in enumerate(items)
    )


def node_selector_term(context: Context, item: object, path: str) -> NodeSelectorTerm:
    term = context.mapping(item, path)
    if term.get("matchFields"):
        raise context.error(
            f"{path}.matchFields",
            "not supported: matchFields (use matchExpressions on node labels, e.g. "
            "kubernetes.io/hostname)",
        )
    expressions = context.sequence(term.get("matchExpressions"), f"{path}.matchExpressions")
    return NodeSelectorTerm(
        tuple(
            _node_requirement(context, e, f"{path}.matchExpressions[{i}]")
            for i, e in enumerate(expressions)
        )
    )


def _node_requirement(context: Context, item: object, path: str) -> NodeSelectorRequirement:
    key, operator, values = _expression(context, item, path, NODE_OPERATORS)
    if operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
        raise context.error(
            f"{path}.values", f"operator {operator} needs exactly one whole number, got {values}"
        )
    return NodeSelectorRequirement(key, operator, values)


def _expression(
    context: Context, item: object, path: str, operators: tuple[str, ...]
) -> tuple[str, str, tuple[str, ...]]:
    """key, operator and values of a node or label selector requirement, checked."""
    expression = context.mapping(item, path)
    key = context.label_key(context.text(expression.get("key"), f"{path}.key"), f"{path}.key")
    operator = context.text(expression.get("operator"), f"{path}.operator")
    if operator not in operators:
        raise context.error(
            f"{path}.operator", f"expected one of {', '.join(operators)}, got {quoted(operator)}"
        )
    values: list[str] = []
    for i, value in enumerate(context.sequence(expression.get("values"), f"{path}.values")):
        text = scalar_text(value)
        if text is None:
            raise context.error(f"{path}.values[{i}]", f"expected text, got {describe(value)}")
        values.append(text)
    if operator in ("In", "NotIn") and not values:
        raise context.error(
            f"{path}.values", f"operator {operator} needs at least one value, got none"
        )
    if operator in ("Exists", "DoesNotExist") and values:
        raise context.error(
            f"{path}.values", f"operator {operator} takes no values, got {len(values)}"
        )
    return key, operator, tuple(values)


def _weight(context: Context, value: object, path: str) -> int:
    weight = context.integer(value, path)
    if not 1 <= weight <= 100:
        raise context.error(path, f"expected a weight from 1 to 100, got {weight}")
    return weight


# ------------------------------------------------------------------------------ rules
def placement_rules(
    context: Context,
    spec: Mapping[str, Any],
    spec_path: str,
    namespace: str,
    labels: Mapping[str, str],
) -> PlacementRules | None:
    """The pod's inter-pod rules and preferred node affinity (None when it has none)."""
    path = f"{spec_path}.affinity"
    affinity = context.mapping(spec.get("affinity"), path)
    node_affinity = context.mapping(affinity.get("nodeAffinity"), f"{path}.nodeAffinity")
    preferred_path = f"{path}.nodeAffinity.{PREFERRED}"
    preferred_nodes: list[PreferredNodeTerm] = []
    for i, item in enumerate(context.sequence(node_affinity.get(PREFERRED), preferred_path)):
        where = f"{preferred_path}[{i}]"
        entry = context.mapping(item, where)
        weight = _weight(context, entry.get("weight"), f"{where}.weight")
        if entry.get("preference") is None:
            raise context.error(f"{where}.preference", "required, but missing")
        term = node_selector_term(context, entry["preference"], f"{where}.preference")
        preferred_nodes.append(PreferredNodeTerm(weight, term))
    pod = _PodTerms(context, namespace, labels)
    required_affinity, preferred_affinity = pod.terms(affinity, "podAffinity", path)
    required_anti, preferred_anti = pod.terms(affinity, "podAntiAffinity", path)
    rules = PlacementRules(
        required_affinity,
        required_anti,
        preferred_affinity,
        preferred_anti,
        _spread_constraints(context, spec, spec_path, labels),
        tuple(preferred_nodes),
    )
    return None if rules.empty else rules


class _PodTerms:
    """Reads pod (anti-)affinity terms of one pod (whose namespace and labels resolve them)."""

    def __init__(self, context: Context, namespace: str, labels: Mapping[str, str]) -> None:
        self.context = context
        self.namespace = namespace
        self.labels = labels

    def terms(
        self, affinity: Mapping[str, Any], kind: str, path: str
    ) -> tuple[tuple[PodAffinityTerm, ...], tuple[WeightedPodAffinityTerm, ...]]:
        context = self.context
        path = f"{path}.{kind}"
        section = context.mapping(affinity.get(kind), path)
        required = tuple(
            self.term(item, f"{path}.{REQUIRED}[{i}]")
            for i, item in enumerate(context.sequence(section.get(REQUIRED), f"{path}.{REQUIRED}"))
        )
        preferred: list[WeightedPodAffinityTerm] = []
        for i, item in enumerate(context.sequence(section.get(PREFERRED), f"{path}.{PREFERRED}")):
            where = f"{path}.{PREFERRED}[{i}]"
            entry = context.mapping(item, where)
            weight = _weight(context, entry.get("weight"), f"{where}.weight")
            if entry.get("podAffinityTerm") is None:
                raise context.error(f"{where}.podAffinityTerm", "required, but missing")
            term = self.term(entry["podAffinityTerm"], f"{where}.podAffinityTerm")
            preferred.append(WeightedPodAffinityTerm(weight, term))
        return required, tuple(preferred)

    def term(self, item: object, path: str) -> PodAffinityTerm:
        context = self.context
        term = context.mapping(item, path)
        key = context.text(term.get("topologyKey"), f"{path}.topologyKey")
        if not key:
            raise context.error(f"{path}.topologyKey", "required: expected a node label key")
        context.label_key(key, f"{path}.topologyKey")
        selector = label_selector(context, term.get("labelSelector"), f"{path}.labelSelector")
        match_keys = _keys(context, term.get("matchLabelKeys"), f"{path}.matchLabelKeys")
        mismatch_keys = _keys(context, term.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys")
        both = set(match_keys) & set(mismatch_keys)
        if both:
            raise context.error(
                f"{path}.mismatchLabelKeys",
                f"{quoted(sorted(both)[0])} is also in matchLabelKeys: a key may be in only one",
            )
        for keys, field, operator in (
            (match_keys, "matchLabelKeys", "In"),
            (mismatch_keys, "mismatchLabelKeys", "NotIn"),
        ):
            if keys:
                selector = _with_pod_values(
                    context, selector, keys, self.labels, operator, f"{path}.{field}"
                )
        return PodAffinityTerm(PodSelector(selector, self.namespaces(term, path)), key)

    def namespaces(self, term: Mapping[str, Any], path: str) -> frozenset[str] | None:
        context = self.context
        names = {
            context.name(item, f"{path}.namespaces[{i}]", NameRule.LABEL)
            for i, item in enumerate(context.sequence(term.get("namespaces"), f"{path}.namespaces"))
        }
        if term.get("namespaceSelector") is None:
            return frozenset(names or {self.namespace})
        selected = namespace_names(context, term["namespaceSelector"], f"{path}.namespaceSelector")
        return None if selected is None else frozenset(names | selected)


def namespace_names(context: Context, value: object, path: str) -> set[str] | None:
    """The namespaces a ``namespaceSelector`` picks by name (None: all of them)."""
    selector = label_selector(context, value, path)
    assert selector is not None
    names: set[str] | None = None
    for requirement in selector.requirements:
        if requirement.key != NAMESPACE_NAME_LABEL or requirement.operator not in (
            "In",
            "Exists",
        ):
            raise context.error(
                path,
                f"not supported: {requirement.key} {requirement.operator} (gpufleet does not "
                "read Namespace objects; select namespaces by name with matchLabels or an In "
                f"expression on {NAMESPACE_NAME_LABEL}, use {{}} for all, or list them in "
                "namespaces)",
            )
        if requirement.operator == "In":
            values = set(requirement.values)
            names = values if names is None else names & values
    return names


def label_selector(context: Context, value: object, path: str) -> LabelSelector | None:
    """A ``metav1.LabelSelector`` (None when absent: it then selects nothing)."""
    if value is None:
        return None
    selector = context.mapping(value, path)
    check_fields(context, selector, path, LABEL_SELECTOR_FIELDS)
    requirements = [
        LabelRequirement(key, "In", (text,))
        for key, text in sorted(
            context.labels(selector.get("matchLabels"), f"{path}.matchLabels").items()
        )
    ]
    for i, item in enumerate(
        context.sequence(selector.get("matchExpressions"), f"{path}.matchExpressions")
    ):
        where = f"{path}.matchExpressions[{i}]"
        key, operator, values = _expression(context, item, where, LABEL_OPERATORS)
        for j, text in enumerate(values):
            context.label_value(text, f"{where}.values[{j}]")
        requirements.append(LabelRequirement(key, operator, tuple(sorted(values))))
    return LabelSelector(tuple(requirements))


def _keys(context: Context, value: object, path: str) -> list[str]:
    return [
        context.label_key(context.text(item, f"{path}[{i}]"), f"{path}[{i}]")
        for i, item in enumerate(context.sequence(value, path))
    ]


def _with_pod_values(
    context: Context,
    selector: LabelSelector | None,
    keys: list[str],
    labels: Mapping[str, str],
    operator: str,
    path: str,
) -> LabelSelector:
    """``selector`` and, for each of ``keys`` the pod has, ``key <operator> (its value)``."""
    if selector is None:
        raise context.error(path, "needs a labelSelector beside it, got none")
    named = {r.key for r in selector.requirements}
    for key in keys:
        if key in named:
            raise context.error(
                path, f"{quoted(key)} is also in labelSelector: use one or the other"
            )
    extra = tuple(LabelRequirement(k, operator, (labels[k],)) for k in keys if k in labels)
    return LabelSelector(selector.requirements + extra)


# ------------------------------------------------------------------------------ spread
def _spread_constraints(
    context: Context, spec: Mapping[str, Any], spec_path: str, labels: Mapping[str, str]
) -> tuple[SpreadConstraint, ...]:
    path = f"{spec_path}.topologySpreadConstraints"
    constraints: list[SpreadConstraint] = []
    seen: dict[tuple[str, bool], int] = {}
    for i, item in enumerate(context.sequence(spec.get("topologySpreadConstraints"), path)):
        where = f"{path}[{i}]"
        entry = context.mapping(item, where)
        if entry.get("maxSkew") is None:
            raise context.error(f"{where}.maxSkew", "required, but missing")
        max_skew = context.integer(entry["maxSkew"], f"{where}.maxSkew", 1)
        key = context.text(entry.get("topologyKey"), f"{where}.topologyKey")
        if not key:
            raise context.error(f"{where}.topologyKey", "required: expected a node label key")
        context.label_key(key, f"{where}.topologyKey")
        when = context.text(entry.get("whenUnsatisfiable"), f"{where}.whenUnsatisfiable")
        if when not in WHEN_UNSATISFIABLE:
            raise context.error(
                f"{where}.whenUnsatisfiable",
                f"expected {' or '.join(WHEN_UNSATISFIABLE)}, got {quoted(when)}",
            )
        anyway = when == "ScheduleAnyway"
        if (key, anyway) in seen:
            raise context.error(
                where,
                f"duplicate of topologySpreadConstraints[{seen[(key, anyway)]}]: "
                f"topologyKey {quoted(key)} with whenUnsatisfiable {when} is given twice",
            )
        seen[(key, anyway)] = i
        min_domains = 1
        if entry.get("minDomains") is not None:
            min_domains = context.integer(entry["minDomains"], f"{where}.minDomains", 1)
            if anyway:
                raise context.error(
                    f"{where}.minDomains",
                    "only allowed with whenUnsatisfiable: DoNotSchedule",
                )
        policies = [
            context.text(entry.get(field), f"{where}.{field}", default)
            for field, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore"))
        ]
        for field, policy in zip(("nodeAffinityPolicy", "nodeTaintsPolicy"), policies, strict=True):
            if policy not in INCLUSION_POLICIES:
                raise context.error(
                    f"{where}.{field}", f"expected Honor or Ignore, got {quoted(policy)}"
                )
        selector = label_selector(context, entry.get("labelSelector"), f"{where}.labelSelector")
        match_keys = _keys(context, entry.get("matchLabelKeys"), f"{where}.matchLabelKeys")
        if match_keys:
            selector = _with_pod_values(
                context, selector, match_keys, labels, "In", f"{where}.matchLabelKeys"
            )
        constraints.append(
            SpreadConstraint(
                max_skew,
                key,
                anyway,
                selector,
                min_domains,
                honor_node_affinity=policies[0] == "Honor",
                honor_taints=policies[1] == "Honor",
            )
        )
    return tuple(constraints)
