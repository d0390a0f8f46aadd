"""Fixtures shared by the tests of the commands against a control plane."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment: no server or token variables, a config file under tmp_path."""
    for name in ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config.yaml"
    monkeypatch.setenv("GPUFLEET_CONFIG", str(path))
    return path
