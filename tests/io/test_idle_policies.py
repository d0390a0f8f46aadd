"""IdlePolicy objects: read field by field, defaults, bad input naming file, policy and field,
and IdlePolicy objects in a scenario."""

from __future__ import annotations

import textwrap

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.idle_policies import read_idle_policies
from gpufleet.io.readers import read_scenario
from gpufleet.model.idle import (
    EXEMPT_LABEL,
    IdleAction,
    IdlePolicy,
    IdleScope,
    IdleStep,
)
from tests.io.conftest import WriteFile


def policy_text(spec: str, name: str = "p") -> str:
    body = textwrap.indent(textwrap.dedent(spec).strip(), "  ")
    return (
        "apiVersion: gpufleet.dev/v1alpha1\nkind: IdlePolicy\n"
        f"metadata: {{name: {name}}}\nspec:\n{body}\n"
    )


def test_a_policy_reads_every_field(write_file: WriteFile) -> None:
    path = write_file(
        "idle.yaml",
        policy_text(
            """
            scope:
              namespaces: [ml-dev]
              queues: [research]
              selector: {matchLabels: {team: vision}}
              workloadKinds: [Pod, StatefulSet]
            threshold: 15
            window: 30m
            grace: 2h
            exemptLabel: {keep: "yes"}
            dryRun: true
            actions:
              - {action: Notify}
              - {action: checkpoint, after: 15m}
              - {action: ScaleToZero, after: 1h}
            """,
            name="notebooks",
        ),
    )
    assert read_idle_policies(path) == [
        IdlePolicy(
            name="notebooks",
            steps=(
                IdleStep(IdleAction.NOTIFY, 0.0),
                IdleStep(IdleAction.CHECKPOINT, 900.0),
                IdleStep(IdleAction.SCALE_TO_ZERO, 3600.0),
            ),
            scope=IdleScope(
                frozenset({"ml-dev"}),
                frozenset({"research"}),
                (("team", "vision"),),
                frozenset({"Pod", "StatefulSet"}),
            ),
            threshold_pct=15.0,
            window_s=1800.0,
            grace_s=7200.0,
            exempt_label=("keep", "yes"),
            dry_run=True,
        )
    ]


def test_defaults(write_file: WriteFile) -> None:
    path = write_file("idle.yaml", policy_text("actions: [{action: Stop}]"))
    (policy,) = read_idle_policies(path)
    assert (policy.threshold_pct, policy.window_s, policy.grace_s) == (10.0, 3600.0, 3600.0)
    assert policy.exempt_label == (EXEMPT_LABEL, "true")
    assert policy.scope == IdleScope()
    assert not policy.dry_run


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ("threshold: 10", "spec.actions", "required"),
        ("actions: []", "spec.actions", "at least 1"),
        ("actions: [{action: Delete}]", "spec.actions[0].action", "Notify, Checkpoint"),
        ("actions: [{action: Stop}, {action: Notify}]", "spec.actions", "nothing may follow"),
        (
            "actions: [{action: Checkpoint}, {action: Notify}]",
            "spec.actions",
            "before Checkpoint",
        ),
        ("actions: [{action: Notify}, {action: Notify}]", "spec.actions", "twice"),
        ("threshold: 0\nactions: [{action: Stop}]", "spec.threshold", "greater than 0"),
        ("threshold: 120\nactions: [{action: Stop}]", "spec.threshold", "100"),
        ("window: soon\nactions: [{action: Stop}]", "spec.window", "soon"),
        ("window: 0s\nactions: [{action: Stop}]", "spec.window", "more than 0"),
        ("treshold: 5\nactions: [{action: Stop}]", "spec.treshold", "treshold"),
        ("exemptLabel: {}\nactions: [{action: Stop}]", "spec.exemptLabel", "one label"),
        (
            "actions: [{action: Notify, after: -5m}]",
            "spec.actions[0].after",
            "",
        ),
    ],
    ids=[
        "no-actions", "empty-actions", "unknown-action", "after-final", "order", "twice",
        "zero-threshold", "threshold-above-100", "bad-window", "zero-window", "unknown-field",
        "two-exempt-labels", "negative-delay",
    ],
)  # fmt: skip
def test_bad_input_names_file_and_field(
    write_file: WriteFile, spec: str, field: str, words: str
) -> None:
    path = write_file("bad.yaml", policy_text(spec, name="broken"))
    with pytest.raises(InputError) as caught:
        read_idle_policies(path)
    error = caught.value
    assert error.source == str(path)
    assert error.field is not None
    assert error.field.startswith(field)
    assert words in str(error)
    assert "IdlePolicy broken" in str(error)


def test_two_policies_of_one_name_are_refused(write_file: WriteFile) -> None:
    text = (
        policy_text("actions: [{action: Stop}]")
        + "---\n"
        + policy_text("actions: [{action: Notify}]")
    )
    with pytest.raises(InputError, match="a second IdlePolicy named"):
        read_idle_policies(write_file("twice.yaml", text))


def test_another_kind_is_refused(write_file: WriteFile) -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    with pytest.raises(InputError, match="expected kind IdlePolicy"):
        read_idle_policies(write_file("other.yaml", text))


def test_a_scenario_carries_its_idle_policies(write_file: WriteFile) -> None:
    pod = textwrap.dedent(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: nb, namespace: dev}
        spec:
          containers:
            - name: main
              resources: {limits: {nvidia.com/gpu: 1}}
        """
    )
    path = write_file(
        "scenario.yaml", pod + "---\n" + policy_text("actions: [{action: Stop}]", name="idle")
    )
    scenario = read_scenario(path)
    assert [p.name for p in scenario.idle_policies] == ["idle"]
    assert len(scenario.workloads) == 1
