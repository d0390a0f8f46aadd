"""Multi-tenant scenarios for time-based simulation: teams with quotas, gangs, priorities.

``from_trace`` turns a pod trace (the Alibaba 2023 one) into a shared cluster's workload:

* GPU pods are drawn with replacement until their GPU work (gangs counted whole) fills
  ``hours`` at an offered GPU load of ``load`` (a load above 1 means queues grow), run times
  capped, arrivals re-timed as a Poisson process; work already submitted before the day (part
  done) fills the cluster at t=0, so that the replay starts busy;
* each pod goes to a team drawn by its class (multi-GPU pods mostly to training, GPU shares to
  dev notebooks and inference...), and each team's queue has a nominal GPU quota in proportion
  to its expected demand (quotas add up to ``quota_fraction`` of the GPUs; all may borrow what
  others leave idle);
* distributed jobs are gangs: every multi-GPU pod becomes a gang of 2-4 identical workers, and
  a part of the training team's one-GPU pods gangs of 2-8; training gangs checkpoint;
* halfway through, a burst of high-priority, non-preemptible inference pods arrives in a few
  minutes in the inference team's queue, whose guaranteed quota was lent out until then.

``large_gangs`` is synthetic: a cluster of 8-GPU nodes in racks, and a stream of small jobs
with, among them, large rack-bound training gangs (up to whole racks) that need backfill with
reservations to ever start.

``TenantScenario.fifo`` is the baseline without gpufleet's admission: one queue, no quota, no
priority, no preemption (gangs still start whole, so the comparison is of admission alone).

What it does not do: run anything (see :func:`gpufleet.backends.sim.run.run_workloads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpufleet.backends.sim.workloads import cap_runtimes, resample, retime_for_load
from gpufleet.model import GpuDevice, GpuRequest, Node, Pod, PodClass, gfd_labels
from gpufleet.model.faults import GpuFault
from gpufleet.model.node import GFD_LABELS, well_known_labels
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.priorities import PreemptionPolicy, PriorityClass
from gpufleet.model.queues import Queue
from gpufleet.model.resources import GPU
from gpufleet.model.workload import TimedPod, TimedWorkload, TopologyMode, TopologyRequest, Workload

BATCH = PriorityClass("batch", 100, global_default=True)
HIGH = PriorityClass("inference-high", 1000)
PRIORITY_CLASSES = {c.name: c for c in (BATCH, HIGH)}


@dataclass(frozen=True, slots=True)
class Team:
    """A team: its queue's weight, and the chance that a pod of each class is its."""

    name: str
    weight: float
    by_class: dict[PodClass, float]


#: Teams of the trace scenario (the chances of each class add up to 1 over the teams).
TEAMS = (
    Team(
        "training",
        2.0,
        {PodClass.MULTI_GPU: 0.7, PodClass.ONE_GPU: 0.4, PodClass.CPU_ONLY: 0.3},
    ),
    Team(
        "research",
        1.0,
        {
            PodClass.MULTI_GPU: 0.3,
            PodClass.ONE_GPU: 0.4,
            PodClass.SHARED: 0.2,
            PodClass.CPU_ONLY: 0.4,
        },
    ),
    Team("dev", 1.0, {PodClass.ONE_GPU: 0.1, PodClass.SHARED: 0.5, PodClass.CPU_ONLY: 0.3}),
    Team("inference", 1.0, {PodClass.ONE_GPU: 0.1, PodClass.SHARED: 0.3}),
)


@dataclass(frozen=True, slots=True)
class TenantScenario:
    name: str
    description: str
    queues: dict[str, Queue]
    priority_classes: dict[str, PriorityClass]
    workloads: tuple[TimedWorkload, ...]
    #: GPU faults injected during the run (a scenario's ``GpuFault`` objects).
    faults: tuple[GpuFault, ...] = ()
    #: Nodes lost during the run (its ``SpotInterruption`` and ``NodeFailure`` objects).
    node_faults: tuple[NodeFault, ...] = ()

    def fifo(self) -> TenantScenario:
        """The same workloads in one queue, first come first served: no quota, no priority,
        no preemption (priority class names are kept, for reporting)."""
        plain = tuple(fifo_workload(t) for t in self.workloads)
        return TenantScenario(
            f"{self.name}-fifo",
            f"{self.description} (FIFO baseline)",
            {},
            self.priority_classes,
            plain,
            self.faults,
            self.node_faults,
        )

    @property
    def gpu_request_milli(self) -> int:
        return sum(t.workload.gpu_milli for t in self.workloads)


def fifo_workload(timed: TimedWorkload) -> TimedWorkload:
    """``timed`` as the FIFO baseline runs it: in the one default queue, at priority 0,
    never preempting."""
    return replace(
        timed,
        workload=replace(
            timed.workload,
            queue="default",
            priority=0,
            pods=tuple(replace(p, priority=0) for p in timed.workload.pods),
            preemption_policy=PreemptionPolicy.NEVER,
        ),
    )


def from_trace(
    trace: Sequence[TimedPod],
    nodes: Sequence[Node],
    seed: int = 0,
    hours: float = 24.0,
    load: float = 1.15,
    max_runtime: float = 6 * 3600.0,
    burst_gpus: float = 0.05,
    burst_window: float = 600.0,
    teams: Sequence[Team] = TEAMS,
    warm: float = 1.0,
    gpu_only: bool = True,
    quota_fraction: float = 0.8,
) -> TenantScenario:
    """See the module docstring: about ``hours`` of arrivals. ``burst_gpus``: the burst's
    GPUs as a fraction of the cluster's. ``warm``: GPUs requested at t=0 by work already
    submitted (part done), as a fraction of the cluster's, so that the replay starts busy
    rather than spending its first hours filling an empty cluster. ``gpu_only``: leave out
    the trace's CPU-only pods (they would run on CPU nodes of their own). ``quota_fraction``:
    the part of the GPUs given out as nominal quotas (the rest is a pool anyone may borrow:
    CPU, memory and fragmentation strand some GPUs, so quotas of all the GPUs could not all
    be met at once)."""
    rng = np.random.default_rng(seed)
    capacity = sum(n.gpu_count for n in nodes) * 1000
    timed = [
        t
        for t in trace
        if t.runtime is not None
        and t.created is not None
        and (not gpu_only or t.pod.gpu.total_milli > 0)
    ]
    if not timed:
        raise ValueError("the trace has no GPU pods with creation and run times")
    count = _count_for(timed, capacity, load, hours * 3600, max_runtime)
    mean_request = float(np.mean([t.pod.gpu.total_milli for t in timed])) or 1000.0
    extra = int(3 * warm * capacity / mean_request) + 10  # more than the warm start needs
    drawn = iter(cap_runtimes(resample(timed, count + extra, seed), max_runtime))
    jobs: list[tuple[TimedPod, str, int]] = []  # (pod, team, gang size)
    target = load * capacity * hours * 3600
    work = 0.0
    for item in drawn:  # gangs multiply a pod's work: stop once the span is filled
        size, team = _assign(item.pod, teams, rng)
        jobs.append((item, team, size))
        work += (item.runtime or 0.0) * item.pod.gpu.total_milli * size
        if work >= target:
            break
    count = len(jobs)
    # Re-time on the gangs' GPU work, so that the offered load counts every worker.
    weighted = [replace(t, pod=replace(t.pod, gpu=_scaled(t.pod.gpu, size))) for t, _, size in jobs]
    retimed = retime_for_load(weighted, capacity, load, seed)
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i][0].created or 0.0, jobs[i][0].pod.key))
    workloads: list[TimedWorkload] = []
    for new, i in zip(retimed, order, strict=True):
        original, team, size = jobs[i]
        workloads.append(_workload(original.pod, team, size, new.created or 0.0, original.runtime))
    # The day starts on a busy cluster: work submitted before it, part done, all at t=0.
    requested = 0
    for item in drawn:
        if requested >= warm * capacity:
            break
        size, team = _assign(item.pod, teams, rng)
        left = (item.runtime or 60.0) * float(rng.uniform(0.1, 1.0))
        workloads.append(_workload(item.pod, team, size, 0.0, left, name=f"{item.pod.name}-w"))
        requested += item.pod.gpu.total_milli * size
    span = max(t.created for t in workloads)
    workloads += _burst(nodes, span / 2, burst_gpus * capacity / 1000, burst_window, rng)
    workloads.sort(key=lambda t: (t.created, t.workload.key))
    demand = _demand_by_team(workloads, teams)
    queues = _queues(teams, demand, int(capacity * quota_fraction))
    return TenantScenario(
        "alibaba-multitenant",
        f"{count:,} Alibaba 2023 pods as {len(teams)} teams' workloads (gangs of multi-GPU "
        f"workers) arriving over {hours:.0f} h at an offered GPU load of {load:.2f}, run times "
        f"capped at {max_runtime / 3600:.0f} h, and a burst of high-priority inference pods "
        f"({burst_gpus:.0%} of the GPUs) halfway",
        queues,
        PRIORITY_CLASSES,
        tuple(workloads),
    )


def _count_for(
    timed: Sequence[TimedPod], capacity: int, load: float, span: float, max_runtime: float
) -> int:
    """Pods whose GPU work at ``load`` fills ``span`` seconds (before gangs add workers)."""
    work = np.mean([min(t.runtime or 0.0, max_runtime) * t.pod.gpu.total_milli for t in timed])
    if work <= 0:
        raise ValueError("the trace's pods ask for no GPU time")
    return max(1, int(load * capacity * span / float(work)))


def _team_for(pod: Pod, teams: Sequence[Team], rng: np.random.Generator) -> str:
    weights = np.array([t.by_class.get(pod.pod_class, 0.0) for t in teams], np.float64)
    if weights.sum() <= 0:
        return teams[0].name
    return teams[int(rng.choice(len(teams), p=weights / weights.sum()))].name


def _assign(pod: Pod, teams: Sequence[Team], rng: np.random.Generator) -> tuple[int, str]:
    team = _team_for(pod, teams, rng)
    return _gang_size(pod, team, rng), team


def _gang_size(pod: Pod, team: str, rng: np.random.Generator) -> int:
    if pod.pod_class is PodClass.MULTI_GPU:
        return int(rng.choice([2, 3, 4]))
    if pod.pod_class is PodClass.ONE_GPU and team == "training" and rng.random() < 0.25:
        return int(rng.choice([2, 4, 8]))
    return 1


def _scaled(gpu: GpuRequest, size: int) -> GpuRequest:
    return gpu if size == 1 else replace(gpu, count=gpu.count * size, units=gpu.units * size)


def _workload(
    pod: Pod, team: str, size: int, created: float, runtime: float | None, name: str = ""
) -> TimedWorkload:
    base = name or pod.name
    members = tuple(
        replace(
            pod, name=f"{base}-w{i}" if size > 1 else base, namespace=team, priority=BATCH.value
        )
        for i in range(size)
    )
    gang = size > 1
    runtime = runtime or 60.0
    workload = Workload(
        base,
        team,
        members,
        team,
        BATCH.value,
        priority_class=BATCH.name,
        expected_runtime=round(runtime * 1.5, 1),
        checkpoint_interval=1800.0 if gang else None,
    )
    return TimedWorkload(workload, created, runtime)


def _burst(
    nodes: Sequence[Node],
    start: float,
    gpus: float,
    window: float,
    rng: np.random.Generator,
) -> list[TimedWorkload]:
    count = max(1, round(gpus))
    out = []
    for i in range(count):
        pod = Pod(
            f"serve-{i:04d}",
            "inference",
            4000,
            16 * 1024,
            GpuRequest.whole(1),
            priority=HIGH.value,
        )
        workload = Workload(
            pod.name,
            "inference",
            (pod,),
            "inference",
            HIGH.value,
            priority_class=HIGH.name,
            preemptible=False,
            expected_runtime=1800.0,
        )
        created = start + float(rng.uniform(0, window))
        out.append(TimedWorkload(workload, created, float(rng.uniform(900, 1800))))
    return out


def _demand_by_team(workloads: Sequence[TimedWorkload], teams: Sequence[Team]) -> dict[str, float]:
    """GPU-seconds each team asks for."""
    demand = {t.name: 0.0 for t in teams}
    for t in workloads:
        demand[t.workload.queue] = demand.get(t.workload.queue, 0.0) + (
            t.workload.gpu_milli * (t.duration or 0.0)
        )
    return demand


def _queues(teams: Sequence[Team], demand: dict[str, float], capacity: int) -> dict[str, Queue]:
    """Nominal GPU quotas in proportion to demand (at least 5% each), adding up to capacity."""
    total = sum(demand.values()) or 1.0
    raw = {t.name: max(demand[t.name] / total, 0.05) for t in teams}
    scale = sum(raw.values())
    quotas = {name: int(capacity * share / scale) // 1000 * 1000 for name, share in raw.items()}
    return {
        t.name: Queue(t.name, nominal={GPU: quotas[t.name]}, weight=t.weight, namespaces=(t.name,))
        for t in teams
    }


def sample_nodes(nodes: Sequence[Node], fraction: float, seed: int = 0) -> list[Node]:
    """A random ``fraction`` of the GPU nodes (the same mix of models and sizes on average)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    gpu_nodes = [n for n in nodes if n.gpu_count]
    rng = np.random.default_rng(seed)
    keep = rng.permutation(len(gpu_nodes))[: max(1, round(fraction * len(gpu_nodes)))]
    return [gpu_nodes[i] for i in sorted(keep)]


def large_gangs(
    seed: int = 0,
    racks: int = 8,
    nodes_per_rack: int = 8,
    hours: float = 24.0,
    load: float = 1.1,
    gang_share: float = 0.5,
) -> tuple[list[Node], TenantScenario]:
    """See the module docstring: the cluster and the scenario."""
    rng = np.random.default_rng(seed)
    nodes = []
    for r in range(racks):
        for n in range(nodes_per_rack):
            devices = tuple(GpuDevice(i, "H100", 80 * 1024) for i in range(8))
            labels = {
                **well_known_labels(f"rack{r}-node{n}"),
                GFD_LABELS.RACK: f"rack{r}",
                GFD_LABELS.NVLINK_DOMAIN: f"rack{r}-node{n}",
                **gfd_labels(devices),
            }
            nodes.append(Node(f"rack{r}-node{n}", 128_000, 1024 * 1024, devices, labels))
    capacity_gpus = racks * nodes_per_rack * 8
    span = hours * 3600.0
    # Small jobs: 1-4 GPUs, 10 min to 4 h. Gangs: 2..nodes_per_rack workers x 8 GPUs, 2-8 h.
    small_work = (1 - gang_share) * load * capacity_gpus * span
    gang_work = gang_share * load * capacity_gpus * span
    workloads: list[TimedWorkload] = []
    done = 0.0
    i = 0
    while done < small_work:
        gpus = int(rng.choice([1, 1, 1, 2, 4]))
        runtime = float(np.exp(rng.uniform(np.log(600), np.log(4 * 3600))))
        pod = Pod(
            f"small-{i:05d}", "research", 8000 * gpus, 64 * 1024 * gpus, GpuRequest.whole(gpus)
        )
        workload = Workload(
            pod.name, "research", (pod,), "research", BATCH.value, priority_class=BATCH.name,
            expected_runtime=round(runtime * 1.5, 1),
        )  # fmt: skip
        workloads.append(TimedWorkload(workload, float(rng.uniform(0, span)), runtime))
        done += gpus * runtime
        i += 1
    done = 0.0
    j = 0
    while done < gang_work:
        size = int(rng.integers(2, nodes_per_rack + 1))
        runtime = float(rng.uniform(2 * 3600, 8 * 3600))
        pods = tuple(
            Pod(f"train-{j:04d}-w{k}", "training", 96_000, 512 * 1024, GpuRequest.whole(8))
            for k in range(size)
        )
        workload = Workload(
            f"train-{j:04d}", "training", pods, "training", BATCH.value, priority_class=BATCH.name,
            expected_runtime=round(runtime * 1.2, 1), checkpoint_interval=1800.0,
            topology=TopologyRequest(TopologyMode.REQUIRED, GFD_LABELS.RACK),
        )  # fmt: skip
        workloads.append(TimedWorkload(workload, float(rng.uniform(0, span)), runtime))
        done += 8 * size * runtime
        j += 1
    workloads.sort(key=lambda t: (t.created, t.workload.key))
    half = capacity_gpus * 1000 // 2
    queues = {
        "training": Queue("training", nominal={GPU: half}, weight=1.0, namespaces=("training",)),
        "research": Queue("research", nominal={GPU: half}, weight=1.0, namespaces=("research",)),
    }
    scenario = TenantScenario(
        "large-gangs",
        f"{racks} racks x {nodes_per_rack} nodes x 8 H100; {j} rack-bound training gangs of "
        f"2-{nodes_per_rack} x 8 GPUs and {i} small jobs over {hours:.0f} h, offered load "
        f"{load:.2f}",
        queues,
        PRIORITY_CLASSES,
        tuple(workloads),
    )
    return nodes, scenario
