"""`gpufleet simulate`, `bench fill` and `place` end to end on small inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()


def test_simulate_fill_writes_report_and_json(
    small_trace: tuple[Path, Path], tmp_path: Path
) -> None:
    nodes, pods = small_trace
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--cluster",
            str(nodes),
            "--workload",
            str(pods),
            "-p",
            "fgd",
            "-p",
            "bestfit",
            "--seeds",
            "1-2",
            "--out",
            str(out),
            "--workers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Fill-up: unallocated GPU % at 100% arrived" in result.output
    assert f"report:  {out / 'report.html'}" in result.output.replace("\n", "")
    page = (out / "report.html").read_text()
    assert "Unallocated GPU against arrived workload" in page
    assert "plotly" in page
    data = json.loads((out / "results.json").read_text())
    assert [r["policy"] for r in data["summary"]] == ["fgd", "bestfit"]
    assert len(data["runs"]) == 4
    assert len(data["runs"][0]["unallocated_gpu_pct"]) == 131


def test_simulate_replay_on_a_process_pool(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = small_trace
    out = tmp_path / "replay"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--mode",
            "replay",
            "--cluster",
            str(nodes),
            "--workload",
            str(pods),
            "-p",
            "default",
            "-p",
            "random",
            "--seeds",
            "3",
            "--out",
            str(out),
            "--workers",
            "2",
            "--load",
            "2.0",
            "--max-runtime",
            "10m",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Replay: queueing delay" in result.output
    data = json.loads((out / "results.json").read_text())
    run = data["runs"][0]
    assert run["queueing_delay"]["count"] + run["never_ran"] == 40
    assert "Queueing delay (cumulative distribution)" in (out / "report.html").read_text()


def test_bench_fill_json_contract(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = small_trace
    out = tmp_path / "bench.json"
    result = runner.invoke(
        app,
        [
            "bench",
            "fill",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "fgd",
            "--seeds",
            "42-44",
            "--json",
            str(out),
            "--workers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "using the 4 GPU nodes of 5" in result.output
    data = json.loads(out.read_text())
    assert {"policy", "nodes", "pods", "runs", "median_unallocated_gpu_pct_at_100"} <= set(data)
    assert data["policy"] == "fgd"
    assert [r["seed"] for r in data["runs"]] == [42, 43, 44]
    run = data["runs"][0]
    assert {"seed", "seconds", "unallocated_gpu_pct"} <= set(run)
    assert list(run["unallocated_gpu_pct"]) == [str(i) for i in range(131)]
    values = sorted(r["unallocated_gpu_pct"]["100"] for r in data["runs"])
    assert data["median_unallocated_gpu_pct_at_100"] == pytest.approx(values[1], abs=1e-4)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        pytest.param(
            "p1,1000,10,x,0",
            "pods.csv:2: num_gpu: expected a whole number >= 0, got 'x'",
            id="not-a-number",
        ),
        pytest.param(
            "p1,1000,10,2,500",
            "pods.csv:2: gpu_milli: 2 GPUs must each be whole",
            id="shared-multi-gpu",
        ),
        pytest.param(
            "p1,1000,10,1,1500",
            "pods.csv:2: gpu_milli: more than one GPU per device",
            id="more-than-a-gpu",
        ),
        pytest.param(
            "p1,1000,10",
            "pods.csv:2: num_gpu: expected a whole number >= 0, got ''",
            id="short-row",
        ),
    ],
)
def test_bad_pod_rows_fail_clearly(
    small_trace: tuple[Path, Path], tmp_path: Path, row: str, message: str
) -> None:
    nodes, _ = small_trace
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + row + "\n")
    result = runner.invoke(
        app,
        [
            "bench",
            "fill",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "fgd",
            "--seeds",
            "1",
            "--workers",
            "1",
        ],
    )
    assert result.exit_code == 2
    assert message in result.output.replace("\n", "")


def test_unknown_policy_and_bad_seeds_fail_clearly(small_trace: tuple[Path, Path]) -> None:
    nodes, pods = small_trace
    result = runner.invoke(
        app, ["bench", "fill", "--nodes", str(nodes), "--pods", str(pods), "--policy", "tetris"]
    )
    assert result.exit_code == 2
    assert "unknown policy 'tetris'; choose one of:" in result.output
    result = runner.invoke(
        app,
        [
            "bench",
            "fill",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "fgd",
            "--seeds",
            "9-3",
        ],
    )
    assert result.exit_code == 2
    assert "--seeds: expected e.g. '42-51'" in result.output


def test_missing_file_fails_clearly(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "simulate",
            "--cluster",
            str(tmp_path / "nope.yaml"),
            "--workload",
            str(tmp_path / "nope.csv"),
        ],
    )
    assert result.exit_code == 2
    assert "nope.yaml" in result.output


def test_place_shows_devices_and_why_pods_wait(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.csv"
    cluster.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,2,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nfull,1000,10,1,1000\n"
        "half,1000,10,1,500\nbig,1000,10,4,1000\n"
    )
    result = runner.invoke(
        app, ["place", "--cluster", str(cluster), "--workload", str(pods), "--policy", "bestfit"]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "default/full │ n1 │ 0" in text
    assert "default/half │ n1 │ 1 │ 500" in text
    assert "default/big" in text
    assert "can never fit on this cluster" in text
    assert "2 of 3 pods placed on 1 nodes" in text


def test_policies_lists_every_policy() -> None:
    result = runner.invoke(app, ["policies"])
    assert result.exit_code == 0
    for name in ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd", "default"):
        assert name in result.output


TWO_NODES = """\
apiVersion: gpufleet.dev/v1alpha1
kind: ClusterSpec
metadata: {name: two}
spec:
  pools:
    - name: gpu
      count: 2
      cpu: "32"
      memory: 256Gi
      gpu: {model: A100, count: 8, memory: 40Gi}
"""
#: The seed article's replicas that must not share a node, three of them.
TRAINER = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: training-job}}
    spec:
      containers:
      - name: main
        resources: {limits: {nvidia.com/gpu: 1}}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchExpressions:
              - {key: app, operator: In, values: [training-job]}
            topologyKey: kubernetes.io/hostname
"""


def place(tmp_path: Path, cluster: str, workload: str, policy: str) -> str:
    """``gpufleet place`` on the two documents; its output without table lines."""
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "work.yaml").write_text(workload)
    result = runner.invoke(
        app,
        [
            "place",
            *("--cluster", str(tmp_path / "cluster.yaml")),
            *("--workload", str(tmp_path / "work.yaml")),
            *("--policy", policy),
        ],
    )
    assert result.exit_code == 0, result.output
    return " ".join(re.sub("[\u2500-\u257f]", " ", result.output).split())


@pytest.mark.parametrize("policy", ["default", "bestfit", "fgd"])
def test_place_keeps_replicas_with_required_anti_affinity_apart(
    tmp_path: Path, policy: str
) -> None:
    text = place(tmp_path, TWO_NODES, TRAINER, policy)
    assert "default/trainer-0 gpu-0000" in text
    assert "default/trainer-1 gpu-0001" in text
    assert (
        "default/trainer-2 0/2 nodes are available: 2 node(s) didn't match pod anti-affinity "
        "rules." in text
    )


RDMA_NODES = """\
apiVersion: v1
kind: Node
metadata: {name: ib, labels: {nvidia.com/gpu.product: A100}}
status: {allocatable: {cpu: "32", memory: 256Gi, nvidia.com/gpu: 8, rdma/hca: 1}}
---
apiVersion: v1
kind: Node
metadata: {name: plain, labels: {nvidia.com/gpu.product: A100}}
status: {allocatable: {cpu: "32", memory: 256Gi, nvidia.com/gpu: 8}}
"""
RDMA_PODS = """\
apiVersion: batch/v1
kind: Job
metadata: {name: ib}
spec:
  parallelism: 2
  template:
    spec:
      containers:
      - name: main
        resources: {limits: {nvidia.com/gpu: 1, rdma/hca: 1}}
"""


def test_place_counts_extended_resources_against_node_allocatable(tmp_path: Path) -> None:
    text = place(tmp_path, RDMA_NODES, RDMA_PODS, "bestfit")
    assert "default/ib-0 ib" in text
    assert "default/ib-1 0/2 nodes are available: 2 Insufficient rdma/hca." in text


def test_the_readme_example_of_replicas_kept_apart() -> None:
    repo = Path(__file__).resolve().parents[2]
    result = runner.invoke(
        app,
        [
            "place",
            *("--cluster", str(repo / "examples" / "clusters" / "small.yaml")),
            *("--workload", str(repo / "examples" / "pods" / "spread-replicas.yaml")),
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(re.sub("[\u2500-\u257f]", " ", result.output).split())
    assert [f"default/llm-serve-{i} a100-000" in text for i in range(4)] == [True] * 4
    assert (
        "default/llm-serve-4 0/18 nodes are available: 14 node(s) didn't match Pod's node "
        "affinity/selector, 4 node(s) didn't match pod anti-affinity rules." in text
    )
    assert "4 of 6 pods placed" in text


NODE_YAML = """
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    nvidia.com/gpu.product: {product}
    nvidia.com/gpu.memory: "15360"
    nvidia.com/gpu.count: "{count}"
{extra}
status:
  allocatable: {{cpu: "32", memory: 128Gi, nvidia.com/gpu: "{units}"}}
"""
PODS_YAML = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata:
      labels: {{app: web}}
      annotations: {annotations}
    spec:
      containers:
        - name: c
          resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""


@pytest.mark.parametrize(
    ("node", "pods", "summary", "share"),
    [
        pytest.param(
            NODE_YAML.format(name="one", product="Tesla-T4", count=1, units=1, extra=""),
            PODS_YAML.format(replicas=4, annotations='{gpufleet.dev/gpu-milli: "250"}'),
            "1 of 4 pods placed on 1 nodes",
            "1000",
            id="shares-asking-a-unit-on-one-gpu",
        ),
        pytest.param(
            NODE_YAML.format(
                name="ts",
                product="Tesla-T4-SHARED",
                count=2,
                units=8,
                extra='    nvidia.com/gpu.replicas: "4"\n'
                "    nvidia.com/gpu.sharing-strategy: time-slicing",
            ),
            PODS_YAML.format(replicas=9, annotations="{}"),
            "8 of 9 pods placed on 1 nodes",
            "250",
            id="a-pod-per-time-sliced-replica",
        ),
    ],
)
def test_place_binds_what_the_kubelet_admits(
    tmp_path: Path, node: str, pods: str, summary: str, share: str
) -> None:
    """Issue 11 item 8 through `gpufleet place` on Node YAML."""
    (tmp_path / "node.yaml").write_text(node)
    (tmp_path / "pods.yaml").write_text(pods)
    result = runner.invoke(
        app,
        [
            "place",
            "--cluster",
            str(tmp_path / "node.yaml"),
            "--workload",
            str(tmp_path / "pods.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert summary in text
    assert f"default/web-0 │ {'one' if share == '1000' else 'ts'} │ 0 │ {share}" in text
    if share == "1000":
        assert "Insufficient nvidia.com/gpu" in text
