"""Cost of a plane's pods: what each pod held (from its record and its node), priced and split
allocated / used / idle with the measured utilisation, grouped; unmeasured pods never read as
0 %, unpriced models never crash a report, and the groups always add up to the total."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.economics import IDLE, UNALLOCATED, CapacityType, Window
from gpufleet.economics.reports import cost_of_runs, parse_by
from gpufleet.economics.runs import PodRun, capacity_type
from gpufleet.model import Placement
from gpufleet.model.workload import TimedWorkload
from gpufleet.service.cost_holdings import pod_runs
from gpufleet.service.cost_window import parse_window
from gpufleet.service.costing import UTIL_METRIC, mean_utilisation
from gpufleet.service.records import (
    POD_CANCELLED,
    POD_FAILED,
    POD_RUNNING,
    POD_SUCCEEDED,
    WorkloadRecord,
)
from gpufleet.telemetry.series import SeriesStore
from gpufleet.testing.builders import make_node, make_workload
from gpufleet.testing.economics_builders import HOUR, price_list

H100 = "NVIDIA-H100-80GB-HBM3"
PRICES = price_list(estimate_spot=0.5)


def run(
    name: str = "job",
    *,
    gpus: float = 1.0,
    hours: tuple[float, float] = (0.0, 10.0),
    namespace: str = "ml",
    queue: str = "q",
    tenant: str = "t",
    model: str = H100,
    capacity: CapacityType = CapacityType.ON_DEMAND,
    labels: Mapping[str, str] | None = None,
    cpu: float = 0.0,
    running: bool = True,
) -> PodRun:
    return PodRun(
        f"{namespace}/{name}", name, namespace, f"{name}-0", "n1", hours[0] * HOUR,
        hours[1] * HOUR, running, gpus, model if gpus else "", capacity, cpu, 0.0, queue, tenant,
        "Job", dict(labels or {}),
    )  # fmt: skip


def util(**by_pod: float) -> dict[tuple[str, str], float]:
    return {("ml", pod): value for pod, value in by_pod.items()}


WINDOW = Window(0.0, 10 * HOUR)


@pytest.mark.parametrize(
    ("runs", "utilisation", "expected"),
    [
        pytest.param(
            [run("a")], util(**{"a-0": 0.25}), {"ml": (100.0, 25.0, 75.0, 0.0)}, id="measured"
        ),
        pytest.param([run("a")], {}, {"ml": (100.0, 0.0, 0.0, 100.0)}, id="no-series-for-it"),
        pytest.param([run("a")], None, {"ml": (100.0, 0.0, 0.0, 100.0)}, id="no-telemetry"),
        pytest.param(
            [run("a", gpus=0.5, hours=(5, 15))],
            util(**{"a-0": 1.0}),
            {"ml": (25.0, 25.0, 0.0, 0.0)},
            id="half-gpu-half-window",
        ),
        pytest.param(
            [run("a", capacity=CapacityType.SPOT)],
            util(**{"a-0": 0.5}),
            {"ml": (40.0, 20.0, 20.0, 0.0)},
            id="spot",
        ),
        pytest.param(
            [run("a", gpus=0, cpu=2)],
            {},
            {"ml": (1.0, 1.0, 0.0, 0.0)},
            id="cpu-only",
        ),
    ],
)
def test_the_split_of_one_pod(
    runs: list[PodRun],
    utilisation: dict[tuple[str, str], float] | None,
    expected: dict[str, tuple[float, float, float, float]],
) -> None:
    report = cost_of_runs(runs, [], PRICES, WINDOW, "namespace", utilisation, cluster_idle=False)
    got = {
        g.name: (
            round(g.allocated, 6), round(g.used, 6), round(g.idle, 6),
            round(g.gpu_unmeasured_cost, 6),
        )
        for g in report.groups
    }  # fmt: skip
    assert got == expected
    assert report.measured is (utilisation is not None)


def test_an_unmeasured_pod_has_no_utilisation_and_is_not_an_idle_holder() -> None:
    report = cost_of_runs(
        [run("a"), run("b")], [], PRICES, WINDOW, "workload", util(**{"b-0": 0.1})
    )
    by_name = {g.name: g for g in report.groups}
    assert by_name["ml/a"].utilisation is None
    assert by_name["ml/b"].utilisation == pytest.approx(0.1)
    assert [h.workload for h in report.idle_holders()] == ["ml/b"]
    assert report.idle_holders()[0].idle == pytest.approx(90.0)


@pytest.mark.parametrize(
    ("by", "names"),
    [
        pytest.param("team", ["red", "blue", UNALLOCATED], id="bare-key-is-a-label"),
        pytest.param("label:team", ["red", "blue", UNALLOCATED], id="label"),
        pytest.param("queue", ["q1", "q2"], id="queue"),
        pytest.param("tenant", ["t"], id="tenant"),
        pytest.param("namespace,queue", ["ml/q1", "ml/q2"], id="two-keys"),
        pytest.param("workload", ["ml/a", "ml/b", "ml/c"], id="workload"),
    ],
)
def test_grouping(by: str, names: list[str]) -> None:
    runs = [
        run("a", gpus=2, queue="q1", labels={"team": "red"}),
        run("b", gpus=1, queue="q2", labels={"team": "blue"}),
        run("c", gpus=0.5, queue="q2"),
    ]
    report = cost_of_runs(runs, [], PRICES, WINDOW, by, {}, cluster_idle=False)
    assert [g.name for g in report.groups] == names
    assert report.by == tuple(by.split(","))


@pytest.mark.parametrize("by", ["", "label:", "annotation:", " , "])
def test_a_by_naming_nothing_is_refused(by: str) -> None:
    with pytest.raises(ValueError, match="by: "):
        parse_by(by)


def test_the_cluster_idle_is_the_gpu_time_nobody_held() -> None:
    nodes = [make_node("n1", gpus=4, model=H100)]
    report = cost_of_runs([run("a", gpus=1)], nodes, PRICES, WINDOW, "namespace", util())
    assert [g.name for g in report.groups] == ["ml", IDLE]
    idle = report.groups[-1]
    assert (idle.gpu_hours, idle.idle_gpu_hours, idle.gpu_cost) == (30.0, 30.0, 300.0)
    assert report.total.allocated == pytest.approx(400.0)


def test_an_unpriced_model_is_counted_in_hours_and_named() -> None:
    nodes = [make_node("t", gpus=2, model="T4")]
    runs = [run("a", gpus=1, model="Tesla-T4", cpu=1), run("b")]
    report = cost_of_runs(runs, nodes, PRICES, WINDOW, "workload", util(**{"a-0": 0.5}))
    a = next(g for g in report.groups if g.name == "ml/a")
    assert (a.gpu_hours, a.unpriced_gpu_hours, a.gpu_cost, a.cpu_cost) == (10.0, 10.0, 0.0, 0.5)
    assert set(report.unpriced_models) == {"T4", "Tesla-T4"}
    assert any("no price for GPU model" in note for note in report.notes)


def test_the_idle_gpu_time_of_an_unpriced_model_is_counted_in_hours() -> None:
    nodes = [make_node("t", gpus=2, model="T4"), make_node("h", gpus=1, model=H100)]
    runs = [run("a", gpus=1, model="Tesla-T4", hours=(0, 4)), run("b")]
    report = cost_of_runs(runs, nodes, PRICES, WINDOW, "namespace", util(**{"b-0": 1.0}))
    idle = report.groups[-1]
    assert idle.name == IDLE
    # T4: 2 GPUs x 10 h offered, 4 held; the H100 was held all along.
    assert (idle.gpu_hours, idle.unpriced_gpu_hours, idle.idle_gpu_hours) == (16.0, 16.0, 0.0)
    assert idle.gpu_cost == 0
    assert report.total.gpu_hours == pytest.approx(3 * 10.0)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]),
            st.floats(0, 20),
            st.floats(0, 20),
            st.one_of(st.none(), st.floats(0, 1)),
            st.sampled_from(["red", "blue", ""]),
        ),
        max_size=8,
    )
)
def test_groups_add_up_and_allocated_is_used_plus_idle_plus_unmeasured(
    specs: Sequence[tuple[float, float, float, float | None, str]],
) -> None:
    runs, utilisation = [], {}
    for i, (gpus, a, b, measured, team) in enumerate(specs):
        item = run(f"w{i}", gpus=gpus, hours=(min(a, b), max(a, b)), cpu=1,
                   labels={"team": team} if team else None)  # fmt: skip
        runs.append(item)
        if measured is not None:
            utilisation[("ml", item.pod)] = measured
    nodes = [make_node("n1", gpus=32, model=H100)]
    report = cost_of_runs(runs, nodes, PRICES, WINDOW, "team", utilisation)
    for group in (*report.groups, report.total):
        assert group.allocated == pytest.approx(group.used + group.idle + group.gpu_unmeasured_cost)
        assert group.idle >= -1e-9
    assert sum(g.allocated for g in report.groups) == pytest.approx(report.total.allocated)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({}, CapacityType.ON_DEMAND, id="none"),
        pytest.param({"karpenter.sh/capacity-type": "spot"}, CapacityType.SPOT, id="karpenter"),
        pytest.param(
            {"karpenter.sh/capacity-type": "reserved"},
            CapacityType.RESERVED,
            id="karpenter-reserved",
        ),
        pytest.param({"eks.amazonaws.com/capacityType": "SPOT"}, CapacityType.SPOT, id="eks"),
        pytest.param(
            {"eks.amazonaws.com/capacityType": "ON_DEMAND"},
            CapacityType.ON_DEMAND,
            id="eks-on-demand",
        ),
        pytest.param({"cloud.google.com/gke-spot": "true"}, CapacityType.SPOT, id="gke-spot"),
        pytest.param(
            {"gpufleet.dev/capacity-type": "reserved", "karpenter.sh/capacity-type": "spot"},
            CapacityType.RESERVED,
            id="gpufleet-label-first",
        ),
    ],
)
def test_capacity_type_from_node_labels(labels: dict[str, str], expected: CapacityType) -> None:
    assert capacity_type(labels) is expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 7 * 86400.0), ("2w", 14 * 86400.0), ("24h", 86400.0), ("90m", 5400.0),
     ("1d12h", 1.5 * 86400), ("3600", 3600.0)],
)  # fmt: skip
def test_windows(text: str, seconds: float) -> None:
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["7x", "", "0d", "-1h", "d", "7d x"])
def test_bad_windows_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="window: expected a duration such as 7d"):
        parse_window(text)


# ----------------------------------------------------------------------------- from records
def record_with(state: str, placement: Placement | None, started: float | None) -> WorkloadRecord:
    workload = make_workload("w", namespace="ml", gpus=1, labels={"team": "red"})
    record = WorkloadRecord.new(1, "t", "Job", TimedWorkload(workload, 0.0, 2 * HOUR), 0.0)
    pod = next(iter(record.pods.values()))
    pod.state, pod.placement, pod.started = state, placement, started
    return record


@pytest.mark.parametrize(
    ("state", "finished", "end_h"),
    [
        pytest.param(POD_RUNNING, None, 5.0, id="running-until-now"),
        pytest.param(POD_SUCCEEDED, 3.0, 3.0, id="succeeded-at-workload-end"),
        pytest.param(POD_SUCCEEDED, None, 3.0, id="succeeded-start-plus-runtime"),
        pytest.param(POD_CANCELLED, 2.5, 2.5, id="cancelled-while-running"),
    ],
)
def test_pod_runs_from_records(state: str, finished: float | None, end_h: float) -> None:
    node = make_node("n1", gpus=4, model=H100, labels={"karpenter.sh/capacity-type": "spot"})
    record = record_with(state, Placement("n1", (0,)), 1 * HOUR)
    record.finished = None if finished is None else finished * HOUR
    (got,) = pod_runs([record], [node], 5 * HOUR)
    assert (got.start, got.end, got.gpus, got.gpu_model) == (HOUR, end_h * HOUR, 1.0, H100)
    assert got.capacity is CapacityType.SPOT
    assert got.labels["team"] == "red"
    assert (got.running, got.queue, got.tenant) == (state == POD_RUNNING, "default", "t")


def test_pods_never_placed_or_failed_hold_nothing() -> None:
    nodes = [make_node("n1", gpus=4, model=H100)]
    assert pod_runs([record_with("Pending", None, None)], nodes, HOUR) == []
    assert pod_runs([record_with(POD_FAILED, None, 0.0)], nodes, HOUR) == []
    # Cancelled while it waited (no placement), or a cancel not recorded as finished.
    assert pod_runs([record_with(POD_CANCELLED, None, None)], nodes, HOUR) == []
    assert pod_runs([record_with(POD_CANCELLED, Placement("n1", (0,)), 0.0)], nodes, HOUR) == []


def test_a_mig_slice_counts_its_compute_slices_of_seven() -> None:
    node = make_node("n1", gpus=1, model="A100", mig={0: ["3g.20gb", "4g.20gb"]})
    slot = node.gpus[0].mig_slices[0].slot
    record = record_with(POD_RUNNING, Placement("n1", mig_slices=((0, slot),)), 0.0)
    (got,) = pod_runs([record], [node], HOUR)
    assert got.gpus == pytest.approx(3 / 7)


def test_mean_utilisation_from_a_series_store() -> None:
    store = SeriesStore()
    ids = store.add_many(
        UTIL_METRIC, [{"namespace": "ml", "pod": "a-0"}, {"namespace": "ml", "pod": "b-0"}]
    )
    for step in range(8):
        store.append((step + 1) * 15.0, ids, np.array([20.0 if step % 2 else 40.0, 90.0]))
    got = mean_utilisation(store, Window(0.0, 8 * 15.0))
    assert got == {
        ("ml", "a-0"): pytest.approx(0.3, rel=1e-3),
        ("ml", "b-0"): pytest.approx(0.9, rel=1e-3),
    }
