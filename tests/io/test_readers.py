"""Choosing the reader by content, directories, and the bundled examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.readers import read_cluster, read_workload
from gpufleet.model import SHARED_GPU_RESOURCE, GpuRequest
from tests.conftest import REPO_ROOT
from tests.io.conftest import WriteFile

NODE = """
apiVersion: v1
kind: Node
metadata: {name: NAME}
status: {allocatable: {cpu: "4", memory: 16Gi}}
"""
SPEC = """
apiVersion: gpufleet.dev/v1alpha1
kind: ClusterSpec
metadata: {name: small}
spec:
  pools: [{name: a100, count: 2, cpu: "64", memory: 512Gi, gpu: {model: A100, count: 8}}]
"""
POD = """
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}
"""
NODE_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,0,\nn1,64000,262144,2,T4\n"
POD_CSV = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\n"


@pytest.mark.parametrize(
    ("name", "text", "names"),
    [
        pytest.param("nodes.csv", NODE_CSV, ["n0", "n1"], id="alibaba-csv"),
        pytest.param("cluster.yaml", SPEC, ["a100-0000", "a100-0001"], id="cluster-spec"),
        pytest.param("nodes.yaml", NODE.replace("NAME", "k1"), ["k1"], id="node-yaml"),
        pytest.param(
            "mixed.yml",
            SPEC + "---" + NODE.replace("NAME", "k1"),
            ["a100-0000", "a100-0001", "k1"],
            id="spec-and-nodes",
        ),
    ],
)
def test_read_cluster_by_content(
    write_file: WriteFile, name: str, text: str, names: list[str]
) -> None:
    assert [n.name for n in read_cluster(write_file(name, text))] == names


@pytest.mark.parametrize(
    ("name", "text", "names"),
    [
        pytest.param("pods.csv", POD_CSV, ["p0"], id="alibaba-csv"),
        pytest.param("pods.yaml", POD.replace("NAME", "a"), ["a"], id="pod-yaml"),
    ],
)
def test_read_workload_by_content(
    write_file: WriteFile, name: str, text: str, names: list[str]
) -> None:
    assert [t.pod.name for t in read_workload(write_file(name, text))] == names


def test_directory_reads_yaml_files_in_name_order(write_file: WriteFile, tmp_path: Path) -> None:
    write_file("d/b.yaml", NODE.replace("NAME", "second"))
    write_file("d/a.yml", NODE.replace("NAME", "first"))
    write_file("d/notes.txt", "not read")
    assert [n.name for n in read_cluster(tmp_path / "d")] == ["first", "second"]


def test_duplicates_across_files(write_file: WriteFile, tmp_path: Path) -> None:
    write_file("d/a.yaml", POD.replace("NAME", "same"))
    second = write_file("d/b.yaml", POD.replace("NAME", "same"))
    with pytest.raises(InputError) as raised:
        read_workload(tmp_path / "d")
    assert str(raised.value).startswith(f"{second}:document 1 (line 1): pod default/same appears")


@pytest.mark.parametrize(
    ("reader", "text", "message"),
    [
        pytest.param(
            read_cluster,
            POD.replace("NAME", "p"),
            "expected a ClusterSpec or Kubernetes Node objects (or an Alibaba node-list .csv), "
            "got kind Pod (a workload, not a cluster)",
            id="pod-as-cluster",
        ),
        pytest.param(
            read_workload,
            SPEC,
            "expected Pod, Job, Deployment, StatefulSet or ReplicaSet objects (or an Alibaba "
            "pod-list .csv), got kind ClusterSpec (a cluster, not a workload)",
            id="cluster-as-workload",
        ),
        pytest.param(
            read_cluster,
            "just some text\n",
            "expected a Kubernetes object (a mapping with apiVersion, kind and metadata), "
            "got 'just some text'",
            id="plain-text",
        ),
    ],
)
def test_unknown_content(write_file: WriteFile, reader: object, text: str, message: str) -> None:
    path = write_file("input.yaml", text)
    assert callable(reader)
    with pytest.raises(InputError) as raised:
        reader(path)
    assert str(raised.value).startswith(f"{path}:document 1 (line 1)")
    assert message in str(raised.value)


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"expected \*.yaml or \*.yml files"):
        read_cluster(tmp_path)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        read_workload(tmp_path / "absent")


# ---------------------------------------------------------------------------------- examples
EXAMPLES = REPO_ROOT / "examples"


@pytest.mark.parametrize(
    ("name", "pods", "gpu"),
    [
        pytest.param("one-gpu.yaml", 1, GpuRequest.whole(1), id="one-gpu"),
        pytest.param(
            "gpu-share.yaml",
            3,
            GpuRequest.share(250, 10240, 1, SHARED_GPU_RESOURCE),
            id="gpu-share",
        ),
        pytest.param("pytorch-gang-job.yaml", 4, GpuRequest.whole(1), id="gang-job"),
        pytest.param("mig.yaml", 2, GpuRequest.mig("1g.10gb"), id="mig"),
    ],
)
def test_example_workloads_load(name: str, pods: int, gpu: GpuRequest) -> None:
    loaded = read_workload(EXAMPLES / "pods" / name)
    assert len(loaded) == pods
    assert loaded[0].pod.gpu == gpu


def test_gang_job_example_tolerates_the_gpu_taint() -> None:
    pods = read_workload(EXAMPLES / "pods" / "pytorch-gang-job.yaml")
    assert {t.pod.labels["job-name"] for t in pods} == {"llm-finetune"}
    assert all(t.pod.tolerations[0].key == "nvidia.com/gpu" for t in pods)
    assert (pods[0].created, pods[0].deleted) == (300.0, 7500.0)


def test_all_example_workloads_load_as_a_directory() -> None:
    assert len(read_workload(EXAMPLES / "pods")) == 16


def test_example_cluster_loads() -> None:
    nodes = read_cluster(EXAMPLES / "clusters" / "small.yaml")
    by_model: dict[str | None, int] = {}
    for node in nodes:
        by_model[node.gpu_model] = by_model.get(node.gpu_model, 0) + 1
    assert by_model == {"H100": 4, "A100": 4, "T4": 6, None: 4}
    assert any(g.partitioned for g in nodes[0].gpus)
    assert all(n.taints for n in nodes if n.gpus)
