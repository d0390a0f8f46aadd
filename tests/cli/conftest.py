"""Fixtures shared by the tests of the commands against a control plane."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI

from gpufleet.service.protocol import Plane


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment: no server or token variables, a config file under tmp_path."""
    for name in ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config.yaml"
    monkeypatch.setenv("GPUFLEET_CONFIG", str(path))
    return path


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Plane]:
    """``serve`` builds everything, then returns; the planes it would have served."""
    planes: list[Plane] = []

    def run(server: uvicorn.Server, **_: object) -> None:
        application = server.config.app
        assert isinstance(application, FastAPI)
        planes.append(application.state.plane)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return planes
