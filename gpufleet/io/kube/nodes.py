"""One Kubernetes Node object as a model :class:`~gpufleet.model.Node`.

Owns the reading of a Node as ``kubectl get node -o yaml`` (or the Alibaba trace's node YAML)
writes it: allocatable CPU and memory, GPUs, the GPU model and memory from GPU Feature
Discovery labels, other extended resources of ``status.allocatable`` (``rdma/hca``,
``amd.com/gpu``: ``kube.resources.is_extended_resource``), labels and taints. What the device
plugin advertises decides the GPUs (:class:`~gpufleet.model.GpuSharing`; what a pod holds of
them: :mod:`gpufleet.model.sharing`):

* ``nvidia.com/gpu: N`` (or ``alibabacloud.com/gpu-count``): N devices, one unit each;
* time-slicing or MPS, told by GFD's ``nvidia.com/gpu.replicas: R`` (and
  ``nvidia.com/gpu.sharing-strategy``; the product's ``-SHARED`` suffix is dropped): N / R
  devices of R replicas, advertised as ``nvidia.com/gpu`` or, with ``renameByDefault``, as
  ``nvidia.com/gpu.shared``;
* HAMi (its ``hami.io/node-nvidia-register`` annotation), or more units than GFD's
  ``nvidia.com/gpu.count`` without a replicas label: N / count devices of that many units
  each, a unit being a whole device unless the pod asks for a share;
* MIG, mixed strategy: slices of ``nvidia.com/mig-<profile>`` laid out on devices (or as the
  ``gpufleet.dev/mig-layout`` annotation says); single strategy (a product ending in
  ``-MIG-<profile>``): every unit of ``nvidia.com/gpu`` is a MIG device, held whole;
* gpufleet's node agent's ``gpufleet.dev/gpu-inventory`` annotation, where present, says
  which devices there are (index, product, memory, UUID, health, MIG instances:
  :mod:`gpufleet.io.kube.node_inventory`), taking precedence over the counts above, which the
  kubelet lowers for unhealthy devices; how they are shared is read from the labels as above.

``gpufleet.dev/gpu-share`` (the agent's share slots) is an extended resource like any other.

A node takes no new pods when it is cordoned (``spec.unschedulable``) or carries a taint that
announces its end (:mod:`.node_ends`: being removed by the cluster autoscaler or Karpenter,
about to be terminated, unreachable, not ready): it is read as unschedulable, with the reason
``explain`` gives (the end's, before the cordon's), whatever the pods tolerate.

It does not read files or check that node names are unique across a file
(``kubernetes.read_nodes`` does), and it does not model what is in use on the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.io.cluster_traces.alibaba import GPU_MEMORY_MIB as ALIBABA_GPU_MEMORY_MIB
from gpufleet.io.errors import quoted
from gpufleet.io.kube.annotations import INVENTORY_ANNOTATION
from gpufleet.io.kube.mig_layout import (
    MIG_RESOURCE_PREFIX,
    first_fit_decreasing,
    layout_counts,
    parse_mig_layout,
    summarize,
)
from gpufleet.io.kube.node_ends import going_away
from gpufleet.io.kube.node_inventory import inventory_devices, read_inventory
from gpufleet.io.kube.resources import is_extended_resource
from gpufleet.io.manifests import Context, describe, object_name
from gpufleet.io.quantities import parse_count, parse_cpu_milli, parse_memory_mib
from gpufleet.model import (
    GFD_LABELS,
    GPU_RESOURCE,
    NO_SHARING,
    SHARED_GPU_RESOURCE,
    GpuDevice,
    GpuSharing,
    MigSlice,
    Node,
    SharingStrategy,
    Taint,
    TaintEffect,
    gfd_labels,
)
from gpufleet.model.gpu import parse_mig_profile
from gpufleet.model.node import SHARED_PRODUCT_SUFFIX

MIG_LAYOUT_ANNOTATION = "gpufleet.dev/mig-layout"
ALIBABA_GPU_COUNT = "alibabacloud.com/gpu-count"
ALIBABA_MODEL_LABEL = "alibabacloud.com/gpu-card-model"
#: The Alibaba trace's GPU resources (counted as GPUs, never as extended resources).
ALIBABA_GPU_PREFIX = "alibabacloud.com/gpu"
#: Set by GPU Feature Discovery when the device plugin time-slices each GPU into N replicas.
REPLICAS_LABEL = GFD_LABELS.REPLICAS
#: GFD appends this to the product name of time-sliced GPUs (renameByDefault: false).
SHARED_SUFFIX = SHARED_PRODUCT_SUFFIX
#: HAMi's device plugin registers its devices here: ``uuid,count,memory,cores,type,numa,
#: health`` per device, devices separated by ``:``.
HAMI_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
#: GFD's product suffix for the MIG devices of the single strategy.
MIG_SINGLE_MARK = "-MIG-"
_SHARING_STRATEGIES = {SharingStrategy.TIME_SLICING.value, SharingStrategy.MPS.value}
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
    labels = context.labels(metadata.get("labels"), "metadata.labels")
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
    gpus, sharing = _gpus(context, labels, annotations, resources, field)
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
    defaults = {GFD_LABELS.HOSTNAME: name, **gfd_labels(gpus, sharing)}
    taints = _taints(context, spec.get("taints"))
    ending = going_away(taints)
    return Node(
        name,
        cpu,
        memory,
        gpus,
        {**defaults, **labels},
        taints,
        unschedulable or ending is not None,
        unschedulable_reason="" if ending is None else ending.reason,
        extended=tuple((key, count) for key, count in extended if count),
        gpu_sharing=sharing,
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
        raise context.error(
            f"metadata.labels[{key}]", f"expected a whole number, got {quoted(text)}"
        )
    return int(text)


def _gpus(
    context: Context,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    resources: Mapping[str, Any],
    field: str,
) -> tuple[tuple[GpuDevice, ...], GpuSharing]:
    units = {
        key: context.parse(parse_count, resources[key], f"{field}[{key}]")
        for key in (GPU_RESOURCE, SHARED_GPU_RESOURCE, ALIBABA_GPU_COUNT)
        if key in resources
    }
    if units.get(GPU_RESOURCE) and units.get(SHARED_GPU_RESOURCE):
        raise context.error(
            f"{field}[{SHARED_GPU_RESOURCE}]",
            f"expected {GPU_RESOURCE} or {SHARED_GPU_RESOURCE} (time-slicing with "
            f"renameByDefault), not both: gpufleet reads one GPU resource per node",
        )
    resource = SHARED_GPU_RESOURCE if units.get(SHARED_GPU_RESOURCE) else GPU_RESOURCE
    advertised = next((units[k] for k in (resource, ALIBABA_GPU_COUNT) if units.get(k)), 0)
    hami_text = annotations.get(HAMI_REGISTER_ANNOTATION)
    hami = _hami_devices(context, hami_text) if hami_text is not None else None
    inventory_text = annotations.get(INVENTORY_ANNOTATION)
    if inventory_text is not None:
        devices = inventory_devices(context, read_inventory(context, inventory_text))
        sharing = _inventory_sharing(context, labels, devices, resource, field)
        return devices, sharing if devices else NO_SHARING
    whole, sharing = _sharing(context, labels, hami, resource, advertised, field)
    devices = _devices(context, labels, annotations, resources, field, whole, hami)
    return devices, sharing if devices else NO_SHARING


def _sharing(
    context: Context,
    labels: Mapping[str, str],
    hami: list[tuple[str, int]] | None,
    resource: str,
    advertised: int,
    field: str,
) -> tuple[int, GpuSharing]:
    """(devices advertised as units, how they are shared) from the advertised count and the
    labels (and HAMi's registered devices, if any)."""
    where = f"{field}[{resource}]"
    replicas = _label_int(context, labels, REPLICAS_LABEL) or 1
    strategy = labels.get(GFD_LABELS.SHARING_STRATEGY, SharingStrategy.TIME_SLICING.value)
    if replicas > 1 and strategy in _SHARING_STRATEGIES:
        if advertised % replicas:
            raise context.error(
                where,
                f"time-slicing advertises {replicas} replicas per GPU "
                f"({REPLICAS_LABEL}), so expected a multiple of {replicas}, got {advertised}",
            )
        sharing = context.parse(
            lambda r: GpuSharing(SharingStrategy(strategy), r, resource), replicas, where
        )
        return advertised // replicas, sharing
    if resource == SHARED_GPU_RESOURCE:
        raise context.error(
            f"metadata.labels[{REPLICAS_LABEL}]",
            f"{SHARED_GPU_RESOURCE} is advertised by time-slicing or MPS: expected GFD's "
            f"{REPLICAS_LABEL} above 1 and {GFD_LABELS.SHARING_STRATEGY} time-slicing or mps",
        )
    if not advertised:
        return 0, NO_SHARING
    if hami is not None:
        devices = len(hami)
    else:
        count = _label_int(context, labels, GFD_LABELS.COUNT)
        if _mig_single(labels) or count is None or advertised <= count:
            return advertised, NO_SHARING
        devices = count
    if not devices or advertised % devices:
        raise context.error(
            where,
            f"expected a multiple of the node's {devices} GPUs (units per GPU, as HAMi's "
            f"deviceSplitCount advertises them), got {advertised}",
        )
    split = advertised // devices
    if split == 1:
        return devices, NO_SHARING
    sharing = context.parse(lambda r: GpuSharing(SharingStrategy.SPLIT, r), split, where)
    return devices, sharing


def _inventory_sharing(
    context: Context,
    labels: Mapping[str, str],
    devices: tuple[GpuDevice, ...],
    resource: str,
    field: str,
) -> GpuSharing:
    """How the inventory's devices are shared: time-slicing or MPS as GFD's labels say, else
    not at all. The advertised count is never read into devices or sharing: the kubelet drops
    an unhealthy device's units, and its status is written apart from the agent's annotation,
    so for a moment the two disagree (a count between the healthy and all devices, or one from
    before the last change); the agent's inventory and labels are the truth."""
    where = f"{field}[{resource}]"
    replicas = _label_int(context, labels, REPLICAS_LABEL) or 1
    strategy = labels.get(GFD_LABELS.SHARING_STRATEGY, SharingStrategy.TIME_SLICING.value)
    if replicas > 1 and strategy in _SHARING_STRATEGIES:
        return context.parse(
            lambda r: GpuSharing(SharingStrategy(strategy), r, resource), replicas, where
        )
    if resource == SHARED_GPU_RESOURCE:
        raise context.error(
            f"metadata.labels[{REPLICAS_LABEL}]",
            f"{SHARED_GPU_RESOURCE} is advertised by time-slicing or MPS: expected GFD's "
            f"{REPLICAS_LABEL} above 1 and {GFD_LABELS.SHARING_STRATEGY} time-slicing or mps",
        )
    return NO_SHARING


def _hami_devices(context: Context, text: str) -> list[tuple[str, int]]:
    """(type, memory MiB) of each device HAMi registered."""
    where = f"metadata.annotations[{HAMI_REGISTER_ANNOTATION}]"
    devices: list[tuple[str, int]] = []
    for entry in (e for e in text.split(":") if e.strip()):
        fields = [f.strip() for f in entry.split(",")]
        if len(fields) < 5 or not fields[2].isdigit():
            raise context.error(
                where,
                "expected 'uuid,count,memory,cores,type,...' per device, separated by ':', "
                f"got {quoted(text[:200])}",
            )
        devices.append((fields[4].replace(" ", "-"), int(fields[2])))
    return devices


def _mig_single(labels: Mapping[str, str]) -> bool:
    """The MIG single strategy: every unit of nvidia.com/gpu is one MIG device."""
    return MIG_SINGLE_MARK in labels.get(GFD_LABELS.PRODUCT, "")


def _devices(
    context: Context,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    resources: Mapping[str, Any],
    field: str,
    whole: int,
    hami: list[tuple[str, int]] | None,
) -> tuple[GpuDevice, ...]:
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
    if not model and hami:
        model = hami[0][0]
    if not model:
        raise context.error(
            f"metadata.labels[{GFD_LABELS.PRODUCT}]",
            "required for a node with GPUs: expected the GPU model (GPU Feature Discovery "
            "sets this label), got nothing",
        )
    memory = _label_int(context, labels, GFD_LABELS.MEMORY)
    if memory is None and hami:
        memory = min(m for _, m in hami)
    if memory is None:
        memory = ALIBABA_GPU_MEMORY_MIB.get(model, 0) if model_key == ALIBABA_MODEL_LABEL else 0
    # With the single strategy GFD counts physical GPUs, not the MIG devices advertised.
    count_label = None if _mig_single(labels) else _label_int(context, labels, GFD_LABELS.COUNT)
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
        key = context.label_key(context.text(entry.get("key"), f"{where}.key"), f"{where}.key")
        effect = context.text(entry.get("effect"), f"{where}.effect")
        if effect not in _EFFECT_VALUES:
            raise context.error(
                f"{where}.effect", f"expected one of {_EFFECTS}, got {quoted(effect)}"
            )
        taints.append(
            Taint(key, context.text(entry.get("value"), f"{where}.value", ""), TaintEffect(effect))
        )
    return tuple(taints)
