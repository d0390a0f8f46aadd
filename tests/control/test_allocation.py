"""The cycle collector around a burst of long-lived objects (control/allocation.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpufleet.control.allocation import long_lived_burst, thaw


@pytest.fixture(autouse=True)
def collector_as_it_was() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled_before", [True, False], ids=["on-before", "off-before"])
def test_the_collector_is_off_inside_and_on_after(enabled_before: bool) -> None:
    if enabled_before:
        gc.enable()
    else:
        gc.disable()
    with long_lived_burst():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_what_the_burst_made_is_frozen_and_thawed_on_request() -> None:
    gc.unfreeze()
    with long_lived_burst():
        kept = [{"pod": i} for i in range(1000)]
    assert gc.get_freeze_count() >= len(kept)
    thaw()
    assert gc.get_freeze_count() == 0


def test_the_collector_comes_back_when_the_burst_fails() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), long_lived_burst():
        raise RuntimeError("listing failed")
    assert gc.isenabled()
