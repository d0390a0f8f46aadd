"""One Kubernetes Node object as a model :class:`~gpufleet.model.Node`.

Owns the reading of a Node as ``kubectl get node -o yaml`` (or the Alibaba trace's node YAML)
writes it: allocatable CPU and memory, whole GPUs (``nvidia.com/gpu``, or
``alibabacloud.com/gpu-count``), MIG slices of the mixed strategy (``nvidia.com/mig-<profile>``)
laid out on devices, time-slicing replicas folded back into physical devices, the GPU model and
memory from GPU Feature Discovery labels, other extended resources of ``status.allocatable``
(``rdma/hca``, ``amd.com/gpu``: ``kube_resources.is_extended_resource``), labels and taints.
It does not read files or check
that node names are unique across a file (``kubernetes.read_nodes`` does), and it does not
model what is in use on the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.io.alibaba import GPU_MEMORY_MIB as ALIBABA_GPU_MEMORY_MIB
from gpufleet.io.kube_resources import is_extended_resource
from gpufleet.io.manifests import Context, describe, object_name
from gpufleet.io.mig_layout import (
    MIG_RESOURCE_PREFIX,
    first_fit_decreasing,
    layout_counts,
    parse_mig_layout,
    summarize,
)
from gpufleet.io.quantities import parse_count, parse_cpu_milli, parse_memory_mib
from gpufleet.model import GFD_LABELS, GpuDevice, MigSlice, Node, Taint, TaintEffect, gfd_labels
from gpufleet.model.gpu import parse_mig_profile

MIG_LAYOUT_ANNOTATION = "gpufleet.dev/mig-layout"
GPU_RESOURCE = "nvidia.com/gpu"
ALIBABA_GPU_COUNT = "alibabacloud.com/gpu-count"
ALIBABA_MODEL_LABEL = "alibabacloud.com/gpu-card-model"
#: The Alibaba trace's GPU resources (counted as GPUs, never as extended resources).
ALIBABA_GPU_PREFIX = "alibabacloud.com/gpu"
#: Set by GPU Feature Discovery when the device plugin time-slices each GPU into N replicas.
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
#: GFD appends this to the product name of time-sliced GPUs (renameByDefault: false).
SHARED_SUFFIX = "-SHARED"
_EFFECT_VALUES = frozenset(e.value for e in TaintEffect)
_EFFECTS = ", ".join(e.value for e in TaintEffect)


def node_from_object(obj: Mapping[str, Any], source: str, location: str | None = None) -> Node:
    """A model Node from one Node object; errors name ``source``, ``location`` and the node."""
    context = Context(source, location)
    kind = obj.get("kind")
    if kind != "Node":
        raise context.error("kind", f"expected a Node, got kind {describe(kind)}")
    name, _ = object_name(context, obj, "Node")
    context = context.naming(f"Node {name}")
    metadata = context.mapping(obj.get("metadata"), "metadata")
    labels = context.string_map(metadata.get("labels"), "metadata.labels")
    annotations = context.string_map(metadata.get("annotations"), "metadata.annotations")

    status = context.mapping(obj.get("status"), "status")
    key = "allocatable" if status.get("allocatable") else "capacity"
    field = f"status.{key}"
    resources = context.mapping(status.get(key), field)
    if not resources:
        raise context.error(
            "status.allocatable",
            "required: expected the node's allocatable resources (cpu, memory, nvidia.com/gpu), "
            "got nothing (and no status.capacity either)",
        )
    cpu = context.parse(
        parse_cpu_milli, _required(context, resources, field, "cpu"), f"{field}[cpu]"
    )
    memory = context.parse(
        parse_memory_mib, _required(context, resources, field, "memory"), f"{field}[memory]"
    )
    gpus = _gpus(context, labels, annotations, resources, field)
    extended = tuple(
        sorted(
            (key, context.parse(parse_count, value, f"{field}[{key}]"))
            for key, value in resources.items()
            if is_extended_resource(key) and not key.startswith(ALIBABA_GPU_PREFIX)
        )
    )

    spec = context.mapping(obj.get("spec"), "spec")
    unschedulable = spec.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        raise context.error(
            "spec.unschedulable", f"expected true or false, got {describe(unschedulable)}"
        )
    defaults = {GFD_LABELS.HOSTNAME: name, **gfd_labels(gpus)}
    return Node(
        name,
        cpu,
        memory,
        gpus,
        {**defaults, **labels},
        _taints(context, spec.get("taints")),
        unschedulable,
        tuple((key, count) for key, count in extended if count),
    )


def _required(context: Context, resources: Mapping[str, Any], field: str, key: str) -> object:
    if resources.get(key) is None:
        raise context.error(f"{field}[{key}]", "required, but missing")
    return resources[key]


def _label_int(context: Context, labels: Mapping[str, str], key: str) -> int | None:
    text = labels.get(key)
    if text is None:
        return None
    if not text.strip().isdigit():
        raise context.error(f"metadata.labels[{key}]", f"expected a whole number, got {text!r}")
    return int(text)


def _gpus(
    context: Context,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    resources: Mapping[str, Any],
    field: str,
) -> tuple[GpuDevice, ...]:
    whole = 0
    for key in (GPU_RESOURCE, ALIBABA_GPU_COUNT):
        if key in resources:
            whole = context.parse(parse_count, resources[key], f"{field}[{key}]")
            break
    replicas = _label_int(context, labels, REPLICAS_LABEL)
    if replicas is not None and replicas > 1:
        if whole % replicas:
            raise context.error(
                f"{field}[{GPU_RESOURCE}]",
                f"time-slicing advertises {replicas} replicas per GPU "
                f"({REPLICAS_LABEL}), so expected a multiple of {replicas}, got {whole}",
            )
        whole //= replicas
    mig_counts: dict[str, int] = {}
    for key, value in resources.items():
        if key.startswith(MIG_RESOURCE_PREFIX):
            profile = context.parse(parse_mig_profile, key, f"{field}[{key}]")
            count = context.parse(parse_count, value, f"{field}[{key}]")
            if count:
                mig_counts[profile.name] = mig_counts.get(profile.name, 0) + count
    layout_text = annotations.get(MIG_LAYOUT_ANNOTATION)
    if not whole and not mig_counts and layout_text is None:
        return ()

    model_key = GFD_LABELS.PRODUCT if GFD_LABELS.PRODUCT in labels else ALIBABA_MODEL_LABEL
    model = labels.get(model_key, "").removesuffix(SHARED_SUFFIX)
    if not model:
        raise context.error(
            f"metadata.labels[{GFD_LABELS.PRODUCT}]",
            "required for a node with GPUs: expected the GPU model (GPU Feature Discovery "
            "sets this label), got nothing",
        )
    memory = _label_int(context, labels, GFD_LABELS.MEMORY)
    if memory is None:
        memory = ALIBABA_GPU_MEMORY_MIB.get(model, 0) if model_key == ALIBABA_MODEL_LABEL else 0
    count_label = _label_int(context, labels, GFD_LABELS.COUNT)
    if count_label is not None and count_label < whole:
        raise context.error(
            f"metadata.labels[{GFD_LABELS.COUNT}]",
            f"expected at least the {whole} whole GPUs of {field}[{GPU_RESOURCE}], "
            f"got {count_label}",
        )

    if layout_text is not None:
        layout = _annotated_layout(context, layout_text, mig_counts, field)
    else:
        spare = None if count_label is None else count_label - whole
        try:
            spread = first_fit_decreasing(mig_counts, spare)
        except ValueError as error:
            hint = f"; nvidia.com/gpu.count is {count_label} and {whole} GPUs are whole"
            raise context.error(
                field,
                f"{error}{hint}; give the exact layout in the annotation {MIG_LAYOUT_ANNOTATION}",
            ) from None
        layout = {whole + i: profiles for i, profiles in enumerate(spread)}

    devices = [
        GpuDevice(index, model, memory, tuple(MigSlice(p, slot) for slot, p in enumerate(profiles)))
        for index, profiles in layout.items()
    ]
    free_indices = (i for i in range(whole + len(layout)) if i not in layout)
    devices.extend(GpuDevice(next(free_indices), model, memory) for _ in range(whole))
    total = whole + len(layout)
    highest = max(d.index for d in devices)
    if count_label is not None and (total > count_label or highest >= count_label):
        raise context.error(
            f"metadata.labels[{GFD_LABELS.COUNT}]",
            f"expected at least {max(total, highest + 1)} GPUs ({whole} whole, MIG layout on "
            f"devices {', '.join(map(str, sorted(layout))) or 'none'}), got {count_label}",
        )
    return tuple(sorted(devices, key=lambda d: d.index))


def _annotated_layout(
    context: Context, text: str, advertised: Mapping[str, int], field: str
) -> dict[int, tuple[str, ...]]:
    where = f"metadata.annotations[{MIG_LAYOUT_ANNOTATION}]"
    layout = context.parse(parse_mig_layout, text, where)
    counts = layout_counts(layout)
    if advertised and counts != advertised:
        raise context.error(
            where,
            f"the layout has {summarize(counts)}, but {field} advertises {summarize(advertised)}",
        )
    return layout


def _taints(context: Context, value: object) -> tuple[Taint, ...]:
    taints: list[Taint] = []
    for i, item in enumerate(context.sequence(value, "spec.taints")):
        where = f"spec.taints[{i}]"
        entry = context.mapping(item, where)
        key = context.text(entry.get("key"), f"{where}.key")
        effect = context.text(entry.get("effect"), f"{where}.effect")
        if effect not in _EFFECT_VALUES:
            raise context.error(f"{where}.effect", f"expected one of {_EFFECTS}, got {effect!r}")
        taints.append(
            Taint(key, context.text(entry.get("value"), f"{where}.value", ""), TaintEffect(effect))
        )
    return tuple(taints)
