"""Fixtures for the io tests: writing fixture files, the trace's node YAML."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

WriteFile = Callable[[str, str], Path]


@pytest.fixture
def write_file(tmp_path: Path) -> WriteFile:
    """Write dedented text to ``tmp_path/name`` and return the path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return write


@pytest.fixture
def alibaba_node_yaml(alibaba_trace: Path) -> Path:
    """The trace's node list as Kubernetes YAML (skips when the trace or that file is absent)."""
    path = alibaba_trace / "node_yaml" / "openb_node_list_gpu_node.yaml"
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine (`gpufleet traces fetch` gets the CSVs only)")
    return path
