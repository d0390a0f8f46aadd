"""The cycle collector around a burst of long-lived objects (control/gc_bursts.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpufleet.control.gc_bursts import long_lived_burst, short_lived_burst, thaw
from gpufleet.scheduling.core import SchedulerCore


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


@pytest.mark.parametrize("enabled_before", [True, False], ids=["on-before", "off-before"])
def test_a_short_lived_burst_turns_the_collector_off_and_back_as_it_was(
    enabled_before: bool,
) -> None:
    if enabled_before:
        gc.enable()
    else:
        gc.disable()
    with short_lived_burst():
        assert not gc.isenabled()
        with short_lived_burst():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner one found it off
    assert gc.isenabled() is enabled_before
    assert gc.get_freeze_count() == 0  # nothing frozen: what it made is gone


def test_a_short_lived_burst_gives_the_collector_back_when_its_block_raises() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), short_lived_burst():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_metrics_are_read_with_the_collector_off_and_leave_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpufleet.metrics import state as metrics_state
    from gpufleet.testing.builders import make_cluster, make_queue, make_workload
    from gpufleet.testing.fakes import EchoCluster, make_core

    core = make_core(make_cluster(2, gpus=4), [make_queue("a", 8)])
    EchoCluster(core).submit(*(make_workload(f"w{i}", "a") for i in range(3)), now=0)
    collector_on: list[bool] = []
    read = metrics_state._read

    def watched(core: SchedulerCore) -> metrics_state.SchedulerState:
        collector_on.append(gc.isenabled())
        return read(core)

    monkeypatch.setattr(metrics_state, "_read", watched)
    gc.enable()
    state = metrics_state.read_state(core)
    assert state.running_workloads["a"] == 3
    assert collector_on == [False]
    assert gc.isenabled()
