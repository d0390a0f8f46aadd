"""Kubernetes' naming rules (gpufleet/io/names.py): table-driven cases, and a property check that
what is accepted is exactly what apimachinery's regular expressions and length limits accept."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.io.names import (
    LABEL_VALUE_NAMES,
    NameRule,
    label_key_problem,
    label_value_problem,
    name_problem,
    rule_of,
)

# apimachinery's k8s.io/apimachinery/pkg/util/validation, restated here independently.
K8S_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
K8S_SUBDOMAIN = rf"{K8S_LABEL}(\.{K8S_LABEL})*"
K8S_QUALIFIED = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"


def k8s_subdomain(text: str) -> bool:
    return len(text) <= 253 and re.fullmatch(K8S_SUBDOMAIN, text) is not None


def k8s_label(text: str) -> bool:
    return len(text) <= 63 and re.fullmatch(K8S_LABEL, text) is not None


def k8s_label_value(text: str) -> bool:
    return text == "" or (len(text) <= 63 and re.fullmatch(K8S_QUALIFIED, text) is not None)


def k8s_label_key(text: str) -> bool:
    prefix, slash, name = text.rpartition("/")
    if slash and not k8s_subdomain(prefix):
        return False
    return len(name) <= 63 and re.fullmatch(K8S_QUALIFIED, name) is not None


NAMES = {  # text: (as a subdomain, as a label, the part of the message)
    "valid": ("train-1", None, None),
    "valid-with-dots": ("a.b-c.d", None, "'.' is not allowed"),
    "digits-only": ("0123", None, None),
    "subdomain-at-its-limit": ("a" * 253, None, "at most 63 characters (it has 253)"),
    "too-long": ("a" * 300, "at most 253 characters (it has 300)", "at most 63 characters"),
    "label-just-too-long": ("a" * 64, None, "DNS-1123 label of at most 63 characters (it has 64)"),
    "uppercase": ("Train-1", "'T' is not allowed", "'T' is not allowed"),
    "unicode": ("тренировка-1", "'т' is not allowed", "'т' is not allowed"),
    "emoji": ("train-🚀", "'🚀' is not allowed", "'🚀' is not allowed"),
    "leading-dash": ("-train", "starting and ending with a letter or digit", "starting and"),
    "trailing-dash": ("train-", "starting and ending with a letter or digit", "starting and"),
    "underscore": ("train_1", "'_' is not allowed", "'_' is not allowed"),
    "space": ("train 1", "' ' is not allowed", "' ' is not allowed"),
    "empty-part-between-dots": ("a..b", "a DNS-1123 subdomain (lowercase", "'.' is not allowed"),
    "empty": ("", "must not be empty", "must not be empty"),
}


@pytest.mark.parametrize(("text", "subdomain", "label"), NAMES.values(), ids=NAMES.keys())
def test_names(text: str, subdomain: str | None, label: str | None) -> None:
    for rule, expected in ((NameRule.SUBDOMAIN, subdomain), (NameRule.LABEL, label)):
        problem = name_problem(text, rule)
        if expected is None:
            assert problem is None
        else:
            assert problem is not None
            assert expected in problem, problem


@pytest.mark.parametrize("kind", sorted(LABEL_VALUE_NAMES))
def test_names_that_become_label_values_are_short(kind: str) -> None:
    rule = rule_of(kind)
    assert name_problem("a" * 63, rule, kind) is None
    problem = name_problem("a" * 64, rule, kind)
    assert problem is not None
    assert f"it is the value of the label {LABEL_VALUE_NAMES[kind]}" in problem
    assert name_problem("Job-1", rule, kind) is not None  # still a subdomain first


def test_rules_by_kind() -> None:
    assert rule_of("Namespace") is NameRule.LABEL
    assert rule_of("Job") is NameRule.LABEL_VALUE_SUBDOMAIN
    assert rule_of("Queue") is NameRule.LABEL_VALUE_SUBDOMAIN
    assert rule_of("Pod") is NameRule.SUBDOMAIN
    assert rule_of("Node") is NameRule.SUBDOMAIN


LABEL_KEYS = {
    "plain": ("app", None),
    "prefixed": ("nvidia.com/gpu.product", None),
    "mixed-case-name": ("Team_Name.v1", None),
    "name-too-long": ("a" * 64, "at most 63 characters"),
    "prefix-uppercase": ("Example.com/x", "prefix 'Example.com' (before '/')"),
    "two-slashes": ("a/b/c", "'/' is not allowed"),
    "empty-prefix": ("/x", "may not be empty"),
    "empty-name": ("example.com/", "name part '' must not be empty"),
    "emoji": ("team-🚀", "'🚀' is not allowed"),
    "leading-dot": (".hidden", "starting and ending with a letter or digit"),
}


@pytest.mark.parametrize(("key", "expected"), LABEL_KEYS.values(), ids=LABEL_KEYS.keys())
def test_label_keys(key: str, expected: str | None) -> None:
    problem = label_key_problem(key)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None
        assert expected in problem, problem


LABEL_VALUES = {
    "empty": ("", None),
    "model": ("NVIDIA-A100-SXM4-80GB", None),
    "dots-and-underscores": ("v1.2_rc", None),
    "too-long": ("a" * 64, "a label value of at most 63 characters (it has 64)"),
    "space": ("two words", "' ' is not allowed"),
    "unicode": ("тренировка", "'т' is not allowed"),
    "trailing-dot": ("v1.", "starting and ending with a letter or digit"),
}


@pytest.mark.parametrize(("value", "expected"), LABEL_VALUES.values(), ids=LABEL_VALUES.keys())
def test_label_values(value: str, expected: str | None) -> None:
    problem = label_value_problem(value)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None
        assert expected in problem, problem


# Mostly characters the rules allow, some they do not, so that both outcomes are common.
_TEXT = st.text(alphabet="ab09-._/AZ_é🚀 ", max_size=70) | st.text(
    alphabet="abz019-.", min_size=50, max_size=300
)


@given(_TEXT)
def test_subdomains_and_labels_as_kubernetes_has_them(text: str) -> None:
    assert (name_problem(text, NameRule.SUBDOMAIN) is None) == k8s_subdomain(text)
    assert (name_problem(text, NameRule.LABEL) is None) == k8s_label(text)
    label_value_name = k8s_subdomain(text) and len(text) <= 63
    assert (name_problem(text, NameRule.LABEL_VALUE_SUBDOMAIN, "Job") is None) == label_value_name


@given(_TEXT)
def test_label_keys_and_values_as_kubernetes_has_them(text: str) -> None:
    assert (label_key_problem(text) is None) == k8s_label_key(text)
    assert (label_value_problem(text) is None) == k8s_label_value(text)
