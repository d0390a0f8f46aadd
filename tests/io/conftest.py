"""Fixtures for the io tests: writing fixture files, finding the Alibaba trace."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

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


def alibaba_trace_dir() -> Path:
    """$GPUFLEET_ALIBABA_TRACE_DIR, else ../shared/traces/alibaba-gpu-2023 beside the repo."""
    configured = os.environ.get("GPUFLEET_ALIBABA_TRACE_DIR")
    if configured:
        return Path(configured)
    return REPO_ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023"


@pytest.fixture
def alibaba_trace() -> Path:
    """The Alibaba GPU trace directory; skips the test when it is not on this machine."""
    path = alibaba_trace_dir()
    if not (path / "node_yaml" / "openb_node_list_gpu_node.yaml").is_file():
        pytest.skip(
            f"Alibaba GPU trace not found at {path} (set GPUFLEET_ALIBABA_TRACE_DIR to the "
            "alibaba-gpu-2023 directory)"
        )
    return path
