"""Builders for tests and examples: readable one-liners instead of hand-built objects."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from gpufleet.model import (
    GPU_RESOURCE,
    NO_SHARING,
    GpuDevice,
    GpuRequest,
    GpuSharing,
    MigSlice,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Taint,
    TaintEffect,
    Toleration,
    gfd_labels,
)
from gpufleet.model.affinity import (
    PlacementRules,
    PodAffinityTerm,
    SpreadConstraint,
    WeightedPodAffinityTerm,
)
from gpufleet.model.capacity import CapacityType
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.nodepools import NodePool
from gpufleet.model.priorities import PreemptionPolicy
from gpufleet.model.queues import (
    FlavorFungibility,
    Queue,
    QueueBudget,
    QueueingStrategy,
    QueuePreemption,
)
from gpufleet.model.resources import GPU, gpu_model_key
from gpufleet.model.selectors import LabelRequirement, LabelSelector, PodSelector
from gpufleet.model.workload import TopologyRequest, Workload

_names = itertools.count()

GPU_TAINT = Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE)
GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists", "", TaintEffect.NO_SCHEDULE)


def make_node(
    name: str | None = None,
    cpu: int = 64_000,
    memory: int = 256 * 1024,
    gpus: int = 8,
    model: str = "A100",
    gpu_memory: int = 40 * 1024,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    mig: Mapping[int, Iterable[str]] | None = None,
    unschedulable: bool = False,
    extended: Mapping[str, int] | None = None,
    sharing: GpuSharing = NO_SHARING,
    unhealthy: Iterable[int] = (),
) -> Node:
    """A node; ``mig`` maps device index -> MIG profiles it is partitioned into; ``extended``
    its allocatable extended resources (``{"rdma/hca": 1}``); ``sharing`` says what its device
    plugin advertises (one nvidia.com/gpu per device by default); ``unhealthy``: indices of
    devices marked unhealthy."""
    name = name or f"node-{next(_names)}"
    devices = []
    sick = frozenset(unhealthy)
    for index in range(gpus):
        profiles = tuple((mig or {}).get(index, ()))
        slices = tuple(MigSlice(p, slot) for slot, p in enumerate(profiles))
        healthy = index not in sick
        devices.append(GpuDevice(index, model, gpu_memory, slices, healthy=healthy))
    hardware = gfd_labels(tuple(devices), sharing)
    all_labels = {GFD_LABELS.HOSTNAME: name, **hardware, **(labels or {})}
    return Node(
        name,
        cpu,
        memory,
        tuple(devices),
        all_labels,
        tuple(taints),
        unschedulable,
        tuple(sorted((extended or {}).items())),
        sharing,
    )


def make_pod(
    name: str | None = None,
    cpu: int = 1_000,
    memory: int = 1024,
    gpus: int = 0,
    milli: int | None = None,
    gpu_memory: int = 0,
    mig: str | None = None,
    mig_count: int = 1,
    models: Iterable[str] | None = None,
    selector: Mapping[str, str] | None = None,
    affinity: Iterable[NodeSelectorRequirement] | None = None,
    tolerations: Iterable[Toleration] = (),
    priority: int = 0,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    extended: Mapping[str, int] | None = None,
    rules: PlacementRules | None = None,
    units: int = 0,
    resource: str = GPU_RESOURCE,
    gates: Iterable[str] = (),
) -> Pod:
    """A pod: ``gpus`` whole GPUs, or ``milli``/``gpu_memory`` of one, or a MIG slice; plus
    ``extended`` resources and inter-pod ``rules`` (see :func:`pod_term`, :func:`spread`).

    A share takes ``units`` of the node's GPU resource: 0 (the default) for gpufleet's own
    share, 1 for one that also asks ``nvidia.com/gpu: 1``; ``resource`` is what whole GPUs and
    shares ask units of. ``gates``: its ``spec.schedulingGates``."""
    if mig is not None:
        gpu = GpuRequest.mig(mig, mig_count)
    elif milli is not None or gpu_memory:
        gpu = GpuRequest.share(milli or 0, gpu_memory, units, resource)
        if gpu.milli == 1000 and not gpu_memory:
            gpu = GpuRequest.whole(1, resource)
    else:
        gpu = GpuRequest.whole(gpus, resource)
    terms = (NodeSelectorTerm(tuple(affinity)),) if affinity is not None else ()
    return Pod(
        name or f"pod-{next(_names)}",
        namespace,
        cpu,
        memory,
        gpu,
        frozenset(models) if models is not None else None,
        tuple(sorted((selector or {}).items())),
        terms,
        tuple(tolerations),
        priority,
        labels=dict(labels or {}),
        extended=tuple(sorted((extended or {}).items())),
        rules=rules,
        scheduling_gates=tuple(gates),
    )


def label_selector(
    labels: Mapping[str, str] | None = None,
    expressions: Iterable[tuple[str, str, Iterable[str]]] = (),
) -> LabelSelector:
    """``matchLabels`` plus ``matchExpressions`` given as (key, operator, values)."""
    requirements = [LabelRequirement(k, "In", (v,)) for k, v in sorted((labels or {}).items())]
    requirements += [LabelRequirement(k, op, tuple(values)) for k, op, values in expressions]
    return LabelSelector(tuple(requirements))


def pod_term(
    labels: Mapping[str, str] | None = None,
    key: str = GFD_LABELS.HOSTNAME,
    namespaces: Iterable[str] | None = ("default",),
    weight: int | None = None,
    expressions: Iterable[tuple[str, str, Iterable[str]]] = (),
) -> PodAffinityTerm:
    """A pod (anti-)affinity term: pods with ``labels`` in ``namespaces`` (None: all) in the
    same ``key`` domain. Wrap it with :func:`weighted` for a preferred term."""
    namespace_set = frozenset(namespaces) if namespaces is not None else None
    return PodAffinityTerm(PodSelector(label_selector(labels, expressions), namespace_set), key)


def weighted(weight: int, term: PodAffinityTerm) -> WeightedPodAffinityTerm:
    return WeightedPodAffinityTerm(weight, term)


def spread(
    labels: Mapping[str, str] | None,
    key: str = GFD_LABELS.HOSTNAME,
    max_skew: int = 1,
    anyway: bool = False,
    min_domains: int = 1,
    honor_taints: bool = False,
) -> SpreadConstraint:
    """A topology spread constraint over pods with ``labels`` (None: no selector)."""
    selector = label_selector(labels) if labels is not None else None
    return SpreadConstraint(max_skew, key, anyway, selector, min_domains, honor_taints=honor_taints)


def make_cluster(count: int, **node_options: object) -> list[Node]:
    """``count`` identical nodes named ``node-0`` ... (options as for :func:`make_node`)."""
    return [make_node(f"node-{i}", **node_options) for i in range(count)]  # type: ignore[arg-type]


def gpus(count: float) -> int:
    """``count`` GPUs in quota units (milli-GPU)."""
    return round(count * 1000)


def make_queue(
    name: str,
    gpus: float | None = None,
    parent: str | None = None,
    borrow: float | None = None,
    lend: float | None = None,
    weight: float = 1.0,
    model: str | None = None,
    namespaces: Iterable[str] = (),
    preemption: QueuePreemption | None = None,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    gpu_models: Iterable[str] = (),
    fungibility: FlavorFungibility | None = None,
    budget: QueueBudget | None = None,
    admitted_namespaces: Iterable[str] | None = None,
    priority_classes: Iterable[str] | None = None,
) -> Queue:
    """A queue with a nominal quota of ``gpus`` GPUs (of ``model`` only, if given) and optional
    borrowing and lending limits, in GPUs; Kueue-style preemption policies, queueing strategy,
    GPU model order, fungibility and a GPU-hour budget when given. It admits every namespace
    unless ``admitted_namespaces`` are given (tests of quotas are not about who may use one:
    the model's default is stricter), and the priority classes ``priority_classes`` when
    given."""
    key = gpu_model_key(model) if model is not None else GPU

    def amounts(value: float | None) -> dict[str, int]:
        return {} if value is None else {key: round(value * 1000)}

    return Queue(
        name,
        parent,
        amounts(gpus),
        amounts(borrow),
        amounts(lend),
        weight,
        tuple(namespaces),
        preemption or QueuePreemption(),
        strategy,
        tuple(gpu_models),
        fungibility or FlavorFungibility(),
        budget,
        None if admitted_namespaces is None else frozenset(admitted_namespaces),
        None if priority_classes is None else frozenset(priority_classes),
    )


def make_workload(
    name: str | None = None,
    queue: str = "default",
    pods: int = 1,
    gpus: int = 1,
    priority: int = 0,
    min_member: int = 0,
    preemptible: bool = True,
    never_preempt: bool = False,
    runtime: float | None = None,
    checkpoint: float | None = None,
    topology: TopologyRequest | None = None,
    namespace: str = "default",
    mixed_models: bool = False,
    priority_class: str | None = None,
    suspended: bool = False,
    **pod_options: object,
) -> Workload:
    """A workload of ``pods`` identical pods of ``gpus`` GPUs each (a gang if more than one);
    ``suspended``: a suspended Job's."""
    name = name or f"job-{next(_names)}"
    members = tuple(
        make_pod(
            name=f"{name}-{i}" if pods > 1 else name,
            gpus=gpus,
            priority=priority,
            namespace=namespace,
            **pod_options,  # type: ignore[arg-type]
        )
        for i in range(pods)
    )
    return Workload(
        name,
        namespace,
        members,
        queue,
        priority,
        priority_class=priority_class,
        preemption_policy=(
            PreemptionPolicy.NEVER if never_preempt else PreemptionPolicy.PREEMPT_LOWER_PRIORITY
        ),
        min_member=min_member,
        preemptible=preemptible,
        expected_runtime=runtime,
        checkpoint_interval=checkpoint,
        topology=topology,
        mixed_gpu_models=mixed_models,
        suspended=suspended,
    )


def make_node_pool(
    name: str = "pool",
    capacity: CapacityType = CapacityType.ON_DEMAND,
    price: float = 10.0,
    max_nodes: int = 10,
    min_nodes: int = 0,
    zones: Iterable[str] = (),
    delay: float = 0.0,
    spot_taint: bool = True,
    **node_options: object,
) -> NodePool:
    """A node pool of nodes as :func:`make_node` makes them (``node_options``), at ``price``
    per node-hour."""
    template = make_node(name, **node_options)  # type: ignore[arg-type]
    return NodePool(
        name,
        template,
        capacity,
        price,
        max_nodes,
        min_nodes,
        tuple(zones),
        delay,
        spot_taint,
        "the test's price",
    )
