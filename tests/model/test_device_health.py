"""Device health in the model: nodes compared with and without it, and GPU faults."""

from __future__ import annotations

import pytest

from gpufleet.model.events import DeviceHealthChanged
from gpufleet.model.faults import GpuFault
from gpufleet.model.node import same_but_health, with_gpu_health
from gpufleet.testing.builders import make_node


def test_health_takes_part_in_equality_and_same_but_health_tells_it_apart() -> None:
    node = make_node("n", gpus=4)
    sick = with_gpu_health(node, [1, 3])
    assert sick != node
    assert sick.unhealthy_gpus == (1, 3)
    assert same_but_health(node, sick)
    assert with_gpu_health(sick, []) == node
    assert with_gpu_health(node, []) is node
    assert not same_but_health(node, make_node("n", gpus=3))


def test_health_event_reasons() -> None:
    event = DeviceHealthChanged("n", (2,), ((2, "XID 79"),))
    assert event.reason(2) == "XID 79"
    assert event.reason(0) == ""


@pytest.mark.parametrize(
    "kwargs",
    [
        {"at": -1.0},
        {"gpu": -1},
        {"xid": 0},
        {"recover_after": 0.0},
    ],
    ids=["negative-time", "negative-gpu", "no-xid", "zero-recovery"],
)
def test_faults_refuse_impossible_values(kwargs: dict[str, float]) -> None:
    values: dict[str, object] = {"at": 0.0, "node": "n", "gpu": 0, "xid": 79, **kwargs}
    with pytest.raises(ValueError, match="fault"):
        GpuFault(**values)  # type: ignore[arg-type]


def test_a_fault_says_its_xid_and_when_it_ends() -> None:
    fault = GpuFault(100.0, "n", 0, 31, recover_after=50.0)
    assert fault.reason == "XID 31: GPU memory page fault"
    assert fault.recovers_at == 150.0
    assert GpuFault(0.0, "n", 0, 999).reason == "XID 999"
