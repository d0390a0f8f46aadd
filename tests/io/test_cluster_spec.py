"""The ClusterSpec format: pools into nodes, topology labels, MIG, validation, and back."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.io.cluster_traces import alibaba
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.cluster_spec import (
    cluster_spec_from_dict,
    nodes_to_cluster_spec,
    read_cluster_spec,
)
from gpufleet.model import (
    GFD_LABELS,
    SHARED_GPU_RESOURCE,
    GpuDevice,
    GpuSharing,
    MigSlice,
    Node,
    SharingStrategy,
    Taint,
    TaintEffect,
)
from tests.io.conftest import WriteFile

SPEC = """
apiVersion: gpufleet.dev/v1alpha1
kind: ClusterSpec
metadata: {name: example}
spec:
  pools:
    - name: h100
      count: 3
      cpu: "96"
      memory: 1Ti
      gpu: {model: H100, count: 8, memory: 80Gi}
      mig:
        devices: [6, 7]
        layout: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]
      labels: {team: research}
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      topology: {zone: zone-a, nodesPerRack: 2}
    - name: t4
      namePrefix: edge-t4-
      count: 2
      cpu: 32000m
      memory: 128Gi
      gpu: {model: T4, count: 4}
      topology: {nodesPerNvlinkDomain: 2}
    - name: cpu
      count: 1
      cpu: 8
      memory: 32Gi
"""


def spec_dict() -> dict[str, Any]:
    data = yaml.safe_load(SPEC)
    assert isinstance(data, dict)
    return data


def test_pools_become_nodes(write_file: WriteFile) -> None:
    nodes = read_cluster_spec(write_file("cluster.yaml", SPEC))
    assert [n.name for n in nodes] == [
        "h100-0000",
        "h100-0001",
        "h100-0002",
        "edge-t4-0000",
        "edge-t4-0001",
        "cpu-0000",
    ]
    h100 = nodes[0]
    assert (h100.cpu_milli, h100.memory_mib, h100.gpu_count) == (96_000, 1_048_576, 8)
    assert h100.taints == (Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE),)
    assert h100.gpus[0] == GpuDevice(0, "H100", 81_920)
    t4 = nodes[3]
    assert (t4.cpu_milli, t4.gpus[0].memory_mib) == (32_000, 0)
    assert nodes[5].gpus == ()


def test_mig_devices_are_partitioned() -> None:
    gpus = cluster_spec_from_dict(spec_dict(), "cluster.yaml")[0].gpus
    layout = tuple(
        MigSlice(p, slot) for slot, p in enumerate(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    )
    assert [g.mig_slices for g in gpus] == [()] * 6 + [layout, layout]


def test_labels() -> None:
    nodes = cluster_spec_from_dict(spec_dict(), "cluster.yaml")
    labels = [dict(n.labels) for n in nodes]
    assert labels[0] == {
        GFD_LABELS.HOSTNAME: "h100-0000",
        GFD_LABELS.OS: "linux",
        GFD_LABELS.ARCH: "amd64",
        GFD_LABELS.REGION: "zone",
        GFD_LABELS.PRODUCT: "H100",
        GFD_LABELS.MEMORY: "81920",
        GFD_LABELS.COUNT: "8",
        GFD_LABELS.MIG_CAPABLE: "true",
        GFD_LABELS.MIG_STRATEGY: "mixed",
        GFD_LABELS.ZONE: "zone-a",
        GFD_LABELS.RACK: "h100-rack-0",
        GFD_LABELS.NVLINK_DOMAIN: "h100-nvl-0",
        "team": "research",
    }
    assert [d[GFD_LABELS.RACK] for d in labels[:3]] == ["h100-rack-0", "h100-rack-0", "h100-rack-1"]
    assert [d[GFD_LABELS.NVLINK_DOMAIN] for d in labels[:3]] == [
        "h100-nvl-0",
        "h100-nvl-1",
        "h100-nvl-2",
    ]
    assert [d[GFD_LABELS.NVLINK_DOMAIN] for d in labels[3:5]] == ["t4-nvl-0", "t4-nvl-0"]
    assert GFD_LABELS.ZONE not in labels[3]
    assert GFD_LABELS.RACK not in labels[3]
    assert labels[5] == {
        GFD_LABELS.HOSTNAME: "cpu-0000",
        GFD_LABELS.OS: "linux",
        GFD_LABELS.ARCH: "amd64",
    }


def edit(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    data = spec_dict()
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def with_duplicate_pool() -> dict[str, Any]:
    data = spec_dict()
    data["spec"]["pools"].append(copy.deepcopy(data["spec"]["pools"][2]))
    return data


@pytest.mark.parametrize(
    ("data", "location", "field", "message"),
    [
        pytest.param(
            edit(("spec", "pools", 0, "count"), 0),
            "ClusterSpec example, pool h100",
            "spec.pools[0].count",
            "Input should be greater than or equal to 1, got the number 0",
            id="count-zero",
        ),
        pytest.param(
            edit(("spec", "pools", 0, "mig", "layout"), ["4g.40gb", "3g.40gb", "1g.10gb"]),
            "ClusterSpec example, pool h100",
            "spec.pools[0].mig.layout",
            "4g.40gb, 3g.40gb, 1g.10gb need 8 compute slices; one GPU has 7",
            id="mig-does-not-fit",
        ),
        pytest.param(
            edit(("spec", "pools", 0, "mig", "devices"), [6, 8]),
            "ClusterSpec example, pool h100",
            "spec.pools[0]",
            "mig.devices [8] are outside the pool's 8 GPUs",
            id="mig-device-outside",
        ),
        pytest.param(
            edit(("spec", "pools", 2, "mig"), {"devices": [0], "layout": ["1g.10gb"]}),
            "ClusterSpec example, pool cpu",
            "spec.pools[2]",
            "mig needs gpu",
            id="mig-without-gpu",
        ),
        pytest.param(
            with_duplicate_pool(),
            "ClusterSpec example",
            "spec.pools",
            "pool name(s) cpu used more than once",
            id="duplicate-pool",
        ),
        pytest.param(
            edit(("spec", "pools", 1, "gpus"), 4),
            "ClusterSpec example, pool t4",
            "spec.pools[1].gpus",
            "unknown field; did you mean 'gpu'?",
            id="unknown-field-close-to-a-known-one",
        ),
        pytest.param(
            edit(("spec", "pools", 1, "zone"), "a"),
            "ClusterSpec example, pool t4",
            "spec.pools[1].zone",
            "unknown field (expected one of: name, namePrefix, count, cpu, memory, gpu, mig,",
            id="unknown-field",
        ),
        pytest.param(
            edit(("spec", "pools", 1, "memory"), "lots"),
            "ClusterSpec example, pool t4",
            "spec.pools[1].memory",
            "not a Kubernetes quantity: 'lots'",
            id="bad-quantity",
        ),
        pytest.param(
            edit(("spec", "pools", 0, "taints", 0, "effect"), "Never"),
            "ClusterSpec example, pool h100",
            "spec.pools[0].taints[0].effect",
            "Input should be 'NoSchedule', 'PreferNoSchedule' or 'NoExecute', got 'Never'",
            id="taint-effect",
        ),
        pytest.param(
            edit(("spec", "pools", 2, "extendedResources"), {"cpu": 1}),
            "ClusterSpec example, pool cpu",
            "spec.pools[2].extendedResources",
            "'cpu' is not an extended resource (expected a vendor/name such as rdma/hca",
            id="extended-resource-name",
        ),
        pytest.param(
            edit(("spec", "pools", 2, "extendedResources"), {"rdma/hca": "0.5"}),
            "ClusterSpec example, pool cpu",
            "spec.pools[2].extendedResources[rdma/hca]",
            "expected a whole number, got '0.5'",
            id="extended-resource-fraction",
        ),
        pytest.param(
            edit(("apiVersion",), "v1"),
            "ClusterSpec example",
            "apiVersion",
            "Input should be 'gpufleet.dev/v1alpha1', got 'v1'",
            id="api-version",
        ),
        pytest.param(
            edit(("spec", "pools", 1, "namePrefix"), "cpu-"),
            "ClusterSpec example",
            "spec.pools",
            "node name 'cpu-0000' is produced twice",
            id="node-names-collide",
        ),
    ],
)
def test_invalid_specs(data: dict[str, Any], location: str, field: str, message: str) -> None:
    with pytest.raises(InputError) as raised:
        cluster_spec_from_dict(data, "cluster.yaml", "document 1 (line 1)")
    error = raised.value
    assert str(error).startswith(f"cluster.yaml:document 1 (line 1), {location}: {field}: ")
    assert message in error.reason


def test_file_errors_name_the_document(write_file: WriteFile) -> None:
    path = write_file("cluster.yaml", "# header\n" + SPEC.replace("count: 3", "count: -3"))
    with pytest.raises(InputError, match=r"cluster.yaml:document 1 \(line 3\), ClusterSpec ex"):
        read_cluster_spec(path)


def shape_counts(nodes: list[Node]) -> Counter[tuple[object, ...]]:
    return Counter((n.cpu_milli, n.memory_mib, n.gpus, n.taints) for n in nodes)


def test_nodes_to_cluster_spec_round_trip() -> None:
    nodes = cluster_spec_from_dict(spec_dict(), "cluster.yaml")
    spec = nodes_to_cluster_spec(nodes, "again")
    assert [(p["name"], p["count"]) for p in spec["spec"]["pools"]] == [
        ("h100-x8-mig-96c-1ti", 3),
        ("t4-x4-32c-128gi", 2),
        ("cpu-8c-32gi", 1),
    ]
    assert spec["spec"]["pools"][0]["mig"] == {
        "devices": [6, 7],
        "layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
    }
    again = cluster_spec_from_dict(yaml.safe_load(yaml.safe_dump(spec)), "again.yaml")
    assert shape_counts(again) == shape_counts(nodes)
    assert again[0].labels["team"] == "research"
    assert again[0].labels[GFD_LABELS.ZONE] == "zone-a"


def test_extended_resources_of_a_pool_and_back() -> None:
    data = edit(("spec", "pools", 2, "extendedResources"), {"rdma/hca": 2, "example.com/f": "1k"})
    nodes = cluster_spec_from_dict(data, "cluster.yaml")
    assert nodes[-1].extended == (("example.com/f", 1000), ("rdma/hca", 2))
    assert all(n.extended == () for n in nodes[:-1])
    spec = nodes_to_cluster_spec(nodes, "again")
    assert spec["spec"]["pools"][-1]["extendedResources"] == {"example.com/f": 1000, "rdma/hca": 2}
    again = cluster_spec_from_dict(yaml.safe_load(yaml.safe_dump(spec)), "again.yaml")
    assert [n.extended for n in again] == [n.extended for n in nodes]


def test_nodes_to_cluster_spec_refuses_mixed_gpus() -> None:
    mixed = Node("n", 1000, 1024, (GpuDevice(0, "A100", 0), GpuDevice(1, "H100", 0)))
    with pytest.raises(ValueError, match="different models"):
        nodes_to_cluster_spec([mixed], "x")


@pytest.mark.trace
def test_alibaba_cluster_as_spec(alibaba_trace: Path) -> None:
    nodes = alibaba.read_nodes(alibaba_trace / "csv" / "openb_node_list_all_node.csv")
    spec = nodes_to_cluster_spec(nodes, "alibaba-openb")
    assert sum(p["count"] for p in spec["spec"]["pools"]) == len(nodes) == 1523
    again = cluster_spec_from_dict(spec, "alibaba.yaml")
    assert shape_counts(again) == shape_counts(nodes)


DEVICE_PLUGIN = """
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


@pytest.mark.parametrize(
    ("fields", "sharing", "product"),
    [
        pytest.param(
            {"devicePlugin": yaml.safe_load(DEVICE_PLUGIN)},
            GpuSharing(SharingStrategy.TIME_SLICING, 4, one_unit_per_pod=True),
            "T4-SHARED",
            id="the-configmap-data",
        ),
        pytest.param(
            {
                "devicePlugin": {
                    "version": "v1",
                    "sharing": {
                        "mps": {
                            "renameByDefault": True,
                            "resources": [{"name": "nvidia.com/gpu", "replicas": 2}],
                        }
                    },
                }
            },
            GpuSharing(SharingStrategy.MPS, 2, SHARED_GPU_RESOURCE),
            "T4",
            id="mps-renamed",
        ),
        pytest.param(
            {"hami": {"deviceSplitCount": 10}},
            GpuSharing(SharingStrategy.SPLIT, 10),
            "T4",
            id="hami",
        ),
    ],
)
def test_pools_declare_gpu_sharing(
    fields: dict[str, Any], sharing: GpuSharing, product: str
) -> None:
    data = spec_dict()
    data["spec"]["pools"][1].update(fields)
    nodes = cluster_spec_from_dict(data, "cluster.yaml")
    t4 = nodes[3]
    assert t4.gpu_sharing == sharing
    assert t4.gpu_units == 4 * sharing.replicas
    assert t4.labels[GFD_LABELS.PRODUCT] == product
    again = cluster_spec_from_dict(nodes_to_cluster_spec(nodes, "again"), "again.yaml")
    assert again[3].gpu_sharing == sharing


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        pytest.param(
            {"devicePlugin": {"version": "v1", "sharing": {}}},
            "spec.pools[1].devicePlugin.sharing",
            "expected one of timeSlicing or mps",
            id="no-strategy",
        ),
        pytest.param(
            {
                "devicePlugin": {
                    "version": "v1",
                    "sharing": {
                        "timeSlicing": {
                            "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]
                        }
                    },
                }
            },
            "spec.pools[1].devicePlugin.sharing.timeSlicing.resources[0].name",
            "Input should be 'nvidia.com/gpu'",
            id="mig-replicas",
        ),
        pytest.param(
            {"devicePlugin": {"version": "v2"}},
            "spec.pools[1].devicePlugin.version",
            "Input should be 'v1'",
            id="version",
        ),
        pytest.param(
            {"hami": {"deviceSplitCount": 10}, "devicePlugin": {"version": "v1"}},
            "spec.pools[1]",
            "devicePlugin and hami both advertise the GPUs",
            id="both",
        ),
    ],
)
def test_bad_gpu_sharing(fields: dict[str, Any], field: str, message: str) -> None:
    data = spec_dict()
    data["spec"]["pools"][1].update(fields)
    with pytest.raises(InputError) as raised:
        cluster_spec_from_dict(data, "cluster.yaml")
    assert f": {field}: " in str(raised.value)
    assert message in str(raised.value)
