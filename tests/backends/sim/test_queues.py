"""The simulated cluster with tenants: evictions that resume from the last checkpoint, gangs that
start whole, and the per-queue metrics of the QueueRecorder, on small runs whose numbers can be
worked out by hand (times in seconds, GPU amounts in GPUs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.backends.sim.queue_recorder import QueueRecorder
from gpufleet.backends.sim.results import TenancyStats
from gpufleet.backends.sim.run import run_workloads
from gpufleet.control.loop import run as run_loop
from gpufleet.model import GpuSharing, Node, Placement, SharingStrategy
from gpufleet.model.actions import Bind
from gpufleet.model.events import PodReady, WorkloadAdded
from gpufleet.model.queues import Queue
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.scheduling.admission import AdmissionConfig, cluster_capacity
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_cluster, make_node, make_queue, make_workload
from gpufleet.testing.fakes import make_core

HOUR = 3600.0


@dataclass
class Simulation:
    """A finished simulation: the world, the core, the tenant metrics, and when each pod ran."""

    sim: SimulatedCluster
    core: SchedulerCore
    stats: TenancyStats
    #: Pod key -> (start, end) of each run; end is None if it still ran at the end.
    runs: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)
    #: Pod keys seen ready (no longer awaited by their gang) while running.
    ready: set[str] = field(default_factory=set)


def simulate(
    nodes: Sequence[Node],
    workloads: Sequence[TimedWorkload],
    queues: Sequence[Queue] = (),
) -> Simulation:
    """Run ``workloads`` on ``nodes`` through a core with ``queues``, recording when every pod
    starts and stops."""
    core = make_core(nodes, queues)
    sim = SimulatedCluster(nodes, (), Mode.REPLAY, TargetWorkload((), ()), workloads=workloads)
    queue_recorder = sim.queue_recorder = QueueRecorder(
        sim.world, core.quotas.queues, cluster_capacity(nodes), entitlement_every=1.0
    )
    runs: dict[str, list[tuple[float, float | None]]] = {}
    ready: set[str] = set()
    # The loop calls back after the world waited: what runs now was decided at the time of the
    # previous call, when the core and the world had settled.
    settled_at = [sim.clock.now()]

    def observe() -> None:
        at = settled_at[0]
        running = sim.running
        for key in running:
            spans = runs.setdefault(key, [])
            if not spans or spans[-1][1] is not None:
                spans.append((at, None))
            owner = core.running.get(core.owner.get(key, ""))
            if owner is not None and key not in owner.unready:
                ready.add(key)
        for key, spans in runs.items():
            if key not in running and spans[-1][1] is None:
                spans[-1] = (spans[-1][0], at)
        settled_at[0] = sim.clock.now()

    run_loop(sim, core, observe)
    observe()
    return Simulation(sim, core, queue_recorder.result(sim.clock.now()), runs, ready)


def timed(workload: Workload, created: float, duration: float | None) -> TimedWorkload:
    return TimedWorkload(workload, created, duration)


def pod_keys(workload: Workload) -> list[str]:
    return [p.key for p in workload.pods]


# ----------------------------------------------------------------------------- evictions
# One node of 2 GPUs, one queue whose quota is the node. "low" (2 GPUs, 4 h of work) starts at
# 0; "high" (2 GPUs, 1 h) arrives at 2.75 h and preempts it. With checkpoints every 30 min, low
# keeps 2.5 h of work (loses 0.25 h x 2 GPUs) and resumes when high ends at 3.75 h: 1.5 h
# left, so it ends at 5.25 h. Without checkpoints it loses all 2.75 h and ends at 7.75 h.
@pytest.mark.parametrize(
    ("checkpoint", "low_ends", "lost_gpu_hours", "used_gpu_hours"),
    [
        pytest.param(1800.0, 5.25 * HOUR, 0.5, (2.75 + 1.5) * 2 + 2, id="checkpoint-every-30min"),
        pytest.param(None, 7.75 * HOUR, 5.5, (2.75 + 4) * 2 + 2, id="no-checkpoint"),
        pytest.param(
            2.75 * HOUR, 5.0 * HOUR, 0.0, (2.75 + 1.25) * 2 + 2, id="checkpoint-just-taken"
        ),
    ],
)
def test_preempted_workload_resumes_from_its_last_checkpoint(
    checkpoint: float | None, low_ends: float, lost_gpu_hours: float, used_gpu_hours: float
) -> None:
    low = make_workload("low", queue="team", gpus=2, priority=0, checkpoint=checkpoint)
    high = make_workload("high", queue="team", gpus=2, priority=10)
    done = simulate(
        [make_node("n", gpus=2)],
        [timed(low, 0, 4 * HOUR), timed(high, 2.75 * HOUR, 1 * HOUR)],
        [make_queue("team", gpus=2)],
    )
    (low_key,) = pod_keys(low)
    (high_key,) = pod_keys(high)
    assert done.runs[high_key] == [(2.75 * HOUR, 3.75 * HOUR)]
    assert done.runs[low_key] == [(0.0, 2.75 * HOUR), (3.75 * HOUR, low_ends)]
    team = done.stats.queues["team"]
    assert team.preemptions == 1
    assert done.stats.preemptions == 1
    assert team.gpu_hours_lost == pytest.approx(lost_gpu_hours, abs=1e-3)
    assert done.stats.gpu_hours_lost == pytest.approx(lost_gpu_hours, abs=1e-3)
    assert team.gpu_hours_used == pytest.approx(used_gpu_hours, abs=1e-3)
    assert team.completed == 2
    assert team.completion_time.max == pytest.approx(low_ends)
    assert done.core.preemptions == [(2.75 * HOUR, "default/high", "default/low")]
    assert done.sim.recorder.violations == []


def test_preempted_gang_loses_the_work_of_every_pod_and_counts_as_one_preemption() -> None:
    # A gang of 2 pods x 2 GPUs (2 h of work, checkpoints every hour) fills the 4-GPU node; a
    # 4-GPU job of higher priority arrives at 70 min: the gang keeps 1 h, loses 10 min on each
    # of its 4 GPUs, and resumes when the job ends at 130 min, for the hour left.
    train = make_workload("train", queue="team", pods=2, gpus=2, checkpoint=HOUR)
    urgent = make_workload("urgent", queue="team", gpus=4, priority=10)
    done = simulate(
        [make_node("n", gpus=4)],
        [timed(train, 0, 2 * HOUR), timed(urgent, 4200, HOUR)],
        [make_queue("team", gpus=4)],
    )
    for key in pod_keys(train):
        assert done.runs[key] == [(0.0, 4200.0), (7800.0, 11400.0)]
    assert done.runs[urgent.pods[0].key] == [(4200.0, 7800.0)]
    team = done.stats.queues["team"]
    assert team.preemptions == 1
    assert team.gpu_hours_lost == pytest.approx(4 * 600 / HOUR, abs=1e-3)
    assert done.stats.partial_gangs == 0
    assert team.completed == 2


# ----------------------------------------------------------------------------- gangs
def test_gang_starts_whole_is_ready_and_finishes_and_a_gang_that_cannot_fit_waits() -> None:
    # Two nodes of 2 GPUs. "three" (3 x 1 GPU) starts at 0 across both nodes, for 1000 s.
    # "pair" (2 x 2 GPUs) arrives at 10 and needs both nodes whole: it waits until 1000.
    # "huge" (3 x 2 GPUs) can never fit and waits to the end.
    three = make_workload("three", pods=3, gpus=1)
    pair = make_workload("pair", pods=2, gpus=2)
    huge = make_workload("huge", pods=3, gpus=2)
    done = simulate(
        make_cluster(2, gpus=2),
        [timed(three, 0, 1000), timed(pair, 10, 500), timed(huge, 20, 100)],
    )
    for key in pod_keys(three):
        assert done.runs[key] == [(0.0, 1000.0)]
        assert key in done.ready
    for key in pod_keys(pair):
        assert done.runs[key] == [(1000.0, 1500.0)]
        assert key in done.ready
    assert all(key not in done.runs for key in pod_keys(huge))
    assert set(done.sim.pending) == set(pod_keys(huge))
    assert done.core.evicting == {}  # ready in time: no gang was released
    default = done.stats.queues["default"]
    assert (default.workloads, default.admitted, default.completed) == (3, 2, 2)
    assert default.queueing_delay.max == 990.0
    assert done.stats.partial_gangs == 0
    assert done.stats.partial_gang_seconds == 0.0
    assert done.sim.recorder.violations == []


def test_gang_bound_only_in_part_is_counted_as_partial() -> None:
    # A scheduler that binds one pod of a gang of two is caught by the recorder.
    nodes = [make_node("n", gpus=2)]
    gang = make_workload("gang", pods=2, gpus=1)
    sim = SimulatedCluster(
        nodes, (), Mode.REPLAY, TargetWorkload((), ()), workloads=[timed(gang, 0, 100)]
    )
    queue_recorder = sim.queue_recorder = QueueRecorder(
        sim.world, {"default": Queue("default")}, cluster_capacity(nodes)
    )
    assert sim.poll_events() == [WorkloadAdded(gang)]
    first = gang.pods[0]
    sim.apply([Bind(first, Placement("n", (0,), 1000))])
    assert sim.poll_events() == [PodReady(first.key)]
    sim.wait()
    assert sim.clock.now() == 100.0
    sim.poll_events()  # the bound pod's work is done
    sim.wait()
    stats = queue_recorder.result(sim.clock.now())
    assert stats.partial_gangs == 1
    assert stats.partial_gang_seconds == 100.0


# ----------------------------------------------------------------------------- metrics
# Queues a and b, 2 GPUs of nominal quota each, on one 4-GPU node. At 0, a starts two 2-GPU
# jobs of 1000 s (one borrows b's idle quota). At s, b submits a 2-GPU job of 500 s: b is short
# of its nominal quota until one of a's jobs has run min_runtime (r = max(s, min_runtime)),
# when b reclaims by evicting it. b runs r..r+500; a's victim restarts from zero at r+500.
@pytest.mark.parametrize(
    ("min_runtime", "b_arrives", "reclaimed_at"),
    [
        pytest.param(120.0, 60.0, 120.0, id="short-until-victims-ripen"),
        pytest.param(300.0, 60.0, 300.0, id="longer-min-runtime-longer-spell"),
        pytest.param(120.0, 200.0, 200.0, id="reclaims-at-once"),
    ],
)
def test_queue_reclaims_lent_quota_within_the_minimum_run_time(
    min_runtime: float, b_arrives: float, reclaimed_at: float
) -> None:
    s, r = b_arrives, reclaimed_at
    a1, a2 = (replace(make_workload(n, queue="a", gpus=2), priority_class="batch") for n in "xy")
    b1 = replace(make_workload("b1", queue="b", gpus=2), priority_class="prod")
    result = run_workloads(
        [make_node("n", gpus=4)],
        [timed(a1, 0, 1000), timed(a2, 0, 1000), timed(b1, s, 500)],
        "bestfit",
        seed=0,
        queues={q.name: q for q in (make_queue("a", gpus=2), make_queue("b", gpus=2))},
        config=AdmissionConfig(min_runtime=min_runtime),
    )
    stats = result.tenancy
    a, b = stats.queues["a"], stats.queues["b"]
    assert b.longest_short_of_nominal == pytest.approx(r - s)
    assert b.short_of_nominal_spells == (1 if r > s else 0)
    assert b.longest_short_of_nominal <= min_runtime  # the bound the set-up implies
    assert a.short_of_nominal_spells == 0
    # GPU-hours: a holds 4 GPUs until r, 2 until r+500, 4 until 1000, 2 until r+1500.
    assert a.gpu_hours_used == pytest.approx((2000 + 2 * (r + 1000)) / HOUR, abs=1e-3)
    assert b.gpu_hours_used == pytest.approx(1000 / HOUR, abs=1e-3)
    # Entitled: a all 4 GPUs while b wants nothing (before s, and from r+500 to 1000), the
    # nominal 2 while b wants its own, then 2 (its one job left); b 2 from s to r+500.
    assert a.gpu_hours_entitled == pytest.approx((2 * s + 4000) / HOUR, abs=1e-3)
    assert b.gpu_hours_entitled == pytest.approx(2 * (r + 500 - s) / HOUR, abs=1e-3)
    assert (a.preemptions, b.preemptions) == (1, 0)
    assert a.gpu_hours_lost == pytest.approx(2 * r / HOUR, abs=1e-3)
    assert a.queueing_delay.max == 0.0
    assert b.queueing_delay.p50 == pytest.approx(r - s)
    by_class = stats.queueing_delay_by_priority_class
    assert by_class["batch"].count == 2
    assert by_class["batch"].max == 0.0
    assert by_class["prod"].p50 == pytest.approx(r - s)
    assert sorted([a.completion_time.max, b.completion_time.max]) == sorted([r + 1500, r + 500 - s])
    assert stats.partial_gangs == 0
    assert result.allocation_busy_pct == 100.0  # the node is full from 0 to the last arrival


def test_queueing_delay_and_completion_percentiles_by_queue_and_priority_class() -> None:
    # One GPU; five 100 s jobs arrive at 0: two "prod" (priority 10) run first, then three
    # "batch". Delays 0, 100 (prod) and 200, 300, 400 (batch); completions 100 ... 500.
    prod = [
        replace(make_workload(f"p{i}", gpus=1, priority=10), priority_class="prod")
        for i in range(2)
    ]
    batch = [replace(make_workload(f"b{i}", gpus=1), priority_class="batch") for i in range(3)]
    done = simulate([make_node("n", gpus=1)], [timed(w, 0, 100) for w in (*batch, *prod)])
    by_class = done.stats.queueing_delay_by_priority_class
    assert (by_class["prod"].p50, by_class["prod"].p95, by_class["prod"].max) == (50, 95, 100)
    assert (by_class["batch"].p50, by_class["batch"].p95) == (300, 390)
    queue = done.stats.queues["default"]
    assert (queue.queueing_delay.p50, queue.queueing_delay.p95) == (200, 380)
    assert queue.queueing_delay.mean == 200
    assert (queue.completion_time.p50, queue.completion_time.p95) == (300, 480)
    assert queue.completion_time.count == 5
    assert queue.gpu_hours_used == pytest.approx(500 / HOUR, abs=1e-3)
    assert done.stats.preemptions == 0


@pytest.mark.parametrize(
    ("jobs", "busy_pct"),
    [
        pytest.param([(0, 50, 1), (100, 10, 2)], 25.0, id="one-of-two-gpus-half-the-window"),
        pytest.param([(0, 100, 2), (100, 10, 2)], 100.0, id="full-all-the-window"),
        pytest.param([(0, 300, 1), (100, 10, 1)], 50.0, id="work-after-the-window-not-counted"),
    ],
)
def test_busy_allocation_is_the_mean_allocation_from_first_to_last_arrival(
    jobs: list[tuple[float, float, int]], busy_pct: float
) -> None:
    workloads = [
        timed(make_workload(f"j{i}", gpus=g), created, runtime)
        for i, (created, runtime, g) in enumerate(jobs)
    ]
    result = run_workloads([make_node("n", gpus=2)], workloads, "bestfit", seed=0)
    assert result.allocation_busy_pct == busy_pct


# ----------------------------------------------------------------------------- explain_at
# One node of 2 GPUs and 4 CPUs. Queue a may use 1 GPU (no borrowing); queue b has no quota of
# its own and borrows what a leaves. At 0: a1 (1 GPU, ends 1000) and a CPU-only job of b taking
# 3 CPUs (ends 500). At 10 a2 (1 GPU) waits for a's quota, and b2, b3 (1 GPU, 1 CPU) wait for
# CPUs. At 500 b2 starts (ends 600) and b3 waits for quota (b may borrow only the GPU
# a does not use); b3 starts at 600, a2 at 1000.
def explain_workloads() -> list[TimedWorkload]:
    def job(name: str, queue: str, gpus: int, cpu: int, runtime: float) -> Workload:
        return make_workload(name, queue=queue, gpus=gpus, cpu=cpu, runtime=runtime)

    return [
        timed(job("a1", "a", 1, 1000, 1000), 0, 1000),
        timed(job("cpu", "b", 0, 3000, 500), 0, 500),
        timed(job("a2", "a", 1, 1000, 1000), 10, 1000),
        timed(job("b2", "b", 1, 1000, 100), 10, 100),
        timed(job("b3", "b", 1, 1000, 100), 10, 100),
    ]


@pytest.mark.parametrize(
    ("explain_at", "expected"),
    [
        pytest.param(5.0, [], id="before-anyone-waits"),
        pytest.param(
            50.0,
            [
                ("default/a2", "a", 1, "quota", 1000.0),
                ("default/b2", "b", 1, "capacity", 500.0),
                ("default/b3", "b", 2, "capacity", None),
            ],
            id="quota-and-capacity",
        ),
        pytest.param(
            550.0,
            [("default/a2", "a", 1, "quota", 1000.0), ("default/b3", "b", 1, "quota", 600.0)],
            id="after-cpus-free",
        ),
        pytest.param(5000.0, [], id="after-the-end"),
    ],
)
def test_run_workloads_explains_why_workloads_wait_at_a_moment(
    explain_at: float, expected: list[tuple[str, str, int, str, float | None]]
) -> None:
    result = run_workloads(
        [make_node("n", gpus=2, cpu=4000)],
        explain_workloads(),
        "bestfit",
        seed=0,
        queues={q.name: q for q in (make_queue("a", gpus=1, borrow=0), make_queue("b"))},
        explain_at=explain_at,
    )
    assert result.explained_at == explain_at
    got = [
        (r.workload, r.queue, r.position, r.waiting_for, r.estimated_start)
        for r in result.waiting_at
    ]
    assert got == expected
    for report in result.waiting_at:
        if report.waiting_for == "quota":
            assert report.message.startswith(f"waiting for quota: queue {report.queue}:")
        else:
            assert "cpu" in report.message.lower()
    assert result.waiting_at_end == []
    assert result.replay.never_ran == 0


# ----------------------------------------------------------------------------- short of nominal
# One node of 2 GPUs and 4 CPUs; a queue is short of its nominal GPU quota while it waits for
# GPUs that would fit in the nominal quota it does not hold and another queue borrows.
@pytest.mark.parametrize(
    ("jobs", "longest", "spells"),
    [
        pytest.param(
            [("a", 2, 2000, 0, 1000), ("a", 0, 4000, 10, 100)],
            0.0,
            0,
            id="holds-its-whole-nominal-while-a-cpu-job-waits",
        ),
        pytest.param(
            [("b", 0, 4000, 0, 1000), ("a", 0, 1000, 10, 100)],
            0.0,
            0,
            id="waits-for-cpus-only",
        ),
        pytest.param(
            [("a", 1, 4000, 0, 1000), ("a", 1, 1000, 10, 100)],
            0.0,
            0,
            id="waits-for-a-gpu-within-nominal-that-nobody-borrows",
        ),
        pytest.param(
            [("b", 1, 4000, 0, 1000), ("a", 1, 1000, 10, 100)],
            110.0,
            1,
            id="waits-for-a-gpu-within-nominal-lent-out-until-reclaimed",
        ),
    ],
)
def test_short_of_nominal_counts_only_waiting_gpus_that_fit_the_nominal_left(
    jobs: list[tuple[str, int, int, float, float]], longest: float, spells: int
) -> None:
    workloads = [
        timed(make_workload(f"j{i}", queue=queue, gpus=g, cpu=cpu), created, runtime)
        for i, (queue, g, cpu, created, runtime) in enumerate(jobs)
    ]
    done = simulate(
        [make_node("n", gpus=2, cpu=4000)],
        workloads,
        [make_queue("a", gpus=2), make_queue("b")],
    )
    a = done.stats.queues["a"]
    assert (a.longest_short_of_nominal, a.short_of_nominal_spells) == (longest, spells)
    assert a.completed == sum(queue == "a" for queue, *_ in jobs)


def test_reports_charge_a_share_what_it_holds_on_its_device() -> None:
    """Issue 11 item 9 in the simulator's reports: a share of 250 milli-GPU and 10 GiB of a
    15 GiB T4 holds 0.667 of it, and the queue's GPU-hours count that."""
    sharing = GpuSharing(SharingStrategy.TIME_SLICING, 4)
    t4 = make_node("t4", gpus=1, model="T4", gpu_memory=15 * 1024, sharing=sharing)
    infer = make_workload("infer", queue="team", milli=250, gpu_memory=10 * 1024, units=1)
    done = simulate([t4], [timed(infer, 0, HOUR)], [make_queue("team", gpus=1)])
    assert done.stats.queues["team"].gpu_hours_used == pytest.approx(0.667, abs=1e-3)
