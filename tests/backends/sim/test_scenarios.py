"""Multi-tenant scenarios: the trace-based one on a small synthetic trace (no trace data needed),
the synthetic large-gang one, node sampling, the FIFO baseline, and deterministic runs."""

from __future__ import annotations

import functools
from dataclasses import asdict

import pytest

from gpufleet.backends.sim.results import PendingReport, TenancyStats
from gpufleet.backends.sim.run import run_workloads
from gpufleet.backends.sim.scenarios import (
    HIGH,
    TEAMS,
    TenantScenario,
    from_trace,
    large_gangs,
    sample_nodes,
)
from gpufleet.backends.sim.workloads import synthetic_workload
from gpufleet.io.cluster_traces.shapes import bundled_shape_table
from gpufleet.metrics.families import TURN_SECONDS
from gpufleet.model import Node, PodClass
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.priorities import PreemptionPolicy
from gpufleet.model.resources import GPU
from gpufleet.model.workload import TimedPod, TopologyMode, TopologyRequest
from gpufleet.testing.builders import make_cluster, make_node

HOURS = 24.0
NODES = 4  # of 8 GPUs: 32 GPUs


@functools.cache
def synthetic_trace() -> tuple[TimedPod, ...]:
    """Pods drawn from the bundled shape table, with creation and run times."""
    return tuple(synthetic_workload(bundled_shape_table(), 2000, seed=1, arrival_rate=0.1))


@functools.cache
def trace_scenario(seed: int) -> TenantScenario:
    return from_trace(synthetic_trace(), make_cluster(NODES, gpus=8), seed=seed, hours=HOURS)


def is_burst(scenario: TenantScenario, index: int) -> bool:
    return scenario.workloads[index].workload.priority_class == HIGH.name


# ----------------------------------------------------------------------------- from_trace
@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(3)])
def test_trace_scenario_has_team_queues_with_quotas_within_capacity(seed: int) -> None:
    scenario = trace_scenario(seed)
    assert list(scenario.queues) == [t.name for t in TEAMS]
    nominal = [q.nominal[GPU] for q in scenario.queues.values()]
    assert sum(nominal) <= NODES * 8 * 1000
    assert all(n > 0 and n % 1000 == 0 for n in nominal)
    assert {t.workload.queue for t in scenario.workloads} <= set(scenario.queues)
    for t in scenario.workloads:
        assert all(p.namespace == t.workload.queue for p in t.workload.pods)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(3)])
def test_trace_scenario_makes_gangs_only_of_multi_gpu_and_training_pods(seed: int) -> None:
    scenario = trace_scenario(seed)
    gangs = 0
    for t in scenario.workloads:
        workload = t.workload
        pods = workload.pods
        cls = pods[0].pod_class
        assert len({(p.cpu_milli, p.memory_mib, p.gpu) for p in pods}) == 1  # identical workers
        if cls is PodClass.MULTI_GPU:
            assert len(pods) in (2, 3, 4)
        elif len(pods) > 1:
            assert (cls, workload.queue) == (PodClass.ONE_GPU, "training")
            assert len(pods) in (2, 4, 8)
        gangs += len(pods) > 1
        assert workload.checkpoint_interval == (1800.0 if len(pods) > 1 else None)
    assert gangs > 0


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(3)])
def test_trace_scenario_has_a_high_priority_inference_burst_in_the_middle(seed: int) -> None:
    scenario = trace_scenario(seed)
    burst = [t for i, t in enumerate(scenario.workloads) if is_burst(scenario, i)]
    rest = [t for i, t in enumerate(scenario.workloads) if not is_burst(scenario, i)]
    span = max(t.created for t in rest)
    assert len(burst) == round(0.05 * NODES * 8)  # burst_gpus 5% of the GPUs, one GPU each
    for t in burst:
        workload = t.workload
        assert workload.queue == "inference"
        assert workload.priority == HIGH.value
        assert all(p.priority == HIGH.value for p in workload.pods)
        assert not workload.preemptible
        assert workload.gpu_milli == 1000
        assert span / 2 <= t.created <= span / 2 + 600.0  # the default burst window
    assert all(t.workload.priority < HIGH.value and t.workload.preemptible for t in rest)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(3)])
def test_trace_scenario_arrivals_span_about_the_hours_asked(seed: int) -> None:
    scenario = trace_scenario(seed)
    created = [t.created for t in scenario.workloads]
    assert min(created) == 0.0
    assert created == sorted(created)
    assert 0.85 * HOURS * 3600 <= max(created) <= 1.15 * HOURS * 3600


def test_trace_scenario_is_deterministic_for_a_seed() -> None:
    nodes = make_cluster(NODES, gpus=8)
    first = from_trace(synthetic_trace(), nodes, seed=5, hours=6)
    assert first == from_trace(synthetic_trace(), nodes, seed=5, hours=6)
    assert first.workloads != from_trace(synthetic_trace(), nodes, seed=6, hours=6).workloads


def test_trace_scenario_needs_pods_with_times() -> None:
    untimed = [TimedPod(t.pod) for t in synthetic_trace()[:10]]
    with pytest.raises(ValueError, match="with creation and run times"):
        from_trace(untimed, make_cluster(1, gpus=8))


# ----------------------------------------------------------------------------- fifo
@pytest.mark.parametrize("name", [pytest.param("trace"), pytest.param("large-gangs")])
def test_fifo_baseline_is_one_queue_without_priority_or_preemption(name: str) -> None:
    if name == "trace":
        scenario = trace_scenario(0)
    else:
        scenario = large_gangs(seed=0, racks=2, nodes_per_rack=2, hours=2)[1]
    fifo = scenario.fifo()
    assert fifo.queues == {}
    assert {t.workload.queue for t in fifo.workloads} == {"default"}
    for t in fifo.workloads:
        assert t.workload.priority == 0
        assert t.workload.preemption_policy is PreemptionPolicy.NEVER
        assert all(p.priority == 0 for p in t.workload.pods)
    assert len(fifo.workloads) == len(scenario.workloads)
    for plain, original in zip(fifo.workloads, scenario.workloads, strict=True):
        assert (plain.created, plain.duration) == (original.created, original.duration)
        assert plain.workload.key == original.workload.key
        assert plain.workload.priority_class == original.workload.priority_class
        assert [(p.key, p.gpu, p.cpu_milli) for p in plain.workload.pods] == [
            (p.key, p.gpu, p.cpu_milli) for p in original.workload.pods
        ]
    assert fifo.gpu_request_milli == scenario.gpu_request_milli


# ----------------------------------------------------------------------------- large_gangs
def test_large_gangs_labels_nodes_by_rack_and_keeps_gangs_in_one_rack() -> None:
    nodes, scenario = large_gangs(seed=0, racks=3, nodes_per_rack=4, hours=4)
    assert len(nodes) == 12
    by_rack: dict[str, list[Node]] = {}
    for node in nodes:
        by_rack.setdefault(node.labels[GFD_LABELS.RACK], []).append(node)
        assert node.gpu_count == 8
    assert {rack: len(members) for rack, members in by_rack.items()} == {
        "rack0": 4,
        "rack1": 4,
        "rack2": 4,
    }
    gangs = [t.workload for t in scenario.workloads if len(t.workload.pods) > 1]
    assert gangs
    for gang in gangs:
        assert gang.topology == TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.RACK)
        assert 2 <= len(gang.pods) <= 4
        assert all(p.gpu.count == 8 for p in gang.pods)
        assert gang.queue == "training"
        assert gang.checkpoint_interval == 1800.0
    singles = [t.workload for t in scenario.workloads if len(t.workload.pods) == 1]
    assert all(w.topology is None and w.queue == "research" for w in singles)
    assert all(w.pods[0].gpu.count in (1, 2, 4) for w in singles)
    assert sum(q.nominal[GPU] for q in scenario.queues.values()) == 12 * 8 * 1000


def test_large_gangs_is_deterministic_for_a_seed_and_differs_across_seeds() -> None:
    first = large_gangs(seed=3, racks=2, nodes_per_rack=3, hours=6)
    assert first == large_gangs(seed=3, racks=2, nodes_per_rack=3, hours=6)
    other = large_gangs(seed=4, racks=2, nodes_per_rack=3, hours=6)
    assert other[0] == first[0]  # the cluster does not depend on the seed
    assert other[1].workloads != first[1].workloads


# ----------------------------------------------------------------------------- sample_nodes
@pytest.mark.parametrize(
    ("fraction", "kept"),
    [
        pytest.param(1.0, 10, id="all"),
        pytest.param(0.5, 5, id="half"),
        pytest.param(0.26, 3, id="rounded"),
        pytest.param(0.01, 1, id="at-least-one"),
    ],
)
def test_sample_nodes_keeps_a_fraction_of_the_gpu_nodes(fraction: float, kept: int) -> None:
    nodes = [*make_cluster(10, gpus=4), make_node("cpu-only", gpus=0)]
    sample = sample_nodes(nodes, fraction, seed=2)
    assert len(sample) == kept
    assert all(n.gpu_count for n in sample)
    names = [n.name for n in nodes]
    assert sorted(sample, key=lambda n: names.index(n.name)) == sample  # original order kept
    assert sample == sample_nodes(nodes, fraction, seed=2)


@pytest.mark.parametrize(
    "fraction",
    [pytest.param(0.0, id="zero"), pytest.param(-0.5, id="negative"), pytest.param(1.5, id="over")],
)
def test_sample_nodes_rejects_a_fraction_outside_zero_to_one(fraction: float) -> None:
    with pytest.raises(ValueError, match="fraction must be in"):
        sample_nodes(make_cluster(2, gpus=1), fraction)


# ----------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("fifo", [pytest.param(False, id="queues"), pytest.param(True, id="fifo")])
def test_same_scenario_and_seed_run_twice_give_identical_results(fifo: bool) -> None:
    nodes, scenario = large_gangs(seed=1, racks=2, nodes_per_rack=3, hours=6)
    if fifo:
        scenario = scenario.fifo()

    def run() -> tuple[TenancyStats, dict[str, object], float, list[PendingReport]]:
        result = run_workloads(nodes, scenario.workloads, "bestfit", seed=7, queues=scenario.queues)
        replay = asdict(result.replay)
        del replay["seconds"]  # wall-clock time
        del replay["metrics"][TURN_SECONDS.name]  # wall-clock times too
        return result.tenancy, replay, result.allocation_busy_pct, result.waiting_at_end

    first = run()
    assert first == run()
    assert sum(q.completed for q in first[0].queues.values()) > 0


@pytest.mark.slow  # the trace scenario simulated twice
def test_trace_scenario_runs_with_whole_gangs_and_the_same_result_twice() -> None:
    nodes = make_cluster(NODES, gpus=8)
    scenario = from_trace(synthetic_trace(), nodes, seed=0, hours=4)

    def run() -> tuple[TenancyStats, float]:
        result = run_workloads(nodes, scenario.workloads, "bestfit", seed=0, queues=scenario.queues)
        return result.tenancy, result.allocation_busy_pct

    first = run()
    assert first == run()
    assert first[0].partial_gangs == 0
