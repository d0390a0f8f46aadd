"""A scenario's SimulatedTelemetry object: read with the rest of the scenario (one at most),
checked field by field, a bad profile naming the field and listing the profiles."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.sim_telemetry import (
    TelemetrySettings,
    parse_usage_profile,
    telemetry_settings_from_object,
)
from gpufleet.io.readers import read_scenario
from gpufleet.telemetry.profiles import UsageProfile
from tests.io.conftest import WriteFile

PROFILES = "training, inference, notebook, debug, idle"


def settings_object(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "SimulatedTelemetry",
        "metadata": {"name": "usage"},
        "spec": spec,
    }


def test_a_scenario_reads_its_telemetry_settings(write_file: WriteFile) -> None:
    path = write_file(
        "scenario.yaml",
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: SimulatedTelemetry
        metadata: {name: usage}
        spec: {defaultProfile: Notebook, seed: 7}
        """,
    )
    telemetry = read_scenario(path).telemetry
    assert telemetry is not None
    assert (telemetry.default_profile, telemetry.seed) == (UsageProfile.NOTEBOOK, 7)
    assert telemetry.name.endswith("SimulatedTelemetry usage")


def test_a_scenario_without_one_has_none(write_file: WriteFile) -> None:
    path = write_file(
        "s.yaml",
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec: {containers: [{name: c}]}
        """,
    )
    assert read_scenario(path).telemetry is None


def test_a_scenario_has_one_at_most(write_file: WriteFile) -> None:
    path = write_file(
        "scenario.yaml",
        """
        apiVersion: gpufleet.dev/v1alpha1
        kind: SimulatedTelemetry
        metadata: {name: a}
        spec: {defaultProfile: idle}
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: SimulatedTelemetry
        metadata: {name: b}
        spec: {seed: 1}
        """,
    )
    with pytest.raises(InputError, match="SimulatedTelemetry b: a scenario has one"):
        read_scenario(path)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"defaultProfile": "batch"}, f"spec.defaultProfile: expected one of {PROFILES}"),
        ({"defaultProfile": 3}, "spec.defaultProfile: expected one of"),
        ({"default_profile": "idle"}, "spec.default_profile: unknown field; it is defaultProfile"),
        ({"seed": -1}, "spec.seed: expected a whole number >= 0, got -1"),
        ({"seed": "x"}, "spec.seed: expected a whole number"),
    ],
    ids=["unknown-profile", "number-profile", "snake-case", "negative-seed", "text-seed"],
)
def test_bad_settings_name_the_object_and_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as raised:
        telemetry_settings_from_object(settings_object(**spec), "s.yaml", "document 1 (line 1)")
    text = str(raised.value)
    assert "s.yaml:document 1 (line 1), SimulatedTelemetry usage" in text
    assert message in text


def test_a_spec_field_at_the_top_is_refused_with_a_hint() -> None:
    obj = {**settings_object(), "defaultProfile": "idle"}
    with pytest.raises(InputError, match="defaultProfile belongs under spec"):
        telemetry_settings_from_object(obj, "s.yaml")


def test_an_empty_spec_says_nothing() -> None:
    assert telemetry_settings_from_object(settings_object(), "s.yaml") == TelemetrySettings(
        name="s.yaml, SimulatedTelemetry usage"
    )


@pytest.mark.parametrize("profile", list(UsageProfile), ids=str)
def test_every_profile_parses(profile: UsageProfile) -> None:
    assert parse_usage_profile(f" {profile.value.upper()} ") is profile
