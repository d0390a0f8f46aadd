"""A scheduling profile read from a file (``--profile``), checked whole before anything runs.

Owns turning one YAML (or JSON) document, the mapping of
:mod:`gpufleet.scheduling.profile`, into a :class:`~gpufleet.scheduling.profile.Profile`, and
checking it the way a core will use it: every plugin name looked up in the registry and every
plugin built with its arguments, on an empty cluster. A bad profile is an
:class:`~gpufleet.io.errors.InputError` naming the file, the line of the document and what is
wrong, raised at start, before a scheduler connects or a simulation runs, not when the first
core is built.

What it does not do: parse YAML itself (``io.manifests`` does, with its size limit and error
places) or know which plugins exist (the registry does).
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.control.factory import build_core
from gpufleet.io.errors import InputError
from gpufleet.io.manifests import describe, load_documents
from gpufleet.model.times import simulated_time
from gpufleet.scheduling.profile import Profile, ProfileError
from gpufleet.scheduling.registry import Registry, UnknownPluginError

EXPECTED = (
    "one scheduling profile: a mapping with name, queueSort, admissionChecks, filters, scores, "
    "postFilter, permit and fairSharing (each may be left out)"
)


def load_profile(
    path: str | Path, policy: str = "default", registry: Registry | None = None
) -> Profile:
    """The profile of the file at ``path``, checked against ``registry`` (the built-in plugins
    by default) with the placement policy ``policy`` (whose scorers the profile's add to)."""
    source = str(path)
    documents = load_documents(path)
    if len(documents) != 1:
        raise InputError(source, f"expected {EXPECTED}; found {len(documents)} documents")
    number, line, data = documents[0]
    where = f"document {number} (line {line})"
    if not isinstance(data, dict):
        raise InputError(source, f"expected {EXPECTED}; got {describe(data)}", where)
    try:
        profile = Profile.from_mapping(data)
        # Arguments are checked by each plugin's factory: build every plugin once, on no nodes.
        build_core(
            [],
            policy,
            explain=False,
            time_format=simulated_time,
            profile=profile,
            registry=registry,
        )
    except (ProfileError, UnknownPluginError) as error:
        raise InputError(source, str(error), where) from None
    return profile


__all__ = ["load_profile"]
