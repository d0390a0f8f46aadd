"""Kubernetes Node objects into model nodes: GPUs, GFD labels, taints, MIG layouts, the trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.io.cluster_traces import alibaba
from gpufleet.io.errors import InputError
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.io.manifests import load_manifests
from gpufleet.io.readers import read_cluster
from gpufleet.model import (
    GFD_LABELS,
    SHARED_GPU_RESOURCE,
    GpuDevice,
    GpuSharing,
    MigSlice,
    SharingStrategy,
    Taint,
    TaintEffect,
)
from tests.io.conftest import WriteFile


def node_object(
    name: str = "gpu-1",
    allocatable: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec or {},
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", **(allocatable or {})}},
    }


H100_LABELS = {
    GFD_LABELS.PRODUCT: "NVIDIA-H100-80GB-HBM3",
    GFD_LABELS.MEMORY: "81559",
    GFD_LABELS.COUNT: "8",
}


def test_gfd_node_with_whole_gpus() -> None:
    node = node_from_object(
        node_object(allocatable={"nvidia.com/gpu": "8", "pods": "110"}, labels=H100_LABELS),
        "nodes.yaml",
    )
    assert (node.name, node.cpu_milli, node.memory_mib) == ("gpu-1", 96_000, 1_048_576)
    assert node.gpus == tuple(GpuDevice(i, "NVIDIA-H100-80GB-HBM3", 81559) for i in range(8))
    assert node.labels[GFD_LABELS.COUNT] == "8"
    assert node.labels[GFD_LABELS.HOSTNAME] == "gpu-1"
    assert node.labels[GFD_LABELS.MIG_CAPABLE] == "true"  # added, it was missing


def test_existing_labels_win_over_gfd_defaults() -> None:
    labels = {**H100_LABELS, GFD_LABELS.MIG_CAPABLE: "false", "team": "research"}
    node = node_from_object(
        node_object(allocatable={"nvidia.com/gpu": 8}, labels=labels), "nodes.yaml"
    )
    assert node.labels[GFD_LABELS.MIG_CAPABLE] == "false"
    assert node.labels["team"] == "research"


def test_taints_and_unschedulable() -> None:
    spec = {
        "unschedulable": True,
        "taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "spot", "effect": "PreferNoSchedule"},
        ],
    }
    node = node_from_object(node_object(spec=spec), "nodes.yaml")
    assert node.taints == (
        Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE),
        Taint("spot", "", TaintEffect.PREFER_NO_SCHEDULE),
    )
    assert node.unschedulable
    assert node.gpus == ()


def test_capacity_when_no_allocatable() -> None:
    obj = node_object()
    obj["status"] = {"capacity": {"cpu": "8", "memory": "32Gi"}}
    node = node_from_object(obj, "nodes.yaml")
    assert (node.cpu_milli, node.memory_mib) == (8000, 32768)


T4 = {GFD_LABELS.PRODUCT: "Tesla-T4", GFD_LABELS.MEMORY: "15360", GFD_LABELS.COUNT: "8"}
TIME_SLICED = {
    **T4,
    GFD_LABELS.PRODUCT: "Tesla-T4-SHARED",
    GFD_LABELS.REPLICAS: "4",
    GFD_LABELS.SHARING_STRATEGY: "time-slicing",
}
HAMI_REGISTER = ":".join(f"GPU-{i},10,15360,100,NVIDIA-Tesla T4,0,true" for i in range(2)) + ":"


@pytest.mark.parametrize(
    ("allocatable", "labels", "annotations", "devices", "sharing"),
    [
        pytest.param(
            {"nvidia.com/gpu": "32"},
            TIME_SLICED,
            {},
            8,
            GpuSharing(SharingStrategy.TIME_SLICING, 4),
            id="time-slicing",
        ),
        pytest.param(
            {"nvidia.com/gpu.shared": "32", "nvidia.com/gpu": "0"},
            {**TIME_SLICED, GFD_LABELS.PRODUCT: "Tesla-T4"},
            {},
            8,
            GpuSharing(SharingStrategy.TIME_SLICING, 4, SHARED_GPU_RESOURCE),
            id="time-slicing-renamed",
        ),
        pytest.param(
            {"nvidia.com/gpu": "32"},
            {**TIME_SLICED, GFD_LABELS.SHARING_STRATEGY: "mps"},
            {},
            8,
            GpuSharing(SharingStrategy.MPS, 4),
            id="mps",
        ),
        pytest.param(
            {"nvidia.com/gpu": "8"},
            {**T4, GFD_LABELS.REPLICAS: "1", GFD_LABELS.SHARING_STRATEGY: "none"},
            {},
            8,
            GpuSharing(),
            id="gfd-says-none",
        ),
        pytest.param(
            {"nvidia.com/gpu": "20"},
            {},
            {"hami.io/node-nvidia-register": HAMI_REGISTER},
            2,
            GpuSharing(SharingStrategy.SPLIT, 10),
            id="hami",
        ),
        pytest.param(
            {"nvidia.com/gpu": "80"},
            T4,
            {},
            8,
            GpuSharing(SharingStrategy.SPLIT, 10),
            id="more-units-than-gpus",
        ),
        pytest.param(
            {"nvidia.com/gpu": "14"},
            {
                GFD_LABELS.PRODUCT: "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb",
                GFD_LABELS.MEMORY: "9728",
                GFD_LABELS.COUNT: "2",
                GFD_LABELS.MIG_STRATEGY: "single",
            },
            {},
            14,
            GpuSharing(),
            id="mig-single-strategy",
        ),
    ],
)
def test_what_the_device_plugin_advertises(
    allocatable: dict[str, str],
    labels: dict[str, str],
    annotations: dict[str, str],
    devices: int,
    sharing: GpuSharing,
) -> None:
    """Issue 11 item 8: time-sliced replicas stay units the kubelet counts (they were folded
    back into devices, so a node of 32 replicas took 8 pods)."""
    node = node_from_object(
        node_object(allocatable=allocatable, labels=labels, annotations=annotations),
        "nodes.yaml",
    )
    assert len(node.gpus) == devices
    assert node.gpu_sharing == sharing
    units = int(next(v for k, v in allocatable.items() if v != "0"))
    assert node.gpu_units == units


def test_time_sliced_devices_keep_their_model_and_memory() -> None:
    node = node_from_object(
        node_object(allocatable={"nvidia.com/gpu": "32"}, labels=TIME_SLICED), "nodes.yaml"
    )
    assert node.gpus[0] == GpuDevice(0, "Tesla-T4", 15360)
    assert node.labels[GFD_LABELS.PRODUCT] == "Tesla-T4-SHARED"  # as GFD wrote it


def test_hami_devices_give_model_and_memory_without_gfd() -> None:
    node = node_from_object(
        node_object(
            allocatable={"nvidia.com/gpu": "20"},
            annotations={"hami.io/node-nvidia-register": HAMI_REGISTER},
        ),
        "nodes.yaml",
    )
    assert node.gpus[1] == GpuDevice(1, "NVIDIA-Tesla-T4", 15360)


@pytest.mark.parametrize(
    ("allocatable", "labels", "annotations", "field", "message"),
    [
        pytest.param(
            {"nvidia.com/gpu": "30"},
            TIME_SLICED,
            {},
            "status.allocatable[nvidia.com/gpu]",
            "so expected a multiple of 4, got 30",
            id="not-a-multiple-of-replicas",
        ),
        pytest.param(
            {"nvidia.com/gpu": "4", "nvidia.com/gpu.shared": "16"},
            TIME_SLICED,
            {},
            "status.allocatable[nvidia.com/gpu.shared]",
            "not both",
            id="both-resources",
        ),
        pytest.param(
            {"nvidia.com/gpu.shared": "16"},
            T4,
            {},
            "metadata.labels[nvidia.com/gpu.replicas]",
            "expected GFD's nvidia.com/gpu.replicas above 1",
            id="shared-without-replicas",
        ),
        pytest.param(
            {"nvidia.com/gpu": "21"},
            {},
            {"hami.io/node-nvidia-register": HAMI_REGISTER},
            "status.allocatable[nvidia.com/gpu]",
            "expected a multiple of the node's 2 GPUs",
            id="hami-not-a-multiple",
        ),
        pytest.param(
            {"nvidia.com/gpu": "20"},
            {},
            {"hami.io/node-nvidia-register": "GPU-0,10"},
            "metadata.annotations[hami.io/node-nvidia-register]",
            "expected 'uuid,count,memory,cores,type,...' per device",
            id="hami-garbled",
        ),
    ],
)
def test_bad_sharing(
    allocatable: dict[str, str],
    labels: dict[str, str],
    annotations: dict[str, str],
    field: str,
    message: str,
) -> None:
    with pytest.raises(InputError) as raised:
        node_from_object(
            node_object(allocatable=allocatable, labels=labels, annotations=annotations),
            "nodes.yaml",
        )
    assert f"Node gpu-1: {field}: " in str(raised.value)
    assert message in str(raised.value)


def slices(*profiles: str) -> tuple[MigSlice, ...]:
    return tuple(MigSlice(p, slot) for slot, p in enumerate(profiles))


def test_mig_counts_spread_first_fit_decreasing() -> None:
    allocatable = {
        "nvidia.com/gpu": "6",
        "nvidia.com/mig-3g.40gb": "2",
        "nvidia.com/mig-2g.20gb": "2",
        "nvidia.com/mig-1g.10gb": "4",
    }
    node = node_from_object(node_object(allocatable=allocatable, labels=H100_LABELS), "nodes.yaml")
    assert [g.index for g in node.gpus] == list(range(8))
    assert all(not g.partitioned for g in node.gpus[:6])
    assert node.gpus[6].mig_slices == slices("3g.40gb", "3g.40gb", "1g.10gb")
    assert node.gpus[7].mig_slices == slices("2g.20gb", "2g.20gb", "1g.10gb", "1g.10gb", "1g.10gb")
    assert node.labels[GFD_LABELS.MIG_STRATEGY] == "mixed"


def test_mig_without_count_label_uses_as_few_devices_as_fit() -> None:
    labels = {GFD_LABELS.PRODUCT: "A100-SXM4-40GB"}
    allocatable = {"nvidia.com/gpu": "1", "nvidia.com/mig-7g.40gb": "1", "nvidia.com/mig-1g.5gb": 7}
    node = node_from_object(node_object(allocatable=allocatable, labels=labels), "nodes.yaml")
    assert [g.mig_slices for g in node.gpus] == [
        (),
        slices("7g.40gb"),
        slices(*["1g.5gb"] * 7),
    ]


def test_mig_layout_annotation_gives_exact_devices() -> None:
    layout = "0:3g.40gb,2g.20gb,1g.10gb,1g.10gb;1:7g.80gb"
    allocatable = {
        "nvidia.com/gpu": "6",
        "nvidia.com/mig-3g.40gb": "1",
        "nvidia.com/mig-2g.20gb": "1",
        "nvidia.com/mig-1g.10gb": "2",
        "nvidia.com/mig-7g.80gb": "1",
    }
    node = node_from_object(
        node_object(
            allocatable=allocatable,
            labels=H100_LABELS,
            annotations={"gpufleet.dev/mig-layout": layout},
        ),
        "nodes.yaml",
    )
    assert node.gpus[0].mig_slices == slices("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    assert node.gpus[1].mig_slices == slices("7g.80gb")
    assert [g.index for g in node.gpus if not g.partitioned] == [2, 3, 4, 5, 6, 7]


def test_mig_layout_annotation_must_match_advertised_counts() -> None:
    obj = node_object(
        allocatable={"nvidia.com/gpu": "7", "nvidia.com/mig-1g.10gb": "7"},
        labels=H100_LABELS,
        annotations={"gpufleet.dev/mig-layout": "7:7g.80gb"},
    )
    with pytest.raises(InputError) as raised:
        node_from_object(obj, "nodes.yaml", "document 1 (line 1)")
    message = str(raised.value)
    assert "nodes.yaml:document 1 (line 1), Node gpu-1" in message
    assert "metadata.annotations[gpufleet.dev/mig-layout]" in message
    assert "the layout has 1x 7g.80gb, but status.allocatable advertises 7x 1g.10gb" in message


def test_mig_slices_that_do_not_fit_the_partitioned_devices() -> None:
    obj = node_object(
        allocatable={"nvidia.com/gpu": "7", "nvidia.com/mig-3g.40gb": "3"}, labels=H100_LABELS
    )
    with pytest.raises(InputError, match=r"do not fit on 1 partitioned GPU.*mig-layout"):
        node_from_object(obj, "nodes.yaml")


def test_gpu_node_without_model_label() -> None:
    with pytest.raises(InputError, match=r"metadata.labels\[nvidia.com/gpu.product\]: required"):
        node_from_object(node_object(allocatable={"nvidia.com/gpu": 2}), "nodes.yaml")


def test_multi_document_file_and_list(write_file: WriteFile) -> None:
    path = write_file(
        "nodes.yaml",
        """
        apiVersion: v1
        kind: List
        items:
          - apiVersion: v1
            kind: Node
            metadata: {name: a}
            status: {allocatable: {cpu: "4", memory: 16Gi}}
          - apiVersion: v1
            kind: Node
            metadata: {name: b}
            status: {allocatable: {cpu: "8", memory: 32Gi}}
        ---
        ---
        apiVersion: v1
        kind: Node
        metadata: {name: c}
        status: {allocatable: {cpu: 500m, memory: 1Gi}}
        """,
    )
    manifests = load_manifests(path)
    assert [m.location for m in manifests] == [
        "document 1, items[0] (line 4)",
        "document 1, items[1] (line 8)",
        "document 3 (line 14)",
    ]
    assert [n.name for n in read_cluster(path)] == ["a", "b", "c"]


def test_json_objects(write_file: WriteFile) -> None:
    obj = node_object(name="from-json")
    path = write_file("nodes.json", json.dumps({"kind": "List", "items": [obj]}))
    assert node_from_object(json.loads(json.dumps(obj)), "x.json").name == "from-json"
    assert [n.name for n in read_cluster(path)] == ["from-json"]


def test_duplicate_node_names(write_file: WriteFile) -> None:
    node = "kind: Node\nmetadata: {name: a}\nstatus: {allocatable: {cpu: 1, memory: 1Gi}}\n"
    path = write_file("nodes.yaml", f"{node}---\n{node}")
    with pytest.raises(InputError) as raised:
        read_cluster(path)
    assert str(raised.value) == (
        f"{path}:document 2 (line 5): node 'a' appears twice (first in {path}:document 1 (line 1))"
    )


@pytest.mark.trace
def test_alibaba_node_yaml(alibaba_trace: Path, alibaba_node_yaml: Path) -> None:
    nodes = read_cluster(alibaba_node_yaml)
    assert len(nodes) == 1213
    assert sum(n.gpu_count for n in nodes) == 6212
    first = nodes[0]
    assert first.gpus[0] == GpuDevice(0, "P100", 16_384)
    assert first.labels["alibabacloud.com/gpu-card-model"] == "P100"
    assert first.labels[GFD_LABELS.PRODUCT] == "P100"
    csv_nodes = alibaba.read_nodes(alibaba_trace / "csv" / "openb_node_list_gpu_node.csv")
    assert nodes == csv_nodes  # the same cluster, whichever file it is read from
