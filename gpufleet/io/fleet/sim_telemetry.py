"""A scenario's ``SimulatedTelemetry`` object: how the simulated GPUs' telemetry is made.

Owns the reading of::

    apiVersion: gpufleet.dev/v1alpha1
    kind: SimulatedTelemetry
    metadata: {name: default}
    spec:
      defaultProfile: notebook   # the usage profile of pods that name none (absent: by shape)
      seed: 7                    # the seed of the usage profiles (absent: the serve's --seed)

into :class:`TelemetrySettings`, an unknown field being an error, a profile that is none naming
the field and listing the profiles. A scenario holds at most one (:func:`merge_settings`).
It makes no telemetry (the embedded cluster does,
:mod:`gpufleet.backends.sim.telemetry`); ``simulate`` reads it and has no telemetry to apply
it to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.fields import check_fields, check_object_fields
from gpufleet.io.manifests import named_object
from gpufleet.telemetry.profiles import UsageProfile

SIMULATED_TELEMETRY = "SimulatedTelemetry"
TELEMETRY_API_VERSIONS = ("gpufleet.dev/v1alpha1",)
TELEMETRY_SPEC_FIELDS = ("defaultProfile", "seed")
_HINTS = {
    "default_profile": "it is defaultProfile",
    "profile": "it is defaultProfile",
    "usageProfile": "it is defaultProfile",
}


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """The usage profile of pods that name none (None: each pod's shape decides) and the
    profiles' seed (None: the server's). ``name`` says where it came from, for messages."""

    default_profile: UsageProfile | None = None
    seed: int | None = None
    name: str = ""


def profile_choices() -> str:
    """``training, inference, notebook, debug, idle``."""
    return ", ".join(profile.value for profile in UsageProfile)


def parse_usage_profile(value: str) -> UsageProfile:
    """``value`` as a profile (ValueError listing the profiles if it is none)."""
    try:
        return UsageProfile(value.strip().lower())
    except ValueError:
        raise ValueError(f"expected one of {profile_choices()}, got {quoted(value)}") from None


def telemetry_settings_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> TelemetrySettings:
    """One ``SimulatedTelemetry`` object (see the module docstring)."""
    context, name, _ = named_object(
        obj, source, location, SIMULATED_TELEMETRY, TELEMETRY_API_VERSIONS, namespaced=False
    )
    check_object_fields(context, obj, TELEMETRY_SPEC_FIELDS)
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    check_fields(context, spec, "spec", TELEMETRY_SPEC_FIELDS, _HINTS)
    profile = None
    if spec.get("defaultProfile") is not None:
        text = context.text(spec["defaultProfile"], "spec.defaultProfile")
        profile = context.parse(parse_usage_profile, text, "spec.defaultProfile")
    seed = None
    if spec.get("seed") is not None:
        seed = context.integer(spec["seed"], "spec.seed", 0)
    where = f"{source}" + (f":{location}" if location else "") + f", {SIMULATED_TELEMETRY} {name}"
    return TelemetrySettings(profile, seed, where)


def merge_settings(
    first: TelemetrySettings | None, settings: TelemetrySettings
) -> TelemetrySettings:
    """``settings``, the scenario's one ``SimulatedTelemetry`` (InputError if ``first`` was
    read already)."""
    if first is not None:
        raise InputError(
            settings.name,
            f"a scenario has one {SIMULATED_TELEMETRY}; the first is {first.name}",
        )
    return settings
