"""Node pools as plain data: the nodes a pool makes (labels, taints, zones), how new nodes
spread over zones, and pools that cannot be."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.model.capacity import CAPACITY_TYPE_LABEL, SPOT_TAINT, CapacityType
from gpufleet.model.node import GFD_LABELS, Taint
from gpufleet.model.nodepools import NODE_POOL_LABEL, NodePool
from gpufleet.testing.builders import make_node

GPU_TAINT = Taint("nvidia.com/gpu", "present")


def pool(**options: object) -> NodePool:
    settings: dict[str, object] = {
        "name": "h100",
        "template": make_node("template", gpus=8, model="H100", taints=[GPU_TAINT]),
        "capacity": CapacityType.ON_DEMAND,
        "hourly_price": 98.0,
        "max_nodes": 4,
    }
    settings.update(options)
    return NodePool(**settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("capacity", "spot_taint", "taints"),
    [
        (CapacityType.ON_DEMAND, True, (GPU_TAINT,)),
        (CapacityType.RESERVED, True, (GPU_TAINT,)),
        (CapacityType.SPOT, True, (GPU_TAINT, SPOT_TAINT)),
        (CapacityType.SPOT, False, (GPU_TAINT,)),
    ],
    ids=["on-demand", "reserved", "spot-tainted", "spot-untainted"],
)
def test_a_pools_node_says_its_pool_capacity_zone_and_carries_the_spot_taint(
    capacity: CapacityType, spot_taint: bool, taints: tuple[Taint, ...]
) -> None:
    made = pool(capacity=capacity, spot_taint=spot_taint, zones=("a", "b")).node("h100-1", "b")
    assert made.name == "h100-1"
    assert made.labels[GFD_LABELS.HOSTNAME] == "h100-1"
    assert made.labels[GFD_LABELS.ZONE] == "b"
    assert made.labels[GFD_LABELS.REGION] == "b"
    assert (made.labels[GFD_LABELS.OS], made.labels[GFD_LABELS.ARCH]) == ("linux", "amd64")
    assert made.labels[NODE_POOL_LABEL] == "h100"
    assert made.labels[CAPACITY_TYPE_LABEL] == capacity.value
    assert made.labels[GFD_LABELS.NVLINK_DOMAIN] == "h100-1-nvl"
    assert made.labels[GFD_LABELS.PRODUCT] == "H100"
    assert made.taints == taints
    assert (made.cpu_milli, made.memory_mib, made.gpu_count) == (64_000, 256 * 1024, 8)


def test_nodes_of_a_pool_without_zones_have_no_zone_and_a_zone_must_be_one_of_the_pools() -> None:
    assert GFD_LABELS.ZONE not in pool().node("x").labels
    with pytest.raises(ValueError, match="no zone 'c'"):
        pool(zones=("a", "b")).node("x", "c")
    with pytest.raises(ValueError, match="name one"):
        pool(zones=("a",)).node("x")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_nodes": 3, "max_nodes": 2}, "max nodes 2 is less than min nodes 3"),
        ({"min_nodes": -1}, "must not be negative"),
        ({"hourly_price": -1.0}, "hourly price"),
        ({"hourly_price": float("nan")}, "hourly price"),
        ({"provisioning_delay": -5.0}, "provisioning delay"),
        ({"zones": ("a", "a")}, "zones must be distinct"),
        ({"name": ""}, "needs a name"),
    ],
    ids=["max-below-min", "negative-min", "negative-price", "nan-price", "negative-delay",
         "repeated-zone", "no-name"],
)  # fmt: skip
def test_a_pool_that_cannot_be_is_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pool(**options)


def test_zero_nodes_at_both_ends_is_a_pool_that_is_off() -> None:
    assert pool(min_nodes=0, max_nodes=0).max_nodes == 0


@given(
    existing=st.lists(st.integers(0, 20), min_size=1, max_size=4),
    count=st.integers(0, 40),
)
def test_new_nodes_go_to_the_emptiest_zones(existing: list[int], count: int) -> None:
    zones = tuple(f"z{i}" for i in range(len(existing)))
    have = dict(zip(zones, existing, strict=True))
    chosen = pool(zones=zones).zones_for(count, have)
    assert len(chosen) == count
    after = Counter(have)
    after.update(z for z in chosen if z is not None)
    # Water-filling: a zone that got a new node ends at most one above the emptiest zone.
    lowest = min(after[z] for z in zones)
    assert all(after[z] <= lowest + 1 for z in zones if after[z] > have[z])
