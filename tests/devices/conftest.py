"""Fixtures for the devices tests: a settable clock and fake NVMLs built from YAML text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import parse_fake_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "agent" / "fake-gpus.yaml"


class SetClock:
    """A clock tests move by hand (seconds since the fake node started)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> SetClock:
    return SetClock()


MakeNvml = Callable[[str], FakeNvml]


@pytest.fixture
def make_nvml(clock: SetClock) -> MakeNvml:
    """An initialised fake NVML from YAML text, on the test's clock."""

    def make(text: str) -> FakeNvml:
        nvml = FakeNvml(parse_fake_spec(yaml.safe_load(text), "test.yaml"), clock=clock)
        nvml.nvmlInit()
        return nvml

    return make
