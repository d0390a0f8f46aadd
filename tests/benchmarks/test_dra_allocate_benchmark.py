"""``benchmarks/dra_allocate.py``: every shape it times allocates (a refusal would time the
error path), with the devices the policy is meant to choose."""

from __future__ import annotations

import pytest

from benchmarks.dra_allocate import SHAPES


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_timed_shape_allocates(name: str) -> None:
    allocation = SHAPES[name]()
    assert allocation.ok, allocation.reason


def test_the_partitionable_node_gives_mig_from_the_gpu_already_partitioned() -> None:
    (choice,) = SHAPES["1 MIG device, partitionable node"]().choices
    assert choice.device.name == "gpu-0-mig-1g.10gb-1"
    (whole,) = SHAPES["1 whole GPU, partitionable node"]().choices
    assert whole.device.name == "gpu-1"
