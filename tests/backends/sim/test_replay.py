"""Time-based replay on small hand-made traces with known queueing delays."""

from __future__ import annotations

import pytest

from gpufleet.backends.sim.run import run_replay
from gpufleet.model.affinity import PlacementRules
from gpufleet.model.workload import TimedPod
from gpufleet.testing.builders import make_node, make_pod, pod_term


def timed(name: str, created: float, runtime: float | None, **pod: object) -> TimedPod:
    deleted = None if runtime is None else created + runtime
    return TimedPod(make_pod(name=name, **pod), created, deleted, created)  # type: ignore[arg-type]


def test_known_queueing_delays_on_one_gpu() -> None:
    # a holds the GPU 0-10; b waits 2->10 (8 s), runs 10-15; c and d (shares of 500) wait
    # until 15: c arrived at 3 (12 s), d at 4 (11 s). Trace times of scheduling are ignored:
    # run time = deletion - scheduled.
    workload = [
        timed("a", 0, 10, gpus=1),
        timed("b", 2, 5, gpus=1),
        timed("c", 3, 4, milli=500),
        timed("d", 4, 1, milli=500),
    ]
    run = run_replay([make_node("n", gpus=1)], workload, "bestfit", seed=0)
    assert run.queueing_delay_by_class["one-gpu"].max == 8
    assert sorted(run.delays) == [0, 8, 11, 12]
    assert run.queueing_delay.p50 == pytest.approx(9.5)
    assert run.queueing_delay.max == 12
    assert run.never_ran == 0
    assert run.simulated_seconds == 19
    assert run.bind_violations == 0


def test_pods_that_never_fit_are_reported_with_the_reason() -> None:
    workload = [timed("ok", 0, 5, gpus=1), timed("huge", 1, 5, gpus=4)]
    run = run_replay([make_node("n", gpus=2)], workload, "fgd", seed=0)
    assert run.never_ran == 1
    assert run.never_ran_examples[0]["pod"] == "default/huge"
    assert "can never fit" in run.never_ran_examples[0]["reason"]
    assert run.classes["multi-gpu"].failed == 1


def test_pods_without_a_deletion_time_run_to_the_end() -> None:
    workload = [timed("forever", 0, None, gpus=1), timed("later", 5, 1, gpus=1)]
    run = run_replay([make_node("n", gpus=1)], workload, "bestfit", seed=0)
    assert run.never_ran == 1
    assert run.timeline.allocated_gpu_pct[-1] == 100.0


def test_allocation_timeline_follows_arrivals_and_departures() -> None:
    workload = [timed("a", 0, 10, gpus=1), timed("b", 5, 10, milli=500)]
    run = run_replay([make_node("n", gpus=2)], workload, "bestfit", seed=0)
    assert run.timeline.time == [0.0, 5.0, 10.0, 15.0]
    assert run.timeline.allocated_gpu_pct == [50.0, 75.0, 25.0, 0.0]


def test_resample_keeps_shapes_and_run_times_with_unique_names() -> None:
    from gpufleet.backends.sim.workloads import resample

    workload = [timed("a", 0, 10, gpus=1), timed("b", 5, 3, milli=300)]
    drawn = resample(workload, 50, seed=4)
    assert len(drawn) == 50
    assert len({t.pod.name for t in drawn}) == 50
    assert {(t.pod.gpu, t.runtime) for t in drawn} == {(w.pod.gpu, w.runtime) for w in workload}
    assert drawn == resample(workload, 50, seed=4)


def test_replicas_with_required_anti_affinity_take_turns_on_two_nodes() -> None:
    rules = PlacementRules(pod_anti_affinity=(pod_term({"app": "web"}),))
    workload = [
        timed(f"web-{i}", 0, 10, gpus=1, labels={"app": "web"}, rules=rules) for i in range(3)
    ]
    run = run_replay([make_node(f"n{i}", gpus=8) for i in range(2)], workload, "bestfit", seed=0)
    assert sorted(run.delays) == [0, 0, 10]
    assert run.bind_violations == 0


def test_extended_resources_are_counted_against_what_nodes_advertise() -> None:
    workload = [timed(f"ib-{i}", 0, 10, extended={"rdma/hca": 1}) for i in range(3)]
    nodes = [make_node("ib", gpus=1, extended={"rdma/hca": 2}), make_node("plain", gpus=1)]
    run = run_replay(nodes, workload, "bestfit", seed=0)
    assert sorted(run.delays) == [0, 0, 10]
    assert run.bind_violations == 0
