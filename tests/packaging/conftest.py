"""The wheel, built once per test process (about 3 s on two busy cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.packaging.support import build_wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))
