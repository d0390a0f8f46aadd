"""The version of the gpufleet code imported: what ``gpufleet.__version__``, ``gpufleet
--version`` and the HTTP API's OpenAPI document report.

Owns the choice between a source checkout's ``pyproject.toml`` and an installation's metadata
(:func:`version_of`); ``gpufleet/__init__.py`` imports this module only when the version is
asked for, so commands that never ask pay nothing for it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: What is reported when neither a source checkout nor an installation names a version.
UNKNOWN_VERSION = "0.0.0+unknown"


def version_of(package_dir: Path, installed: Callable[[], str | None]) -> str:
    """The version of the gpufleet package in ``package_dir``: that of the ``pyproject.toml``
    beside it when it is a source checkout, else ``installed()`` (the installed metadata's),
    else :data:`UNKNOWN_VERSION`.

    A source checkout's pyproject comes first because an editable install's metadata keeps the
    version of the day it was installed, and a checkout put on PYTHONPATH (a git worktree) is
    another tree than the one installed: in both the metadata would name other code's version.
    An installed wheel has no pyproject beside its package, so its metadata answers."""
    try:
        project = tomllib.loads((package_dir.parent / "pyproject.toml").read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        project = {}
    table = project.get("project")
    if isinstance(table, dict) and table.get("name") == "gpufleet":
        found = table.get("version")
        if isinstance(found, str):
            return found
    return installed() or UNKNOWN_VERSION


def installed_version() -> str | None:
    """The version in gpufleet's installed metadata, or None where it is not installed."""
    try:
        return version("gpufleet")
    except PackageNotFoundError:
        return None


def current_version() -> str:
    """The version of the gpufleet package this module belongs to."""
    return version_of(Path(__file__).resolve().parent, installed_version)
