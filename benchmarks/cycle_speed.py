"""Time of one scheduling cycle at scale: 2,000 pending workloads, 50 queues, 5,000 nodes.

    python benchmarks/cycle_speed.py [--repeats 5] [--policy default] [--seed 0]

Issue 3's target: one scheduling cycle with 2,000 pending workloads across 50 queues on a
5,000-node cluster in at most 100 ms (median over repeats).

The set-up is synthetic and deterministic from ``--seed`` (no trace needed):

* 5,000 nodes of 8 GPUs (H100, A100, L40S, A10, as in benchmarks/speed.py) in racks of 16
  nodes of one kind, racks spread over 4 zones, H100 nodes paired in NVLink domains; the
  nodes carry the GPU Feature Discovery labels and the topology labels.
* 50 team queues under 5 org queues, with GPU nominal quotas adding up to the cluster's GPUs,
  some borrowing and lending limits, and weights of 1 to 4 (:func:`queue_tree`).
* A busy cluster, filled through the core (:func:`fill_cluster`): running workloads
  (whole-node pods, gangs of 8-GPU pods, 1 to 4-GPU pods, GPU shares); about half the teams
  (*lenders*) use 60% of their nominal quota and keep a quarter of it idle for themselves, the
  others (*borrowers*) fill up to what their quota allows, some beyond their nominal; about
  89% of the GPUs end up allocated.
* Then 2,000 pending workloads over the 50 queues: 1-GPU pods, GPU shares, 2 to 8-GPU pods,
  gangs of 2 to 8 pods (some inside one rack, NVLink domain or zone), some pinned to a GPU
  model, priorities 0 to 1000; most cannot start, so the cycle checks quotas, tries placements,
  searches for victims (over at most ``max_victim_candidates`` each; at most
  ``max_preemption_searches`` searches a cycle, those that find no victims included: the
  workloads whose search is put off try again next cycle) and plans backfill reservations.

Cases, each one ``core.cycle(now)`` on a fresh deep copy of the state, timed alone:

1. **cold**: the 2,000 just arrived; each queue's groups are tried until one is admitted (the
   worst case).
2. **pod finished**: after the cold cycle and its follow-ups have settled (everything that can
   run runs, the rest is parked), one running workload ends: its capacity is freed and the
   groups that could use it are woken. The steady state of a busy cluster.
3. **arrival**: on the settled state, one new workload arrives.

Outcomes can differ slightly between runs with different ``PYTHONHASHSEED`` (the core
iterates some sets of names); the .json records it.

Writes benchmarks/results/cycle_speed.md and .json.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import platform
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, TypeVar
from unittest.mock import patch

import numpy as np

if __package__ in (None, ""):
    # Run as `python benchmarks/cycle_speed.py`: make the repository root importable so that
    # the helpers of benchmarks/speed.py are shared, not copied.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gpufleet.scheduling.preemption.preemptor as preemptor_module
from benchmarks.speed import NODE_KINDS, cpu_model, host_reference
from gpufleet.model import Node
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import PodDeleted, WorkloadAdded
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.queues import Queue
from gpufleet.model.resources import GPU
from gpufleet.model.workload import TopologyMode, TopologyRequest, Workload
from gpufleet.report.summary import write_json
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.preemption.victims import find_victims
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.target import typical_shapes
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster

T = TypeVar("T")
RESULTS = Path(__file__).resolve().parent / "results"
TARGET_MS = 100.0
RACK_NODES = 16
ZONES = 4
#: Workloads run from t=0; the pending ones arrive at ARRIVAL, when all running ones are past
#: the minimum run time (so all are candidate victims).
ARRIVAL = 3600.0
#: CPU (milli) and memory (MiB) a pod asks per whole GPU; the 8-GPU pod fits every node kind.
CPU_PER_GPU = 6_000
MEM_PER_GPU = 24 * 1024
#: Lenders run work on this share of their nominal quota and lend at most LENDER_LENDS of it:
#: the rest (a quarter) is kept for them, idle, so the cluster is not quite full.
LENDER_USES = 0.6
LENDER_LENDS = 0.15
RUNTIMES = (1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0, None)
CHECKPOINTS = (600.0, 1800.0, None)
#: GPU models a fifth of the workloads are pinned to.
MODEL_CHOICES = (("H100",), ("H100", "A100"), ("L40S",))
PRIORITIES = (0, 100, 1000)


# ----------------------------------------------------------------------------- set-up
def cycle_cluster(count: int, rng: np.random.Generator) -> list[Node]:
    """``count`` 8-GPU nodes in racks of one kind (kinds drawn per rack), racks round-robin
    over zones, H100 nodes in NVLink pairs."""
    racks = -(-count // RACK_NODES)
    kinds = rng.integers(0, len(NODE_KINDS), racks)
    nodes = []
    for i in range(count):
        rack = i // RACK_NODES
        model, gpu_memory, cpu, memory = NODE_KINDS[int(kinds[rack])]
        labels = {GFD_LABELS.RACK: f"rack-{rack:03d}", GFD_LABELS.ZONE: f"zone-{rack % ZONES}"}
        if model == "H100":
            labels[GFD_LABELS.NVLINK_DOMAIN] = f"nvl-{i // 2:04d}"
        nodes.append(
            make_node(
                f"node-{i:05d}",
                cpu=cpu,
                memory=memory,
                gpus=8,
                model=model,
                gpu_memory=gpu_memory,
                labels=labels,
            )
        )
    return nodes


def queue_tree(total_gpus: int, orgs: int, teams: int, rng: np.random.Generator) -> list[Queue]:
    """Org queues sharing ``total_gpus`` of nominal GPU quota (lending none of it to other
    orgs), each with ``teams`` team queues sharing the org's. About half the teams are
    *lenders*: they lend at most ``LENDER_LENDS`` of their nominal quota (the rest is kept for
    them even when idle); the others are *borrowers*: they lend all of theirs and may borrow,
    half of them up to half their nominal, half without limit."""
    org_gpus = np.floor(rng.dirichlet(np.full(orgs, 4.0)) * total_gpus).astype(int)
    queues: list[Queue] = []
    for o in range(orgs):
        org = f"org{o}"
        nominal = int(org_gpus[o])
        weight = float(rng.choice([1, 2]))
        queues.append(make_queue(org, nominal, lend=0, weight=weight))
        team_gpus = np.floor(rng.dirichlet(np.full(teams, 2.0)) * nominal).astype(int)
        for t in range(teams):
            name = f"{org}-team{t:02d}"
            gpus = int(team_gpus[t])
            lender = rng.random() < 0.5
            queues.append(
                make_queue(
                    name,
                    gpus,
                    parent=org,
                    borrow=None if lender or rng.random() < 0.5 else round(gpus * 0.5),
                    lend=gpus * LENDER_LENDS if lender else None,
                    weight=float(rng.choice([1, 1, 2, 4])),
                    namespaces=(name,),
                )
            )
    return queues


def is_lender(queue: Queue) -> bool:
    return GPU in queue.lending_limit and queue.parent is not None


def leaves(queues: Sequence[Queue]) -> list[Queue]:
    parents = {q.parent for q in queues}
    return [q for q in queues if q.name not in parents]


@dataclass
class _Draw:
    """Names and the random source shared by the workload generators."""

    rng: np.random.Generator
    prefix: str
    count: int = 0

    def name(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count:05d}"

    def pick(self, options: Sequence[T], p: Sequence[float] | None = None) -> T:
        return options[int(self.rng.choice(len(options), p=p))]


def _workload(draw: _Draw, queue: Queue, kind: str, priority: int) -> Workload:
    """One workload of ``kind``: "share", "one", "multi", "node" or "gang"."""
    rng = draw.rng
    runtime = draw.pick(RUNTIMES)
    checkpoint = draw.pick(CHECKPOINTS)
    preemptible = rng.random() > 0.1
    never_preempt = rng.random() < 0.1
    models = draw.pick(MODEL_CHOICES) if rng.random() < 0.2 else None
    name = draw.name()
    pods, gpus, milli, topology = 1, 1, None, None
    if kind == "share":
        milli, models = draw.pick((250, 500)), None
    elif kind in ("one", "multi", "node"):
        gpus = {"one": 1, "node": 8}.get(kind) or draw.pick((2, 4))
    else:
        pods = int(rng.integers(2, 9))
        gpus = draw.pick((1, 2, 4, 8), p=(0.1, 0.1, 0.3, 0.5))
        roll = rng.random()
        if roll < 0.1 and pods == 2 and gpus == 8:
            topology = TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.NVLINK_DOMAIN)
            models = ("H100",)
        elif roll < 0.25 and pods * gpus <= RACK_NODES * 8:
            topology = TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.RACK)
        elif roll < 0.4:
            topology = TopologyRequest(TopologyMode.PREFERRED, GFD_LABELS.ZONE)
    shared = milli is not None
    return make_workload(
        name,
        queue.name,
        pods,
        gpus,
        priority,
        preemptible=preemptible,
        never_preempt=never_preempt,
        runtime=runtime,
        checkpoint=checkpoint,
        topology=topology,
        namespace=queue.name,
        cpu=2_000 if shared else CPU_PER_GPU * gpus,
        memory=8 * 1024 if shared else MEM_PER_GPU * gpus,
        milli=milli,
        models=models,
    )


def _gpus_of(workload: Workload) -> float:
    return workload.gpu_milli / 1000


def load(draw: _Draw, queue: Queue, gpus: float) -> list[Workload]:
    """Running work for ``queue``: workloads of mixed kinds adding up to about ``gpus``."""
    kinds = ("share", "one", "multi", "node", "gang")
    out: list[Workload] = []
    total = 0.0
    while gpus - total >= 0.5:
        kind = draw.pick(kinds, p=(0.15, 0.2, 0.15, 0.3, 0.2))
        workload = _workload(draw, queue, kind, draw.pick(PRIORITIES, p=(0.4, 0.4, 0.2)))
        if total + _gpus_of(workload) <= gpus:
            out.append(workload)
            total += _gpus_of(workload)
    return out


def fill_cluster(
    core: SchedulerCore, cluster: EchoCluster, queues: Sequence[Queue], rng: np.random.Generator
) -> int:
    """Admit running work through the core at t=0: lenders up to LENDER_USES of their nominal
    quota, then borrowers in rounds, each round up to half of what their quota lets them take
    now (their own nominal and what lenders and other orgs lend), until they are full. What
    does not get in is withdrawn; returns how many workloads were."""
    draw = _Draw(rng, "run-")
    teams = leaves(queues)
    tree = core.quotas.tree
    gpu = tree.key_index[GPU]

    def admit(batch: list[Workload]) -> int:
        cluster.submit(*batch, now=0.0)
        stuck = [p.workload for p in core.pending.workloads()]
        for workload in stuck:
            core.handle_all(PodDeleted(p.key) for p in workload.pods)
        return len(stuck)

    withdrawn = admit(
        [
            w
            for q in teams
            if is_lender(q)
            for w in load(draw, q, LENDER_USES * q.nominal[GPU] / 1000)
        ]
    )
    borrowers = [q for q in teams if not is_lender(q)]
    while True:
        room = {
            q.name: (tree.available(q.name)[gpu] - tree.usage[tree.index[q.name], gpu]) / 1000
            for q in borrowers
        }
        # Borrowers of one org compete for what it lends: each asks for its part of half of it.
        sharing = Counter(q.parent for q in borrowers if room[q.name] >= 1.0)
        batch = [
            w
            for q in borrowers
            if room[q.name] >= 1.0
            for w in load(draw, q, max(room[q.name] / (2 * sharing[q.parent]), 1.0))
        ]
        if not batch:
            return withdrawn
        before = len(core.running)
        withdrawn += admit(batch)
        if len(core.running) == before:
            return withdrawn


def pending_load(
    queues: Sequence[Queue], count: int, rng: np.random.Generator, prefix: str = "job-"
) -> list[Workload]:
    """``count`` workloads over the team queues (busier queues get more), mixed kinds."""
    teams = leaves(queues)
    share = rng.dirichlet(np.full(len(teams), 1.5))
    per_queue = rng.multinomial(count, share)
    draw = _Draw(rng, prefix)
    kinds = ("one", "share", "multi", "node", "gang")
    out: list[Workload] = []
    for q, n in zip(teams, per_queue, strict=True):
        for _ in range(int(n)):
            kind = draw.pick(kinds, p=(0.3, 0.15, 0.15, 0.1, 0.3))
            priority = draw.pick(PRIORITIES, p=(0.3, 0.4, 0.3))
            out.append(_workload(draw, q, kind, priority))
    return out


@dataclass
class Setup:
    """A busy cluster with workloads waiting, ready for the next cycle at ``now``."""

    core: SchedulerCore
    cluster: EchoCluster
    queues: list[Queue]
    pending: list[Workload]
    now: float
    #: Running workloads that did not get in while filling up, withdrawn before the pending
    #: ones arrived (so that exactly the intended ones wait).
    withdrawn: int = 0
    #: Seconds to build it.
    build_seconds: float = 0.0
    spare: list[Workload] = field(default_factory=list)


def build_setup(
    nodes: int = 5000,
    orgs: int = 5,
    teams: int = 10,
    pending: int = 2000,
    seed: int = 0,
    policy: str = "default",
) -> Setup:
    """The benchmark's state (see the module docstring): the cluster filled through the core
    at t=0 (:func:`fill_cluster`), then ``pending`` workloads added at t=ARRIVAL, not yet
    tried."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    node_list = cycle_cluster(nodes, rng)
    queues = queue_tree(8 * nodes, orgs, teams, rng)
    waiting = pending_load(queues, pending, rng)
    spare = pending_load(queues, 20, np.random.default_rng([seed, 1]), prefix="late-")
    # The policy's expected shapes: those of the pending work (running work is drawn alike).
    table = NodeTable(node_list)
    target = typical_shapes(p for w in (*waiting, *spare) for p in w.pods)
    core = SchedulerCore(
        table,
        make_policy(policy, table, PolicyContext(target, seed)),
        queues={q.name: q for q in queues},
        config=AdmissionConfig(),
    )
    cluster = EchoCluster(core)
    withdrawn = fill_cluster(core, cluster, queues, rng)
    cluster.settle(now=ARRIVAL)
    core.handle_all(WorkloadAdded(w) for w in waiting)
    return Setup(
        core,
        cluster,
        queues,
        waiting,
        ARRIVAL,
        withdrawn,
        time.perf_counter() - started,
        spare,
    )


def allocated_fraction(core: SchedulerCore) -> float:
    """Share of the cluster's GPU capacity (milli-GPU) held by running work."""
    return core.table.allocated_gpu_milli() / core.table.total_gpu_milli()


def borrowing_queues(core: SchedulerCore, queues: Sequence[Queue]) -> list[str]:
    team_names = {q.name for q in leaves(queues)}
    return sorted(team_names & core.quotas.borrowing_queues())


# ----------------------------------------------------------------------------- measuring
@dataclass(frozen=True)
class CycleResult:
    """One timed cycle and what it did."""

    seconds: float
    #: Workloads bound, workloads that started a preemption, victims evicted.
    admitted: int
    preemptors: int
    victims: int
    #: Groups parked after the cycle (for capacity, for quota) and pods told why they wait.
    parked_capacity: int
    parked_quota: int
    told: int
    #: Workloads tried (heads of their groups) and victim searches run in this cycle.
    tried: int
    searches: int
    pending_before: int

    def summary(self) -> dict[str, object]:
        return {
            "ms": round(self.seconds * 1000, 2),
            "admitted": self.admitted,
            "preemptors": self.preemptors,
            "victims": self.victims,
            "tried": self.tried,
            "victim_searches": self.searches,
            "parked_capacity": self.parked_capacity,
            "parked_quota": self.parked_quota,
            "pods_told": self.told,
            "pending_before": self.pending_before,
        }


def timed_cycle(core: SchedulerCore, now: float) -> tuple[CycleResult, list[Action]]:
    """Run one cycle at ``now``, timing it alone (garbage collected just before). Victim
    searches are counted by wrapping the preemption plugin's ``find_victims`` for the cycle
    (a counter increment per search, which takes milliseconds)."""
    before = {p.workload.key: p.attempts for p in core.pending.workloads()}
    searches = 0

    def counted(*args: Any, **kwargs: Any) -> list[RunningWorkload] | None:
        nonlocal searches
        searches += 1
        return find_victims(*args, **kwargs)

    with patch.object(preemptor_module, "find_victims", counted):
        gc.collect()
        started = time.perf_counter()
        actions = core.cycle(now)
        seconds = time.perf_counter() - started
    groups = core.pending.groups()
    after = {p.workload.key: p.attempts for p in core.pending.workloads()}
    admitted = {core.owner.get(a.pod.key, a.pod.key) for a in actions if isinstance(a, Bind)}
    evicts = [a for a in actions if isinstance(a, Evict)]
    result = CycleResult(
        seconds,
        admitted=len(admitted),
        preemptors=len({a.preemptor for a in evicts if a.preemptor}),
        victims=len({core.owner.get(a.pod.key, a.pod.key) for a in evicts}),
        parked_capacity=sum(g.parked == Parked.CAPACITY for g in groups),
        parked_quota=sum(g.parked == Parked.QUOTA for g in groups),
        told=sum(isinstance(a, MarkUnschedulable) for a in actions),
        tried=sum(n - before.get(k, 0) for k, n in after.items()) + len(admitted & set(before)),
        searches=searches,
        pending_before=len(before),
    )
    return result, actions


def settle_after(setup: Setup) -> Setup:
    """A copy of ``setup`` after its cold cycle and every follow-up cycle (evictions carried
    out, preemptors admitted), and again a minute later: everything that can run now runs,
    the rest is parked."""
    settled = clone(setup)
    settled.cluster.settle(now=setup.now)
    settled.now = setup.now + 60.0
    settled.cluster.settle(now=settled.now)
    return settled


def clone(setup: Setup) -> Setup:
    """A deep copy (by pickling: about twice as fast as copy.deepcopy here)."""
    copied: Setup = pickle.loads(pickle.dumps(setup, pickle.HIGHEST_PROTOCOL))
    return copied


def finish_workload(setup: Setup, key: str) -> None:
    """The pods of running workload ``key`` end: the core is told (capacity freed, parked
    groups woken), no cycle is run."""
    running = setup.core.running[key]
    for pod_key in running.bound:
        setup.cluster.running.pop(pod_key, None)
    setup.core.handle_all(PodDeleted(k) for k in list(running.bound))


@dataclass
class CaseRuns:
    name: str
    description: str
    results: list[CycleResult] = field(default_factory=list)
    event_seconds: list[float] = field(default_factory=list)

    def ms(self) -> list[float]:
        return [r.seconds * 1000 for r in self.results]


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q))


@dataclass
class Steady:
    """The settled state the steady-state cases start from, and what reaching it took."""

    seconds: float
    pending: int
    running: int
    allocated: float
    preemptions: int


def run_cases(base: Setup, repeats: int) -> tuple[list[CaseRuns], Steady]:
    """The three cases (module docstring), ``repeats`` each, on deep copies of ``base``."""
    cold = CaseRuns("cold", "the 2,000 just arrived, none tried yet")
    blob = pickle.dumps(base, pickle.HIGHEST_PROTOCOL)
    for _ in range(repeats):
        state: Setup = pickle.loads(blob)
        cold.results.append(timed_cycle(state.core, state.now)[0])
    print(f"cold: {median(cold.ms()):.1f} ms; settling ...", flush=True)
    started = time.perf_counter()
    settled = settle_after(base)
    steady = Steady(
        time.perf_counter() - started,
        len(settled.core.pending),
        len(settled.core.running),
        allocated_fraction(settled.core),
        len(settled.core.preemptions),
    )
    blob = pickle.dumps(settled, pickle.HIGHEST_PROTOCOL)
    finished = CaseRuns("pod finished", "one running workload ends on the settled cluster")
    arrival = CaseRuns("arrival", "one new workload arrives on the settled cluster")
    for i in range(repeats):
        state = pickle.loads(blob)
        keys = sorted(state.core.running)
        key = keys[int(np.random.default_rng([i, 7]).integers(len(keys)))]
        started = time.perf_counter()
        finish_workload(state, key)
        finished.event_seconds.append(time.perf_counter() - started)
        finished.results.append(timed_cycle(state.core, state.now + 1.0)[0])
        state = pickle.loads(blob)
        late = state.spare[i % len(state.spare)]
        started = time.perf_counter()
        state.core.handle(WorkloadAdded(late))
        arrival.event_seconds.append(time.perf_counter() - started)
        arrival.results.append(timed_cycle(state.core, state.now + 1.0)[0])
    return [cold, finished, arrival], steady


# ----------------------------------------------------------------------------- report
def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--policy", default="default")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    machine = f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    before = host_reference()
    base = build_setup(seed=args.seed, policy=args.policy)
    core = base.core
    n_nodes = core.table.size
    gpus = core.table.total_gpu_milli() // 1000
    allocated = allocated_fraction(core)
    borrowing = borrowing_queues(core, base.queues)
    teams = leaves(base.queues)
    print(
        f"set-up: {n_nodes} nodes, {gpus} GPUs, {allocated:.1%} allocated, "
        f"{len(core.running)} running, {len(core.pending)} pending, built in "
        f"{base.build_seconds:.1f} s",
        flush=True,
    )
    cases, steady = run_cases(base, args.repeats)
    after = host_reference()

    command = f"python benchmarks/cycle_speed.py --repeats {args.repeats}"
    if args.policy != "default" or args.seed:
        command += f" --policy {args.policy} --seed {args.seed}"
    kinds = pending_kinds(base.pending)
    results: dict[str, object] = {}
    report: dict[str, object] = {
        "machine": machine,
        "command": command,
        "target_ms": TARGET_MS,
        "setup": {
            "nodes": n_nodes,
            "gpus": gpus,
            "org_queues": len(base.queues) - len(teams),
            "team_queues": len(teams),
            "allocated_gpu_fraction": round(allocated, 4),
            "running_workloads": len(core.running),
            "running_pods": len(core.owner),
            "withdrawn_while_filling": base.withdrawn,
            "borrowing_team_queues": borrowing,
            "pending_workloads": len(base.pending),
            "pending_groups": len(core.pending.groups()),
            "pending_kinds": kinds,
            "policy": args.policy,
            "seed": args.seed,
            "config": asdict(core.config),
            "build_seconds": round(base.build_seconds, 1),
        },
        "steady_state": {
            "settle_seconds": round(steady.seconds, 1),
            "pending_workloads": steady.pending,
            "running_workloads": steady.running,
            "allocated_gpu_fraction": round(steady.allocated, 4),
            "preemptions_while_settling": steady.preemptions,
        },
        "cases": results,
        "python_hash_seed": os.environ.get("PYTHONHASHSEED", "random"),
        "host_reference_ms": [before, after],
    }
    rows = []
    for case in cases:
        ms = case.ms()
        mid, p90, top = median(ms), percentile(ms, 90), max(ms)
        verdict = "pass" if mid <= TARGET_MS else "FAIL"
        entry: dict[str, object] = {
            "description": case.description,
            "median_ms": round(mid, 2),
            "p90_ms": round(p90, 2),
            "max_ms": round(top, 2),
            "runs_ms": [round(m, 2) for m in ms],
            "verdict": verdict,
            "cycles": [r.summary() for r in case.results],
        }
        if case.event_seconds:
            entry["event_handling_median_ms"] = round(median(case.event_seconds) * 1000, 2)
        results[case.name] = entry
        did = _did(case.results)
        events = f"{median(case.event_seconds) * 1000:.1f}" if case.event_seconds else "-"
        rows.append(
            f"| {case.name}: {case.description} | **{mid:.1f}** | {p90:.1f} | {top:.1f} "
            f"| {events} | {did} | <= {TARGET_MS:.0f} | {verdict} |"
        )
        print(f"{case.name}: median {mid:.1f} ms, p90 {p90:.1f} ms ({verdict})", flush=True)

    lines = [
        "# Speed of one scheduling cycle (issue 3)",
        "",
        f"`{command}` on {machine}. Single process.",
        "",
        "Target: one scheduling cycle with 2,000 pending workloads across 50 queues on a "
        f"5,000-node cluster in at most {TARGET_MS:.0f} ms (median over repeats).",
        "",
        "## Set-up",
        "",
        f"* {n_nodes:,} nodes, {gpus:,} GPUs (H100, A100, L40S, A10; 8 per node), racks of "
        f"{RACK_NODES} nodes over {ZONES} zones, H100 nodes in NVLink pairs; policy "
        f"`{args.policy}`, seed {args.seed}.",
        f"* {len(teams)} team queues under {len(base.queues) - len(teams)} org queues; GPU "
        "nominal quotas add up to the cluster's GPUs; some borrowing and lending limits; "
        "weights 1-4.",
        f"* Running: {len(core.running):,} workloads ({len(core.owner):,} pods) admitted "
        f"through the core, {allocated:.1%} of GPU capacity allocated; {len(borrowing)} team "
        f"queues borrow beyond their nominal quota ({base.withdrawn} workloads that did not "
        "get in while filling were withdrawn).",
        f"* Pending: {len(base.pending):,} workloads in {len(core.pending.groups()):,} groups "
        f"({', '.join(f'{v} {k}' for k, v in kinds.items())}), arriving at t={ARRIVAL:.0f} s "
        "when every running workload is past its minimum run time.",
        f"* Admission config (defaults): {_config(core.config)}.",
        "",
        "## One cycle",
        "",
        f"Each run is one `core.cycle(now)` on a fresh deep copy of the state, timed alone "
        f"({args.repeats} runs per case). The *pod finished* and *arrival* cases start from the "
        "state after the cold cycle and its follow-up cycles settled (evictions done, "
        "preemptors admitted, the rest parked); each run ends a different running workload or "
        "adds a different new one. *events ms*: handling the event batch before the cycle "
        "(freeing the capacity and waking groups), not part of the cycle time.",
        "",
        "| case | median ms | p90 ms | max ms | events ms | what the cycle did (median run) "
        "| target | result |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "*Tried*: workloads tried (only the head of a group is: a group is the workloads of "
        "one queue with the same shape, priority and settings). *Searches*: victim searches "
        "run (`find_victims` calls). *Parked*: groups waiting for capacity / quota after the "
        "cycle. A cycle admits at most one workload per queue with work and runs at most "
        f"{core.config.max_preemption_searches} victim searches (`max_preemption_searches`), "
        "those that find no victims included; a workload whose search is put off tries again "
        "next cycle.",
        "",
        f"Steady state: reaching it from the cold state took {steady.seconds:.0f} s of cycles "
        f"({steady.preemptions} preemptions); then {steady.running:,} workloads run, "
        f"{steady.pending:,} wait, {steady.allocated:.1%} of GPU capacity is allocated.",
        "",
        f"Set-up built in {base.build_seconds:.0f} s. The machine may be shared: a fixed numpy "
        f"loop (`host_reference` in benchmarks/speed.py) took {before} ms before and {after} ms "
        "after these runs; compare runs made at similar reference times.",
        "",
        "Re-run:",
        "",
        "```",
        command,
        "```",
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / "cycle_speed.json", report)
    (RESULTS / "cycle_speed.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def pending_kinds(pending: Sequence[Workload]) -> dict[str, int]:
    kinds = {"1-GPU pods": 0, "GPU shares": 0, "multi-GPU pods": 0, "gangs": 0, "in topology": 0}
    for w in pending:
        pod = w.pods[0]
        if w.gang_size > 1:
            kinds["gangs"] += 1
        elif pod.gpu.is_shared:
            kinds["GPU shares"] += 1
        elif pod.gpu.count == 1:
            kinds["1-GPU pods"] += 1
        else:
            kinds["multi-GPU pods"] += 1
        kinds["in topology"] += w.topology is not None
    return kinds


def _config(config: AdmissionConfig) -> str:
    """Every admission setting (the defaults unless this benchmark changed them)."""
    return ", ".join(f"`{name}` {value}" for name, value in asdict(config).items())


def _did(results: Sequence[CycleResult]) -> str:
    middle = sorted(results, key=lambda r: r.seconds)[len(results) // 2]
    return (
        f"{middle.tried} tried, {middle.searches} searches, {middle.admitted} admitted, "
        f"{middle.preemptors} preempting ({middle.victims} victims), parked "
        f"{middle.parked_capacity} / {middle.parked_quota}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
