"""Properties of the scheduling core over random clusters, queue trees, workloads and events.

A scenario is a cluster (1-6 nodes of 1-8 GPUs), a valid queue tree (1-4 queues, some under a
parent, GPU nominal quotas with optional borrowing and lending limits, children's nominal
quotas adding up to at most their parent's), workloads (1-3 pods of 0-4 GPUs or a share of
one, priorities 0-3, some non-preemptible, some that never preempt, some gangs with extra pods
beyond minMember) and operations: submit the next workload after a while, let time pass, jump
to the core's next timer, finish a running workload, lower a running one to preemptible at the
lowest priority (an idle policy's ``Preemptible``: ``WorkloadDemoted``).

After every settle the state is checked from what the fake cluster runs (its placements), not
from the core's own accounting, wherever that can be done:

* per queue (its subtree), GPUs held <= nominal + borrowing limit;
* Kueue's lending rule: in every group of sibling queues, the others hold at most what is left
  of their parent's amount after max(usage, nominal - lendingLimit) of each queue;
* non-preemptible work of a queue (its subtree) stays within its nominal quota;
* gangs run whole or not at all; no GPU holds more than 1000 milli-GPU;
* the core's quota usage, and its non-preemptible usage, equal what runs (nothing leaks, a
  demotion included);
* every workload submitted and not finished is running or pending again (nothing is lost);
* every preemption: the victim was preemptible, ran its minimum run time, had lower priority
  when in the preemptor's queue; the preemptor may preempt (not ``Never``) and runs once the
  victims are gone; no A evicts B and then B evicts A within the minimum run time;
* work conservation: no waiting workload (outside backoff) would pass its quota and place on
  what is free now, after the core settled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import MILLI_PER_GPU, Node
from gpufleet.model.actions import Action, Bind, Evict
from gpufleet.model.events import WorkloadDemoted
from gpufleet.model.priorities import LOWEST_PRIORITY, PreemptionPolicy
from gpufleet.model.queues import (
    BorrowWithinCohortPolicy,
    Queue,
    QueuePreemption,
    ReclaimPolicy,
    WithinQueuePolicy,
)
from gpufleet.model.resources import GPU
from gpufleet.model.workload import Workload
from gpufleet.scheduling.admission import DEFAULT_QUEUE, requested
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.engine import Unschedulable
from gpufleet.scheduling.quota import UNLIMITED
from gpufleet.scheduling.topology import place_workload
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

MIN_RUNTIME = 120.0
STEPS = (0.0, 5.0, 60.0, 130.0, 700.0)


# ----------------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class Op:
    kind: str  # "submit", "advance", "timer", "finish", "demote"
    wait: float = 0.0
    pick: int = 0


@dataclass(frozen=True)
class Scenario:
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    workloads: tuple[Workload, ...]
    ops: tuple[Op, ...]


@st.composite
def queue_trees(draw: st.DrawFn) -> tuple[Queue, ...]:
    count = draw(st.integers(1, 4))
    parents: list[int | None] = []
    nominal: list[int | None] = []
    for i in range(count):
        parents.append(draw(st.none() | st.integers(0, i - 1)) if i else None)
        nominal.append(draw(st.none() | st.integers(0, 8)))
    for i in reversed(range(count)):  # children come after parents: raise parents to fit
        kids = sum(nominal[k] or 0 for k in range(count) if parents[k] == i)
        if nominal[i] is not None:
            nominal[i] = max(nominal[i] or 0, kids)
    limit = st.none() | st.integers(0, 4)
    return tuple(
        make_queue(
            f"q{i}",
            nominal[i],
            parent=f"q{parent}" if parent is not None else None,
            borrow=draw(limit),
            lend=draw(limit),
            weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
            preemption=draw(preemption_policies),
        )
        for i, parent in enumerate(parents)
    )


#: Kueue's preemption policies, the default (gpufleet's) most often.
preemption_policies = st.one_of(
    st.just(QueuePreemption()),
    st.builds(
        QueuePreemption,
        st.sampled_from(WithinQueuePolicy),
        st.sampled_from(ReclaimPolicy),
        st.sampled_from(BorrowWithinCohortPolicy),
        st.none() | st.integers(0, 3),
    ),
)


def leaves(queues: Sequence[Queue]) -> list[str]:
    parents = {q.parent for q in queues}
    return [q.name for q in queues if q.name not in parents] + [DEFAULT_QUEUE]


@st.composite
def workloads(draw: st.DrawFn, name: str, queues: Sequence[str]) -> Workload:
    pods = draw(st.integers(1, 3))
    share = draw(st.sampled_from([None, None, None, None, 250, 500]))
    gpus = 1 if share is not None else draw(st.integers(0, 4))
    min_member = draw(st.integers(1, pods - 1)) if pods > 1 and draw(st.booleans()) else 0
    return make_workload(
        name,
        draw(st.sampled_from(queues)),
        pods=pods,
        gpus=gpus,
        priority=draw(st.integers(0, 3)),
        min_member=min_member,
        preemptible=draw(st.sampled_from([True, True, True, False])),
        never_preempt=draw(st.sampled_from([False, False, False, True])),
        runtime=draw(st.sampled_from([None, 50.0, 500.0, 5_000.0])),
        checkpoint=draw(st.sampled_from([None, 100.0])),
        milli=share,
    )


ops = st.one_of(
    st.builds(Op, st.just("submit"), st.sampled_from(STEPS)),
    st.builds(Op, st.just("advance"), st.sampled_from(STEPS)),
    st.builds(Op, st.just("timer")),
    st.builds(Op, st.just("finish"), pick=st.integers(0, 20)),
    st.builds(Op, st.just("demote"), pick=st.integers(0, 20)),
)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    sizes = draw(st.lists(st.integers(1, 8), min_size=1, max_size=6))
    models = [draw(st.sampled_from(["A100", "A100", "H100"])) for _ in sizes]
    nodes = tuple(
        make_node(f"n{i}", gpus=g, model=m)
        for i, (g, m) in enumerate(zip(sizes, models, strict=True))
    )
    queues = draw(queue_trees())
    targets = leaves(queues)
    count = draw(st.integers(1, 10))
    loads = tuple(draw(workloads(f"w{i}", targets)) for i in range(count))
    steps = draw(st.lists(ops, min_size=count, max_size=count + 12))
    return Scenario(nodes, queues, loads, tuple(steps))


# ----------------------------------------------------------------------------- the model
@dataclass
class World:
    """The scenario played against the core, and what the test knows independently of it."""

    scenario: Scenario
    core: SchedulerCore
    cluster: EchoCluster
    now: float = 0.0
    submitted: int = 0
    #: Admission unit (workload key, or pod key of a pod beyond minMember) -> its workload.
    units: dict[str, Workload] = field(default_factory=dict)
    #: Pod key -> admission unit key.
    unit_of: dict[str, str] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    checked_preemptions: int = 0

    def queue_of(self, pod_key: str) -> str:
        return self.units[self.unit_of[pod_key]].queue

    def policy(self, queue: str) -> QueuePreemption:
        found = [q for q in self.scenario.queues if q.name == queue]
        return found[0].preemption if found else QueuePreemption()

    def record(self, actions: Sequence[Action]) -> None:
        """Bind times of units, and the rules every eviction for a preemptor obeys."""
        evicted: set[str] = set()  # a gang's pods are evicted one action each
        for action in actions:
            unit = self.unit_of[action.pod.key]
            if isinstance(action, Bind):
                self.started.setdefault(unit, self.now)
            elif isinstance(action, Evict) and unit not in evicted:
                evicted.add(unit)
                if action.preemptor is not None:
                    victim = self.units[unit]
                    assert victim.preemptible, f"non-preemptible {unit} evicted"
                    assert unit in self.started, f"{unit} evicted but never started"
                    ran = self.now - self.started[unit]
                    assert ran >= MIN_RUNTIME, f"{unit} evicted after {ran}s"
                self.started.pop(unit, None)

    def step(self, op: Op) -> None:
        cluster = self.cluster
        if op.kind == "submit":
            self.now += op.wait
            if self.submitted < len(self.scenario.workloads):
                workload = self.scenario.workloads[self.submitted]
                self.submitted += 1
                self.record(cluster.submit(workload, now=self.now))
                return
        elif op.kind == "advance":
            self.now += op.wait
        elif op.kind == "timer":
            timer = self.core.next_timer()
            if math.isfinite(timer):
                self.now = max(self.now, timer)
        elif op.kind == "finish":
            running = sorted({self.unit_of[key] for key in cluster.running})
            if running:
                unit = running[op.pick % len(running)]
                self.finished.add(unit)
                keys = [k for k in cluster.running if self.unit_of[k] == unit]
                self.started.pop(unit, None)
                self.record(cluster.finish(*keys, now=self.now))
                return
        elif op.kind == "demote":
            running = sorted(self.core.running)
            if running:
                unit = running[op.pick % len(running)]
                before = self.units[unit]
                self.units[unit] = replace(before, priority=LOWEST_PRIORITY, preemptible=True)
                self.core.handle(WorkloadDemoted(unit))
        self.record(cluster.settle(now=self.now))


def play(scenario: Scenario, ready: bool = True) -> World:
    core = make_core(scenario.nodes, scenario.queues, min_runtime=MIN_RUNTIME)
    world = World(scenario, core, EchoCluster(core, ready=ready))
    for workload in scenario.workloads:
        world.units[workload.key] = workload
        for i, pod in enumerate(workload.pods):
            unit = workload.key if i < workload.gang_size else pod.key
            world.unit_of[pod.key] = unit
            if unit != workload.key:
                world.units[unit] = workload.extra(pod)
    for op in scenario.ops:
        world.step(op)
        check(world)
    return world


# ----------------------------------------------------------------------------- the checks
def check(world: World) -> None:
    cluster, core = world.cluster, world.core
    queues = {q.name: q for q in world.scenario.queues}
    queues.setdefault(DEFAULT_QUEUE, make_queue(DEFAULT_QUEUE))
    path: dict[str, list[str]] = {}
    for name in queues:
        chain: list[str] = []
        at: str | None = name
        while at is not None:
            chain.append(at)
            at = queues[at].parent
        path[name] = chain

    # What runs, from the fake cluster's placements only.
    held = dict.fromkeys(queues, 0)
    pinned = dict.fromkeys(queues, 0)
    devices: dict[tuple[str, int], int] = {}
    for key, placement in cluster.running.items():
        amount = placement.gpu_milli_per_device * len(placement.gpu_indices)
        unit = world.units[world.unit_of[key]]
        for name in path[unit.queue]:
            held[name] += amount
            if not unit.preemptible:
                pinned[name] += amount
        for index in placement.gpu_indices:
            spot = (placement.node, index)
            devices[spot] = devices.get(spot, 0) + placement.gpu_milli_per_device
    assert all(v <= MILLI_PER_GPU for v in devices.values()), f"GPU over-allocated: {devices}"

    # Gangs whole or not at all, their GPU pods on one GPU model (Kueue: one flavor).
    model_of = {n.name: n.gpu_model for n in world.scenario.nodes}
    for unit_key, unit in world.units.items():
        gang = [p.key for p in unit.pods[: unit.gang_size] if world.unit_of[p.key] == unit_key]
        on = [k in cluster.running for k in gang]
        assert all(on) or not any(on), f"{unit_key} runs in part: {gang} {on}"
        models = {
            model_of[cluster.running[k].node]
            for k in gang
            if k in cluster.running and cluster.running[k].gpu_indices
        }
        assert len(models) <= 1, f"{unit_key} runs on GPUs of models {models}"

    tree = core.quotas.tree
    if GPU in tree.key_index:
        j = tree.key_index[GPU]
        accounted = {name: int(tree.usage[tree.index[name], j]) for name in queues}
        assert accounted == held, "the core's quota usage differs from what runs"
        pinned_accounted = {
            name: int(core.quotas.pinned_usage[tree.index[name], j]) for name in queues
        }
        assert pinned_accounted == pinned, "the core's non-preemptible usage differs"
        check_limits(queues, held, pinned, sum(n.gpu_count for n in world.scenario.nodes))

    # Nothing lost: every unit submitted and not finished runs or waits.
    submitted = {w.key for w in world.scenario.workloads[: world.submitted]}
    for unit_key in submitted - world.finished:
        assert unit_key in core.running or unit_key in core.pending, f"{unit_key} was lost"
    assert not core.evicting, f"evictions still in flight after settle: {list(core.evicting)}"

    check_preemptions(world)
    check_work_conserving(world)


def check_limits(
    queues: dict[str, Queue], held: dict[str, int], pinned: dict[str, int], gpus: int
) -> None:
    capacity = gpus * MILLI_PER_GPU

    def nominal(q: Queue) -> int:
        """Its own nominal quota, or, where it names none, its children's (Kueue: a cohort's
        subtree quota)."""
        if GPU in q.nominal:
            return q.nominal[GPU]
        return sum(nominal(c) for c in queues.values() if c.parent == q.name)

    for q in queues.values():
        borrow = q.borrowing_limit.get(GPU)
        if borrow is not None:
            assert held[q.name] <= nominal(q) + borrow, f"{q.name} borrows beyond its limit"
        # Non-preemptible work stays within nominal, on every level (KAI: within deserved).
        assert pinned[q.name] <= nominal(q), f"non-preemptible work of {q.name} beyond nominal"
    groups: dict[str | None, list[Queue]] = {}
    for q in queues.values():
        groups.setdefault(q.parent, []).append(q)
    for parent, members in groups.items():
        cap = capacity
        if parent is not None:
            borrow = queues[parent].borrowing_limit.get(GPU, UNLIMITED)
            cap = min(capacity, nominal(queues[parent]) + borrow)
        for q in members:
            lend = q.lending_limit.get(GPU)
            if lend is None:
                continue
            kept = max(held[q.name], nominal(q) - lend)
            others = sum(held[s.name] for s in members if s is not q)
            assert others <= max(0, cap - kept), (
                f"{q.name} lends beyond its lending limit: others hold {others}, "
                f"it keeps {kept} of {cap}"
            )


def check_preemptions(world: World) -> None:
    core = world.core
    new = core.preemptions[world.checked_preemptions :]
    world.checked_preemptions = len(core.preemptions)
    for _, preemptor_key, victim_key in new:
        preemptor, victim = world.units[preemptor_key], world.units[victim_key]
        assert preemptor.preemption_policy is not PreemptionPolicy.NEVER
        assert victim.preemptible
        policy = world.policy(preemptor.queue)
        if victim.queue == preemptor.queue:
            assert policy.within_queue is not WithinQueuePolicy.NEVER
            if policy.within_queue is WithinQueuePolicy.LOWER_PRIORITY:
                assert victim.priority < preemptor.priority, f"{preemptor_key} -> {victim_key}"
            else:
                assert victim.priority <= preemptor.priority, f"{preemptor_key} -> {victim_key}"
        else:
            assert policy.reclaim_within_cohort is not ReclaimPolicy.NEVER
            if policy.reclaim_within_cohort is ReclaimPolicy.LOWER_PRIORITY:
                assert victim.priority < preemptor.priority, f"{preemptor_key} -> {victim_key}"
        # Its victims are gone (the fake evicts at once): the preemptor runs, whole.
        gang = preemptor.pods[: preemptor.gang_size]
        assert all(p.key in world.cluster.running for p in gang), (
            f"{preemptor_key} preempted {victim_key} but does not run"
        )
    seen: dict[tuple[str, str], float] = {}
    for at, preemptor_key, victim_key in core.preemptions:
        back = seen.get((victim_key, preemptor_key))
        assert back is None or at - back >= MIN_RUNTIME, (
            f"{victim_key} and {preemptor_key} preempt each other within the minimum run time"
        )
        seen[(preemptor_key, victim_key)] = at


def check_work_conserving(world: World) -> None:
    """After a settle, no waiting workload would pass quota and place now: else the core
    missed it (parked and never woken, or stuck behind another)."""
    core = world.core
    if core.nominated:
        return  # rows are held for preemptors: the next cycles may still admit them
    table = core.table
    for pending in core.pending.workloads():
        workload = pending.workload
        if pending.not_before > world.now:
            continue  # backoff
        request = requested(workload.pods[: workload.gang_size])
        if not core.quotas.check(workload, request).admits:
            continue
        mark = table.begin_trial()
        try:
            placed = place_workload(core.engine, workload, core.state.holds.restrict_for(workload))
            fits = (
                not isinstance(placed, Unschedulable)
                and core.quotas.check(
                    workload,
                    core.state.requests.usage_of(placed),
                ).admits
            )
        finally:
            table.rollback(mark)
        assert not fits, f"{workload.key} waits ({pending.reason}) though it fits now"


# ----------------------------------------------------------------------------- properties
@pytest.mark.slow  # 1,500 generated scenarios
@settings(max_examples=1500, deadline=None)
@given(scenarios())
def test_invariants_hold_after_every_settle(scenario: Scenario) -> None:
    play(scenario)


@pytest.mark.slow  # 400 generated scenarios
@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_invariants_hold_when_gangs_never_get_ready(scenario: Scenario) -> None:
    world = play(scenario, ready=False)
    for _ in range(3):  # timeouts, backoffs and retries
        world.step(Op("timer"))
        check(world)


def test_model_helpers_see_gangs_and_extras() -> None:
    """The scenario model maps extra pods to units of their own (a sanity check of the test)."""
    job = make_workload("job", pods=3, min_member=2)
    scenario = Scenario((make_node("n", gpus=4),), (), (job,), (Op("submit"),))
    world = play(scenario)
    assert world.unit_of == {
        "default/job-0": "default/job",
        "default/job-1": "default/job",
        "default/job-2": "default/job-2",
    }
    assert set(world.started) == {"default/job", "default/job-2"}
