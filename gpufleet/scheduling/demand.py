"""A pod compiled against a node table: integers and masks the hot path can use directly.

Pods with the same :attr:`~gpufleet.model.Pod.signature` compile to the same :class:`Demand`,
so the engine compiles each shape once (per change of the node set), not once per pod.

The static part of filtering (GPU model, node selector and affinity, taints, cordons, the GPU
resource a node advertises, extended resources no node has) is evaluated here over all nodes at
once from the table's id columns; the usage-dependent part (free CPU, memory, GPU, units,
extended resources, and the inter-pod rules of :mod:`.interpod` and :mod:`.spread`, compiled
here into columns of the table's pod index) is evaluated per placement by the filters.
Preferred node affinity is static: its raw weights per row are computed here once. What the pod
holds per device on each row follows :func:`gpufleet.model.sharing.milli_per_device`,
column-wise (a property test keeps the two in agreement).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.model import MILLI_PER_GPU, Pod, Taint, Toleration
from gpufleet.model.affinity import PreferredNodeTerm
from gpufleet.model.capacity import CapacityNeed
from gpufleet.model.gpu import model_matches
from gpufleet.model.pod import GpuRequest, NodeSelectorRequirement, NodeSelectorTerm
from gpufleet.model.sharing import IMPOSSIBLE_MILLI
from gpufleet.scheduling.domains import FloatArray
from gpufleet.scheduling.interpod import InterPodTerms, compile_interpod
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable
from gpufleet.scheduling.spread import SpreadRules, compile_spread

__all__ = ["IMPOSSIBLE_MILLI", "Demand", "compile_demand", "tolerates"]


@dataclass(slots=True)
class Demand:
    """What one pod shape needs, compiled for one node set (``topology_version``)."""

    signature: tuple[object, ...]
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    shared: bool
    #: Milli-GPU per device on each row, where it differs by row (None when ``gpu_milli``
    #: holds everywhere): a share asked in GPU memory, a share that takes a unit (a whole
    #: device without sharing, at least a replica with it), whole GPUs on time-sliced rows.
    milli_by_row: IntArray | None
    mig_profile: int
    mig_count: int
    #: Units of the node's GPU resource it takes (the kubelet's count), and that resource.
    units: int
    resource: str
    #: Rows advertising the GPU resource it asks for (and allowing its count), or None.
    resource_mask: BoolArray | None
    #: GPU "tag" for clustering heuristics: 0 = shared, k = k whole GPUs, -1 = none.
    tag: int
    model_mask: BoolArray | None
    affinity_mask: BoolArray | None
    taint_mask: BoolArray | None
    static_mask: BoolArray
    topology_version: int
    pod_class: str
    #: What row-local scores may depend on: the pod's CPU and GPU request, nothing else.
    score_key: tuple[object, ...] = ()
    #: Key of a score cache: the score key and the static constraints, so that every pod
    #: using a cache has the same static mask. Pods that differ only in memory share it.
    cache_key: tuple[object, ...] = ()
    #: Extended resources: (resource id in the table, -1 if no node has it; units), and the
    #: same by name.
    extended: tuple[tuple[int, int], ...] = ()
    extended_request: tuple[tuple[str, int], ...] = ()
    #: Pod (anti-)affinity and topology spread, compiled (None: the pod has none).
    interpod: InterPodTerms | None = None
    spread: SpreadRules | None = None
    #: Preferred node affinity: the sum of the weights of the terms each row matches.
    node_preference: FloatArray | None = None
    #: Has the pod preferences of its own (preferred node or pod affinity, soft spread)?
    prefers: bool = False
    #: Does the pod accept spot nodes itself (a spot toleration or selector; the placement
    #: engine sets it), and what its workload needs of capacity where it is placed (the
    #: engine's variant of the shape for a workload that says so; scorers read it).
    spot_ok: bool = False
    capacity: CapacityNeed = CapacityNeed.ANY

    @property
    def pod_rules_filter(self) -> bool:
        """Does the pod's own inter-pod rules filter nodes (by what runs where)?"""
        return (self.interpod is not None and self.interpod.filters) or (
            self.spread is not None and bool(self.spread.filters)
        )

    @property
    def wants_gpu(self) -> bool:
        return self.gpu_count > 0 or self.mig_count > 0

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    def milli_on(self, rows: IntArray) -> IntArray:
        """Milli-GPU per device this pod takes on each of ``rows``."""
        if self.milli_by_row is None:
            return np.full(rows.shape, self.gpu_milli, np.int64)
        return self.milli_by_row[rows]


def compile_demand(table: NodeTable, pod: Pod) -> Demand:
    """Compile ``pod`` against ``table`` (see the module docstring)."""
    n = table.size
    gpu = pod.gpu
    milli_by_row = _milli_by_row(table, gpu)
    mig_profile = -1
    if gpu.mig_profile is not None:
        mig_profile = table.mig_profile_id.get(gpu.mig_profile, -2)

    model_mask = _model_mask(table, pod) if (gpu.count or gpu.mig_count) else None
    affinity_mask = _affinity_mask(table, pod)
    taint_mask = _taint_mask(table, pod.tolerations)
    resource_mask = _resource_mask(table, gpu)
    static_mask = table.schedulable[:n].copy()
    for mask in (model_mask, affinity_mask, taint_mask, resource_mask):
        if mask is not None:
            static_mask &= mask
    if mig_profile == -2:
        static_mask[:] = False
    extended = tuple((table.ext_id.get(name, -1), amount) for name, amount in pod.extended)
    if any(rid < 0 for rid, _ in extended):
        static_mask[:] = False  # no node has it at all
    interpod = spread = None
    node_preference = None
    if pod.rules is not None:
        interpod = compile_interpod(table, pod)
        node_affinity = affinity_mask
        if model_mask is not None:  # gpufleet.dev/gpu-models is node affinity on the model
            node_affinity = model_mask if node_affinity is None else node_affinity & model_mask
        spread = compile_spread(table, pod, node_affinity, taint_mask)
        node_preference = _preference(table, pod.rules.preferred_node_affinity)
    if gpu.mig_profile is not None:
        tag = -1
    elif gpu.is_shared:
        tag = 0
    else:
        tag = gpu.count if gpu.count else -1
    if tag > table.max_gpus:
        tag = -1
    return Demand(
        signature=pod.signature,
        cpu_milli=pod.cpu_milli,
        memory_mib=pod.memory_mib,
        gpu_count=gpu.count,
        gpu_milli=gpu.milli,
        shared=gpu.is_shared,
        milli_by_row=milli_by_row,
        mig_profile=mig_profile,
        mig_count=gpu.mig_count,
        units=gpu.units,
        resource=gpu.resource,
        resource_mask=resource_mask,
        tag=tag,
        model_mask=model_mask,
        affinity_mask=affinity_mask,
        taint_mask=taint_mask,
        static_mask=static_mask,
        topology_version=table.topology_version,
        pod_class=str(pod.pod_class),
        score_key=(pod.cpu_milli, gpu),
        cache_key=(
            pod.cpu_milli,
            gpu,
            pod.gpu_models,
            pod.node_selector,
            pod.required_affinity,
            pod.tolerations,
            *((pod.extended,) if pod.extended else ()),
        ),
        extended=extended,
        extended_request=pod.extended,
        interpod=interpod,
        spread=spread,
        node_preference=node_preference,
        prefers=node_preference is not None
        or (interpod is not None and bool(interpod.preferred))
        or (spread is not None and bool(spread.scores)),
    )


def _preference(table: NodeTable, terms: tuple[PreferredNodeTerm, ...]) -> FloatArray | None:
    """The sum of the weights of the preferred terms each row matches (None: no terms).
    Empty terms match no node, as kube-scheduler skips them."""
    if not terms:
        return None
    weights = np.zeros(table.size, np.float64)
    for preferred in terms:
        weights += preferred.weight * _term_mask(table, preferred.term)
    return weights


def _milli_by_row(table: NodeTable, gpu: GpuRequest) -> IntArray | None:
    """Milli-GPU per device on each row (see :attr:`Demand.milli_by_row`)."""
    n = table.size
    if not gpu.count:
        return None
    if not gpu.is_shared:
        return table.whole_milli[:n].copy() if table.time_sliced else None
    if not gpu.memory_mib and not gpu.units:
        return None
    milli = np.full(n, gpu.milli, np.int64)
    if gpu.memory_mib:
        memory = table.gpu_mem[:n]
        by_memory = np.where(
            memory > 0,
            -(-gpu.memory_mib * MILLI_PER_GPU // np.maximum(memory, 1)),
            IMPOSSIBLE_MILLI,
        )
        milli = np.maximum(milli, by_memory)
    if gpu.units:
        milli = np.maximum(milli, table.replica_milli[:n])
    return milli.astype(np.int64)


def _resource_mask(table: NodeTable, gpu: GpuRequest) -> BoolArray | None:
    """Rows that advertise the GPU resource ``gpu`` takes units of (and allow that many)."""
    if not gpu.units:
        return None
    n = table.size
    if gpu.resource not in table.gpu_resources:
        return np.zeros(n, np.bool_)
    mask: BoolArray = table.resource_id[:n] == table.gpu_resources.index(gpu.resource)
    if gpu.units > 1:
        mask &= ~table.one_unit[:n]
    return mask


def _model_mask(table: NodeTable, pod: Pod) -> BoolArray | None:
    """Rows of the GPU models the pod allows, named as users write them (``H100`` covers
    ``NVIDIA-H100-80GB-HBM3``: :func:`~gpufleet.model.gpu.model_matches`)."""
    if pod.gpu_models is None:
        return None
    ids = [
        i
        for i, name in enumerate(table.model_names)
        if any(model_matches(wanted, name) for wanted in pod.gpu_models)
    ]
    return np.isin(table.model_id[: table.size], np.asarray(ids, np.int64))


def _affinity_mask(table: NodeTable, pod: Pod) -> BoolArray | None:
    if not pod.node_selector and not pod.required_affinity:
        return None
    n = table.size
    mask = np.ones(n, np.bool_)
    for key, value in pod.node_selector:
        mask &= _requirement_mask(table, NodeSelectorRequirement(key, "In", (value,)))
    if pod.required_affinity:
        any_term = np.zeros(n, np.bool_)
        for term in pod.required_affinity:
            any_term |= _term_mask(table, term)
        mask &= any_term
    return mask


def _term_mask(table: NodeTable, term: NodeSelectorTerm) -> BoolArray:
    n = table.size
    if not term.match_expressions:
        return np.zeros(n, np.bool_)  # an empty term matches no node, as in Kubernetes
    mask = np.ones(n, np.bool_)
    for requirement in term.match_expressions:
        mask &= _requirement_mask(table, requirement)
    return mask


def _requirement_mask(table: NodeTable, req: NodeSelectorRequirement) -> BoolArray:
    n = table.size
    column = table.label_ids.get(req.key)
    ids = column[:n] if column is not None else np.full(n, -1, np.int64)
    values = table.label_values.get(req.key, {})
    op = req.operator
    if op in ("In", "NotIn"):
        wanted = np.asarray([values[v] for v in req.values if v in values], np.int64)
        inside = np.isin(ids, wanted)
        return inside if op == "In" else ~inside
    if op == "Exists":
        return ids >= 0
    if op == "DoesNotExist":
        return ids < 0
    if op in ("Gt", "Lt"):
        bound = int(req.values[0])
        numeric = np.full(len(values) + 1, np.nan)
        for text, vid in values.items():
            try:
                numeric[vid] = int(text)
            except ValueError:
                continue
        row_values = numeric[np.where(ids >= 0, ids, len(values))]
        with np.errstate(invalid="ignore"):
            compared: BoolArray = row_values > bound if op == "Gt" else row_values < bound
        return compared
    raise ValueError(f"unknown node selector operator {op!r}")


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' toleration matching rule (:meth:`Toleration.tolerates`)."""
    return toleration.tolerates(taint)


def _taint_mask(table: NodeTable, tolerations: tuple[Toleration, ...]) -> BoolArray | None:
    if not table.taints:
        return None
    untolerated = [
        tid
        for taint, tid in table.taint_id.items()
        if not any(tolerates(t, taint) for t in tolerations)
    ]
    if not untolerated:
        return None
    hard = table.hard_taints[: table.size][:, untolerated]
    admitted: BoolArray = ~np.asarray(hard.any(axis=1), dtype=np.bool_)
    return admitted
