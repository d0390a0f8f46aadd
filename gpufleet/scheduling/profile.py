"""A scheduling profile: which plugin runs at each extension point, with which arguments and
weights. Data, not code: a YAML file or a flag gives it as a mapping, read by
:meth:`Profile.from_mapping`::

    name: budgets
    queueSort: fair-share
    admissionChecks:
      - name: gpu-hours
        args: {perNamespace: 1000}
    filters: []                  # added after the built-in filters, which always run
    scores:                      # added to the placement policy's own scorers
      - {name: gpu-packing, weight: 0.5}
    postFilter: classical-preemption
    permit: {name: gang-ready-timeout, args: {timeout: 300}}
    fairSharing: {usageHalfLife: 7d}   # off unless given (:mod:`.usage_history`)

Every key may be left out (the default profile, :data:`DEFAULT_PROFILE`: its only admission check
is ``budget``, which limits nothing for queues without ``spec.budget``; its only added scorer is
``capacity-type``, which changes nothing on a cluster without capacity-type labels; a profile
that lists ``admissionChecks`` or ``scores`` replaces the default's, so keep ``budget`` and
``capacity-type`` there to keep what they do).
``fairSharing`` turns on fair share over time: each queue's GPU usage, decayed with
``usageHalfLife`` (seconds, or a duration such as ``90m``, ``24h``, ``7d``, ``1d12h``), orders
the queues that compete for the same capacity (:class:`FairSharing`).
A plugin is a name, or a mapping with ``name`` and optional ``args`` (and ``weight`` for a
scorer). Names are looked up in a :class:`~gpufleet.scheduling.registry.Registry` when a core
is built; an unknown one is an error that lists the known ones.

What it does not do: read files (the caller parses YAML), or know which plugins exist.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

#: A plugin's arguments, as the profile gives them (the plugin's factory checks them).
Args = Mapping[str, object]


class ProfileError(ValueError):
    """A profile that cannot be read: names where, and what was expected."""


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """One plugin of a profile: its registered name, its arguments, and (for a scorer) the
    weight of its normalised scores."""

    name: str
    args: Args = field(default_factory=dict)
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class FairSharing:
    """Fair share over time (Slurm's ``PriorityDecayHalfLife``): queues' GPU usage decays by
    half every ``usage_half_life`` seconds, and the queue that used least of its share goes
    first among those that compete for the same capacity."""

    usage_half_life: float

    def __post_init__(self) -> None:
        if not 0 < self.usage_half_life < math.inf:
            raise ProfileError(
                f"fairSharing.usageHalfLife: a positive duration, got {self.usage_half_life:g} s"
            )

    @classmethod
    def from_mapping(cls, given: object) -> FairSharing:
        if not isinstance(given, Mapping):
            raise ProfileError("fairSharing: a mapping, such as {usageHalfLife: 7d}")
        unknown = sorted(set(given) - set(_FAIR_SHARING_KEYS))
        if unknown:
            raise ProfileError(_unknown_key("fairSharing", str(unknown[0]), _FAIR_SHARING_KEYS))
        if "usageHalfLife" not in given:
            raise ProfileError("fairSharing.usageHalfLife: required (such as 7d or 24h)")
        return cls(duration_seconds(given["usageHalfLife"], "fairSharing.usageHalfLife"))


_FAIR_SHARING_KEYS = ("usageHalfLife",)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(w|d|h|m|s)")
_DURATION_UNITS = {"w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def duration_seconds(given: object, where: str) -> float:
    """Seconds, from a number of seconds or a duration such as ``90m``, ``24h``, ``7d`` or
    ``1d12h`` (weeks ``w`` to seconds ``s``, largest first)."""
    expected = f"{where}: a duration such as 90m, 24h, 7d or 1d12h, or a number of seconds"
    if isinstance(given, bool) or not isinstance(given, int | float | str):
        raise ProfileError(f"{expected}; got {type(given).__name__}")
    if not isinstance(given, str):
        return float(given)
    text = given.strip()
    parts = _DURATION.findall(text)
    units = [unit for _, unit in parts]
    ordered = units == sorted(units, key=list(_DURATION_UNITS).index) and len(set(units)) == len(
        units
    )
    if not parts or "".join(a + u for a, u in parts) != text or not ordered:
        raise ProfileError(f"{expected}; got {given!r}")
    return sum(float(amount) * _DURATION_UNITS[unit] for amount, unit in parts)


@dataclass(frozen=True, slots=True)
class Profile:
    """See the module docstring."""

    name: str = "default"
    queue_sort: PluginSpec = PluginSpec("fair-share")
    #: GPU-hour budgets of queues (a queue without ``spec.budget`` is not limited).
    admission_checks: tuple[PluginSpec, ...] = (PluginSpec("budget"),)
    filters: tuple[PluginSpec, ...] = ()
    #: Reserved capacity first, then spot for fault-tolerant work and on-demand for critical
    #: work (no effect on a cluster without capacity-type labels).
    scores: tuple[PluginSpec, ...] = (PluginSpec("capacity-type"),)
    post_filter: PluginSpec = PluginSpec("classical-preemption")
    permit: PluginSpec = PluginSpec("gang-ready-timeout")
    #: Fair share over time (None: off).
    fair_sharing: FairSharing | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> Profile:
        """Read a profile given as data (the keys of the module docstring)."""
        if not isinstance(data, Mapping):
            raise ProfileError(f"a profile is a mapping, not {type(data).__name__}")
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise ProfileError(_unknown_key("profile", str(unknown[0]), _KEYS))
        default = DEFAULT_PROFILE
        name = data.get("name", default.name)
        if not isinstance(name, str) or not name:
            raise ProfileError("profile name: a non-empty string")
        return cls(
            name,
            _one(data, "queueSort", default.queue_sort),
            _many(data, "admissionChecks", default=default.admission_checks),
            _many(data, "filters"),
            _many(data, "scores", weighted=True, default=default.scores),
            _one(data, "postFilter", default.post_filter),
            _one(data, "permit", default.permit),
            FairSharing.from_mapping(data["fairSharing"]) if "fairSharing" in data else None,
        )


DEFAULT_PROFILE = Profile()
_KEYS = (
    "name",
    "queueSort",
    "admissionChecks",
    "filters",
    "scores",
    "postFilter",
    "permit",
    "fairSharing",
)


def _unknown_key(where: str, key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{where}: unknown key {key!r}{hint}; known: {', '.join(known)}"


def _one(data: Mapping[str, object], key: str, default: PluginSpec) -> PluginSpec:
    if key not in data:
        return default
    return _spec(data[key], key, weighted=False)


def _many(
    data: Mapping[str, object],
    key: str,
    weighted: bool = False,
    default: tuple[PluginSpec, ...] = (),
) -> tuple[PluginSpec, ...]:
    if key not in data:
        return default
    given = data[key]
    if given is None:
        return ()
    if isinstance(given, str | Mapping) or not isinstance(given, list | tuple):
        raise ProfileError(f"{key}: a list of plugins")
    return tuple(_spec(item, f"{key}[{i}]", weighted) for i, item in enumerate(given))


def _spec(given: object, where: str, weighted: bool) -> PluginSpec:
    if isinstance(given, str):
        return PluginSpec(given)
    if not isinstance(given, Mapping):
        raise ProfileError(f"{where}: a plugin name, or a mapping with name and args")
    keys = ("name", "args", "weight") if weighted else ("name", "args")
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise ProfileError(_unknown_key(where, str(unknown[0]), keys))
    name = given.get("name")
    if not isinstance(name, str) or not name:
        raise ProfileError(f"{where}.name: the plugin's name")
    args = given.get("args", {})
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise ProfileError(f"{where}.args: a mapping of argument names to values")
    weight = given.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
        raise ProfileError(f"{where}.weight: a positive number")
    return PluginSpec(name, dict(args), float(weight))


def arguments(args: Args, plugin: str, known: Mapping[str, type]) -> dict[str, object]:
    """``args`` checked against the arguments a plugin takes (name -> type; an int is taken
    where a float is)."""
    out: dict[str, object] = {}
    for name, value in args.items():
        kind = known.get(name)
        if kind is None:
            takes = ", ".join(sorted(known)) or "none"
            raise ProfileError(f"{plugin}: unknown argument {name!r}; it takes: {takes}")
        accepted = (int, float) if kind is float else (kind,)
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, accepted):
            raise ProfileError(f"{plugin}: argument {name!r} must be a {kind.__name__}")
        out[name] = value
    return out


__all__ = [
    "DEFAULT_PROFILE",
    "Args",
    "FairSharing",
    "PluginSpec",
    "Profile",
    "ProfileError",
    "arguments",
    "duration_seconds",
]
