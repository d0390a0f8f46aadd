"""The local machine's fixtures (fake GPUs, state directories, no process left behind) and a
control plane over it, driven turn by turn through its API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.model.inventory import NodeInventory
from gpufleet.testing.local_service import LocalHarness
from tests.backends.local.conftest import eight_gpus, no_process_left, state_root

__all__ = ["eight_gpus", "harness", "no_process_left", "state_root"]


@pytest.fixture
def harness(eight_gpus: NodeInventory, state_root: Path) -> Iterator[LocalHarness]:
    made = LocalHarness.start(eight_gpus, state_root)
    yield made
    made.shut_down()
