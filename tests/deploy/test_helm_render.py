"""The subset renderer of tests/deploy/helm_render.py behaves as Helm does on its subset, and
refuses what is outside it (so that the chart cannot drift out of what the tests check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helm_render import (
    Chart,
    TemplateError,
    manifest_objects,
    merge_values,
    render,
    truthy,
)

VALUES: dict[str, Any] = {
    "name": "x",
    "port": 9090,
    "empty": "",
    "flag": True,
    "off": False,
    "map": {"b": 1, "a": [1, 2]},
    "none": {},
}


def _render(template: str, values: dict[str, Any] | None = None) -> str:
    chart = Chart(
        Path("/nonexistent"),
        {"name": "c", "version": "1.2.3", "appVersion": "4.5"},
        values if values is not None else VALUES,
        {
            "templates/_helpers.tpl": '{{- define "h" -}}n={{ .Values.name }}{{- end }}',
            "templates/t.yaml": template,
        },
    )
    return render(chart, "rel", "ns")["templates/t.yaml"]


RENDER_CASES = [
    ("value", "a: {{ .Values.name }}", "a: x"),
    (
        "release-and-chart",
        "{{ .Release.Name }}/{{ .Release.Namespace }}/{{ .Release.Service }}",
        "rel/ns/Helm",
    ),
    ("chart", "{{ .Chart.Name }}-{{ .Chart.Version }}-{{ .Chart.AppVersion }}", "c-1.2.3-4.5"),
    ("trim-left", "a:   \n  {{- .Values.name }}", "a:x"),
    ("trim-right", "{{ .Values.name -}}  \n  b", "xb"),
    ("comment", "a{{/* anything {{ here }} */}}b", "ab"),
    ("trimmed-comment", "a\n{{- /* c */ -}}\nb", "ab"),
    ("if-true", "{{ if .Values.flag }}y{{ end }}", "y"),
    ("if-false", "{{ if .Values.off }}y{{ else }}n{{ end }}", "n"),
    ("if-empty-string", "{{ if .Values.empty }}y{{ else }}n{{ end }}", "n"),
    ("if-empty-map", "{{ if .Values.none }}y{{ else }}n{{ end }}", "n"),
    ("else-if", "{{ if .Values.off }}1{{ else if .Values.flag }}2{{ else }}3{{ end }}", "2"),
    ("nested-if", "{{ if .Values.flag }}{{ if .Values.off }}a{{ else }}b{{ end }}{{ end }}", "b"),
    ("include", '{{ include "h" . }}', "n=x"),
    ("quote-number", "{{ .Values.port | quote }}", '"9090"'),
    ("quote-string", '{{ "a\\"b" | quote }}', '"a\\"b"'),
    ("default-used", '{{ .Values.empty | default "d" }}', "d"),
    ("default-unused", '{{ .Values.name | default "d" }}', "x"),
    ("default-from-field", "{{ .Values.empty | default .Chart.AppVersion }}", "4.5"),
    (
        "to-yaml-nindent",
        "m:{{- toYaml .Values.map | nindent 2 }}",
        "m:\n  a:\n  - 1\n  - 2\n  b: 1",
    ),
    ("indent", '{{ include "h" . | indent 3 }}', "   n=x"),
    ("bool", "{{ .Values.flag }}", "true"),
]


@pytest.mark.parametrize(
    ("template", "expected"), [(t, e) for _, t, e in RENDER_CASES], ids=[c[0] for c in RENDER_CASES]
)
def test_renders(template: str, expected: str) -> None:
    assert _render(template) == expected


REFUSED = [
    ("range", "{{ range .Values.map }}x{{ end }}", "outside the supported subset"),
    ("with", "{{ with .Values.map }}x{{ end }}", "outside the supported subset"),
    ("unknown-function", "{{ upper .Values.name }}", "not a supported function"),
    ("parentheses", "{{ (.Values.name) }}", "unsupported syntax"),
    ("variable", "{{ $x := 1 }}", "outside the supported subset"),
    ("missing-key", "{{ .Values.nope }}", "no key 'nope'"),
    ("missing-define", '{{ include "nope" . }}', "no template"),
    ("print-a-map", "{{ .Values.map }}", "use toYaml"),
    ("unterminated-if", "{{ if .Values.flag }}x", "missing"),
    ("stray-end", "x{{ end }}", "unexpected"),
    ("missing-file", '{{ .Files.Get "nope.yaml" }}', "no file"),
]


@pytest.mark.parametrize(
    ("template", "message"), [(t, m) for _, t, m in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_refuses(template: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        _render(template)


TRUTH = [
    (None, False),
    (False, False),
    (0, False),
    ("", False),
    ({}, False),
    ([], False),
    (True, True),
    (1, True),
    ("0", True),
    ({"a": 1}, True),
    ([0], True),
]


@pytest.mark.parametrize(("value", "expected"), TRUTH, ids=[repr(v) for v, _ in TRUTH])
def test_go_truth(value: object, expected: bool) -> None:
    assert truthy(value) is expected


def test_manifests_split_as_helm_splits_them() -> None:
    text = "# c\n---\na: 1\n---\n\n---\nb: 2\n"
    assert manifest_objects({"templates/t.yaml": text, "templates/NOTES.txt": "x: 1"}) == [
        {"a": 1},
        {"b": 2},
    ]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"a": {"c": 3}}, {"a": {"b": 1, "c": 3}, "d": 2}),
        ({"a": {"b": None}}, {"a": {}, "d": 2}),
        ({"d": None}, {"a": {"b": 1}}),
        ({"a": 5}, {"a": 5, "d": 2}),
    ],
    ids=["maps-merge", "null-drops-a-nested-key", "null-drops-a-key", "scalar-replaces"],
)
def test_values_merge_as_helm_merges_them(
    overrides: dict[str, object], expected: dict[str, object]
) -> None:
    assert merge_values({"a": {"b": 1}, "d": 2}, overrides) == expected
