"""Unhealthy devices: nothing new goes on them, what runs there stays counted, recovery is
immediate (node table, engine, core, explain)."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import GpuSharing, Pod, SharingStrategy
from gpufleet.model.actions import Bind
from gpufleet.model.events import DeviceHealthChanged, PodDeleted, WorkloadAdded
from gpufleet.model.workload import Workload
from gpufleet.scheduling.engine import Bound, PlacementEngine, Unschedulable
from gpufleet.scheduling.filters import UNHEALTHY_GPUS
from gpufleet.scheduling.node_table import Claim, NodeTable
from gpufleet.scheduling.policies.bestfit import bestfit_policy
from gpufleet.testing.builders import make_node, make_pod, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

TIME_SLICED = GpuSharing(SharingStrategy.TIME_SLICING, 4)
MIG = {1: ["3g.40gb", "3g.40gb"], 2: ["3g.40gb", "3g.40gb"]}


def one(name: str, **shape: object) -> Workload:
    """A one-pod workload of ``shape`` (make_pod's GPU arguments)."""
    return make_workload(name, **{"gpus": 0, **shape})  # type: ignore[arg-type]


def place(table: NodeTable, pod: Pod) -> Bound | Unschedulable:
    return PlacementEngine(table, bestfit_policy()).place(pod, explain=True)


def devices_of(result: Bound | Unschedulable) -> set[int]:
    assert isinstance(result, Bound), result
    placement = result.placement
    return set(placement.gpu_indices) | {g for g, _ in placement.mig_slices}


@pytest.mark.parametrize(
    ("pod", "node_kwargs", "sick", "expected_free"),
    [
        (make_pod(gpus=1), {"gpus": 2}, [0], {1}),
        (make_pod(milli=300), {"gpus": 2}, [0], {1}),
        (make_pod(gpus=1, units=1), {"gpus": 2, "sharing": TIME_SLICED}, [0], {1}),
        (make_pod(mig="3g.40gb"), {"gpus": 3, "mig": MIG}, [1], {2}),
    ],
    ids=["whole", "share", "time-sliced-replica", "mig-slice"],
)
def test_an_unhealthy_device_takes_nothing_new_and_the_others_still_work(
    pod: Pod, node_kwargs: dict[str, object], sick: list[int], expected_free: set[int]
) -> None:
    table = NodeTable([make_node("n", **node_kwargs)])  # type: ignore[arg-type]
    assert table.set_unhealthy(0, sick)
    for _ in range(2 if pod.gpu.mig_profile else 1):
        assert devices_of(place(table, pod)) <= expected_free
    table.set_unhealthy(0, [])
    assert devices_of(place(table, pod)) <= set(sick) | expected_free


def test_a_node_read_with_unhealthy_devices_starts_with_them_withheld() -> None:
    table = NodeTable([make_node("n", gpus=4, unhealthy=[0, 2], sharing=TIME_SLICED)])
    assert table.unhealthy_indices(0) == (0, 2)
    assert list(table.gpu_free[0, :4]) == [0, 1000, 0, 1000]
    assert table.full_free[0] == 2
    assert table.units_free[0] == 8  # the kubelet advertises the healthy devices' replicas only
    table.set_unhealthy(0, [])
    assert table.units_free[0] == 16
    assert table.full_free[0] == 4
    assert not table.any_unhealthy


def test_a_pod_on_a_failing_device_stays_counted_and_its_release_is_exact() -> None:
    table = NodeTable([make_node("n", gpus=2)])
    held = place(table, make_pod(milli=600))
    assert isinstance(held, Bound)
    assert held.placement.gpu_indices == (0,)
    table.set_unhealthy(0, [0])
    assert table.gpu_free[0, 0] == 0
    assert table.allocated_gpu_milli() == 600
    table.release(held.allocation)
    assert table.gpu_free[0, 0] == 0  # still unhealthy: what the pod gave back is withheld
    table.set_unhealthy(0, [])
    assert list(table.gpu_free[0, :2]) == [1000, 1000]
    assert table.allocated_gpu_milli() == 0


def test_an_existing_holder_on_an_unhealthy_device_is_counted_but_nothing_new_goes_there() -> None:
    table = NodeTable([make_node("n", gpus=2, unhealthy=[1])])
    with pytest.raises(ValueError, match="GPU 1 of 'n' is unhealthy"):
        table.allocate(Claim(0, 1000, 1024, (1,), 1000, units=1))
    allocation = table.allocate(Claim(0, 1000, 1024, (1,), 500, units=1, existing=True))
    assert table.withheld(0)[0][1] == 500
    table.release(allocation)
    assert table.withheld(0)[0][1] == 1000


def test_trials_roll_back_releases_and_restores_on_unhealthy_devices() -> None:
    table = NodeTable([make_node("n", gpus=2, mig={1: ["3g.40gb", "3g.40gb"]})])
    whole = place(table, make_pod(gpus=1))
    mig = place(table, make_pod(mig="3g.40gb"))
    assert isinstance(whole, Bound)
    assert isinstance(mig, Bound)
    table.set_unhealthy(0, [0, 1])
    before = (table.gpu_free[0].copy(), table.mig_free[0].copy(), table.withheld(0))
    mark = table.begin_trial()
    table.release(whole.allocation)
    table.release(mig.allocation)
    table.reallocate(mig.allocation)
    table.rollback(mark)
    after = (table.gpu_free[0], table.mig_free[0], table.withheld(0))
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    for x, y in zip(before[2], after[2], strict=True):
        np.testing.assert_array_equal(x, y)
    mark = table.begin_trial()
    with pytest.raises(RuntimeError, match="inside a trial"):
        table.set_unhealthy(0, [])
    table.rollback(mark)


def test_unknown_device_indices_are_an_error_naming_the_node() -> None:
    table = NodeTable([make_node("n", gpus=2)])
    with pytest.raises(ValueError, match="node 'n' has no GPU 5"):
        table.set_unhealthy(0, [5])


def test_the_core_applies_health_at_once_and_wakes_what_waits_for_the_device() -> None:
    core = make_core([make_node("n", gpus=2)])
    cluster = EchoCluster(core)
    cluster.submit(one("first", gpus=1))
    assert cluster.running["default/first"].gpu_indices == (0,)
    core.handle(DeviceHealthChanged("n", (1,), ((1, "XID 79"),)))
    cluster.submit(one("second", gpus=1))
    assert "default/second" not in cluster.running
    # Its healthy GPU is busy: it waits for that, as on any full node (issue 29, item 15).
    assert "Insufficient nvidia.com/gpu" in cluster.told["default/second"]
    core.handle(DeviceHealthChanged("n", ()))
    cluster.settle()
    assert cluster.running["default/second"].gpu_indices == (1,)
    # a health change for a node that left is ignored
    core.handle(DeviceHealthChanged("gone", (0,)))


@pytest.mark.parametrize(
    ("node_kwargs", "running", "sick", "pod", "reason"),
    [
        ({"gpus": 4}, 3, [3], {"gpus": 1}, "1 Insufficient nvidia.com/gpu"),
        ({"gpus": 4}, 4, [3], {"gpus": 1}, "1 Insufficient nvidia.com/gpu"),
        ({"gpus": 4}, 1, [3], {"gpus": 3}, "1 Insufficient nvidia.com/gpu"),
        ({"gpus": 4}, 0, [3], {"gpus": 4}, f"1 {UNHEALTHY_GPUS}"),
        ({"gpus": 4}, 1, [2, 3], {"gpus": 3}, f"1 {UNHEALTHY_GPUS}"),
        ({"gpus": 4}, 1, [0, 1, 2, 3], {"gpus": 1}, f"1 {UNHEALTHY_GPUS}"),
        ({"gpus": 4}, 0, [3], {"gpus": 5}, "1 Insufficient nvidia.com/gpu"),
        ({"gpus": 2, "sharing": TIME_SLICED}, 4, [1], {"gpus": 1, "units": 1},
         "1 Insufficient nvidia.com/gpu"),
        ({"gpus": 3, "mig": MIG}, 0, [1, 2], {"mig": "3g.40gb"}, f"1 {UNHEALTHY_GPUS}"),
    ],
    ids=[
        "healthy-busy-one-withdrawn-free", "all-busy-one-withdrawn-busy",
        "healthy-enough-but-busy", "needs-the-withdrawn-one", "healthy-too-few",
        "every-gpu-withdrawn", "fits-no-node-at-all", "time-sliced-replicas-busy",
        "only-withdrawn-mig-slices",
    ],
)  # fmt: skip
def test_unhealthy_gpus_are_named_only_where_they_are_why_it_waits(
    node_kwargs: dict[str, object],
    running: int,
    sick: list[int],
    pod: dict[str, object],
    reason: str,
) -> None:
    """A pod whose node's healthy devices are merely busy waits for them (Insufficient), as
    the kubelet's lowered allocatable would say; unhealthy GPUs are named where the healthy
    ones could never hold it (issue 29, item 15)."""
    core = make_core([make_node("n", **node_kwargs)])  # type: ignore[arg-type]
    cluster = EchoCluster(core)
    shape = {"units": 1} if "sharing" in node_kwargs else {}
    for i in range(running):
        cluster.submit(one(f"w{i}", gpus=1, **shape))
    assert len(cluster.running) == running
    core.handle(DeviceHealthChanged("n", tuple(sick)))
    cluster.submit(one("new", **pod))
    assert "default/new" not in cluster.running
    assert cluster.told["default/new"].endswith(f"0/1 nodes are available: {reason}.")


@dataclass(frozen=True)
class Step:
    """A pod of ``shape`` arrives, the ``pick``-th running pod ends, or node ``node``'s
    unhealthy devices become ``devices``."""

    kind: str
    shape: str = ""
    pick: int = 0
    node: int = 0
    devices: frozenset[int] = frozenset()


@st.composite
def flips(draw: st.DrawFn) -> list[Step]:
    steps: list[Step] = []
    for _ in range(draw(st.integers(5, 30))):
        kind = draw(st.sampled_from(["pod", "pod", "end", "health"]))
        if kind == "pod":
            steps.append(Step(kind, shape=draw(st.sampled_from(sorted(POD_SHAPES)))))
        elif kind == "end":
            steps.append(Step(kind, pick=draw(st.integers(0, 1000))))
        else:
            devices = draw(st.frozensets(st.integers(0, 3), max_size=3))
            steps.append(Step(kind, node=draw(st.integers(0, 2)), devices=devices))
    return steps


POD_SHAPES: dict[str, dict[str, Any]] = {
    "whole": {"gpus": 1},
    "two": {"gpus": 2},
    "share": {"milli": 400},
    "mig": {"mig": "1g.10gb"},
}


@settings(max_examples=60, deadline=None)
@given(steps=flips())
def test_no_placement_ever_lands_on_an_unhealthy_device_nor_over_allocates(
    steps: list[Step],
) -> None:
    nodes = [make_node(f"n{i}", gpus=4, mig={3: ["1g.10gb"] * 3}) for i in range(3)]
    core = make_core(nodes)
    cluster = EchoCluster(core)
    sick: dict[str, set[int]] = defaultdict(set)
    count = seen = 0
    for step in steps:
        if step.kind == "pod":
            count += 1
            cluster.submit(one(f"p{count}", **POD_SHAPES[step.shape]))
        elif step.kind == "end" and cluster.running:
            key = sorted(cluster.running)[step.pick % len(cluster.running)]
            del cluster.running[key]
            core.handle(PodDeleted(key))
            cluster.settle()
        elif step.kind == "health":
            name = f"n{step.node}"
            sick[name] = set(step.devices)
            core.handle(DeviceHealthChanged(name, tuple(sorted(step.devices))))
            cluster.settle()
        for action in cluster.actions[seen:]:
            if isinstance(action, Bind):
                used = set(action.placement.gpu_indices)
                used |= {g for g, _ in action.placement.mig_slices}
                assert not used & sick[action.placement.node], (action, dict(sick))
        seen = len(cluster.actions)
        # What each device holds, from what runs, against what the table says.
        held: dict[tuple[str, int], int] = defaultdict(int)
        slices: set[tuple[str, int, int]] = set()
        for placement in cluster.running.values():
            for index in placement.gpu_indices:
                held[placement.node, index] += placement.gpu_milli_per_device or 1000
            for index, slot in placement.mig_slices:
                assert (placement.node, index, slot) not in slices
                slices.add((placement.node, index, slot))
        assert all(milli <= 1000 for milli in held.values())
        table = core.table
        for name, row in table.row_of.items():
            withheld = table.withheld(row)[0]
            for position, gpu in enumerate(table.nodes[row].gpus):
                if gpu.partitioned:
                    continue
                free = int(table.gpu_free[row, position] + withheld[position])
                assert free == 1000 - held[name, gpu.index]
                if gpu.index in sick[name]:
                    assert table.gpu_free[row, position] == 0


def test_binds_never_name_a_device_unhealthy_at_the_time() -> None:
    core = make_core([make_node("n", gpus=4, mig={3: ["1g.10gb"] * 3})])
    cluster = EchoCluster(core)
    rng = random.Random(7)
    sick: set[int] = set()
    for i in range(60):
        if rng.random() < 0.3:
            sick = set(rng.sample(range(4), rng.randint(0, 3)))
            core.handle(DeviceHealthChanged("n", tuple(sorted(sick))))
        if cluster.running and rng.random() < 0.4:
            key = rng.choice(sorted(cluster.running))
            del cluster.running[key]
            core.handle(PodDeleted(key))
        shape = rng.choice(list(POD_SHAPES.values()))
        core.handle(WorkloadAdded(one(f"w{i}", **shape)))
        actions = core.run_until_idle()
        for action in actions:
            if isinstance(action, Bind):
                used = set(action.placement.gpu_indices)
                used |= {g for g, _ in action.placement.mig_slices}
                assert not used & sick, (action, sick)
        core.handle_all(cluster.apply(actions))


def test_a_health_change_moves_the_node_sets_version() -> None:
    """Memos of what the nodes offer at all read ``topology_version`` (issue 31, item 5)."""
    table = NodeTable([make_node("n", gpus=2)])
    before = table.topology_version
    assert table.set_unhealthy(0, [1])
    assert table.topology_version > before
    after = table.topology_version
    assert not table.set_unhealthy(0, [1])
    assert table.topology_version == after, "no change, no new version"


@pytest.mark.parametrize(
    ("sick", "cordoned", "never"),
    [([], False, False), ([3], False, True), ([], True, True)],
    ids=["all-healthy", "one-device-failed", "node-cordoned"],
)
def test_never_fits_follows_the_table_with_nothing_telling_the_explainer(
    sick: list[int], cordoned: bool, never: bool
) -> None:
    """The explainer's never-fits memo pulls the table's versions: a change made on the table
    alone (no event through the core) is seen at the next question (issue 31, item 5)."""
    core = make_core([make_node("n", gpus=4)])
    gang = make_workload("gang", pods=4, gpus=1)
    assert core.explainer.never_fits(gang) is False  # remembered under the healthy table
    table = core.table
    table.set_unhealthy(0, sick)
    if cordoned:
        table.set_scheduling(0, schedulable=False)
    assert core.explainer.never_fits(gang) is never
    table.set_unhealthy(0, [])
    table.set_scheduling(0, schedulable=True)
    assert core.explainer.never_fits(gang) is False
