"""Every table the CLI prints keeps its identifying columns whole, on a terminal of 80 or 200
columns and piped: long labels or a 253-character name squeeze nothing out (issue 11 item 12)."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from rich.console import Console, RenderableType
from typer.testing import CliRunner

from gpufleet.cli import tables
from gpufleet.cli.main import app
from gpufleet.cli.remote import use_http
from gpufleet.cli.remote_render import (
    Clock,
    nodes_table,
    queues_table,
    top_nodes,
    workloads_table,
)
from gpufleet.cli.scenario_terminal import print_queue_table
from gpufleet.cli.simulate import print_fill_summary, print_replay_summary
from gpufleet.report.scenario_summary import QueueSummary
from gpufleet.report.summary import FillSummary, ReplaySummary
from tests.cli.test_client import FakeServer, answer, cluster, dumped, node, queue, workload

#: A legal DNS-1123 subdomain of the longest length (253).
LONG_NAME = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
assert len(LONG_NAME) == 253

GFD_LABELS = {
    "kubernetes.io/hostname": "h100-0000",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/mig.capable": "true",
    "topology.kubernetes.io/zone": "zone-a",
    "gpufleet.dev/rack": "rack-0",
    "gpufleet.dev/nvlink-domain": "nvlink-0",
}
NODES = [node("h100-0000").model_copy(update={"labels": GFD_LABELS}), node("a100-0001")]
CLOCK = Clock(now=600.0)
WORKLOAD_HEADERS = ["NAME", "KIND", "QUEUE", "STATE", "PODS", "GPUS", "REQUEST", "AGE"]
QUEUE_HEADERS = ["NAME", "PARENT", "WEIGHT", "GPU QUOTA", "GPU USED", "GPU BORROWED", "SHARE"]
QUEUE_HEADERS += ["PENDING", "RUNNING"]
QUEUE_WIDE_HEADERS = ["NOMINAL", "USAGE", "BORROWING LIMIT", "LENDING LIMIT", "STRATEGY"]
QUEUE_WIDE_HEADERS += ["GPU MODELS", "PREEMPTION"]


@dataclass(frozen=True)
class Where:
    """A terminal of ``width`` columns, or a pipe (``width`` is then what rich would assume)."""

    width: int
    terminal: bool

    def console(self, buffer: io.StringIO) -> Console:
        return Console(
            file=buffer,
            width=self.width,
            force_terminal=self.terminal,
            color_system=None,
            highlight=False,
        )


WHERE = [
    pytest.param(Where(80, True), id="terminal-80"),
    pytest.param(Where(200, True), id="terminal-200"),
    pytest.param(Where(80, False), id="piped"),
]


def shown(renderable: RenderableType, where: Where) -> str:
    buffer = io.StringIO()
    tables.show(renderable, where.console(buffer))
    return buffer.getvalue()


# Each case: the table, its headers, and the cells that must be whole on one line.
CASES: dict[str, tuple[Callable[[], RenderableType], list[str], list[str]]] = {
    "get-nodes-wide": (
        lambda: nodes_table(NODES, wide=True),
        ["NAME", "GPU MODEL", "GPUS", "GPU%", "CPU", "MEMORY", "LABELS", "TAINTS"],
        ["h100-0000", "a100-0001", "1.5/4", "32Gi/256Gi"],
    ),
    "get-nodes": (
        lambda: nodes_table(NODES),
        ["NAME", "GPU MODEL", "GPUS", "GPU%", "CPU", "MEMORY"],
        ["h100-0000", "a100-0001"],
    ),
    "get-workloads-long-name": (
        lambda: workloads_table([workload(LONG_NAME), workload("short")], CLOCK, namespaces=True),
        ["NAMESPACE", *WORKLOAD_HEADERS],
        [LONG_NAME, "short", "Running", "9m00s"],
    ),
    "get-workloads-wide-long-name": (
        lambda: workloads_table(
            [workload(LONG_NAME, message="waiting behind " + "x" * 120, waiting_for="quota")],
            CLOCK,
            wide=True,
            namespaces=False,
        ),
        [*WORKLOAD_HEADERS, "TENANT", "PRIORITY", "STARTED", "WAITING FOR", "MESSAGE"],
        [LONG_NAME, "t=1m30s"],
    ),
    "get-queues-wide": (
        lambda: queues_table([queue(), queue("inference-critical-serving")], wide=True),
        [*QUEUE_HEADERS, *QUEUE_WIDE_HEADERS],
        ["inference-critical-serving", "team-a"],
    ),
    "top-nodes": (
        lambda: top_nodes(NODES),
        ["NAME", "MODEL", "GPU ALLOCATION", "GPUS", "GPU%", "CPU%", "MEMORY%", "PODS"],
        ["h100-0000", "a100-0001", "team-a/p0"],
    ),
}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", list(CASES))
def test_remote_tables_keep_every_header_and_identifying_cell(case: str, where: Where) -> None:
    make, headers, whole = CASES[case]
    text = shown(make(), where)
    lines = text.splitlines()
    header_line = next(line for line in lines if line.lstrip().startswith(headers[0]))
    for header in headers:
        assert header in header_line, f"{header!r} missing from {header_line!r}"
    for cell in whole:
        assert any(cell in line for line in lines), f"{cell!r} is not whole on one line"
    if not where.terminal:
        assert all(line == line.rstrip() for line in lines), "blanks at the ends of lines"


@pytest.mark.parametrize("where", WHERE)
def test_piped_and_wide_terminal_rows_are_one_line_each(where: Where) -> None:
    """Piped there is no width limit; on a wide enough terminal nothing needs folding."""
    text = shown(nodes_table(NODES, wide=True), where)
    rows = [line for line in text.splitlines() if line.strip()]
    if where.terminal and where.width == 80:
        assert len(rows) > 3  # the labels fold within their column
    elif not where.terminal:
        assert len(rows) == 3  # the header and one line per node
        labels = ",".join(f"{k}={v}" for k, v in sorted(GFD_LABELS.items()))
        assert labels in rows[1]


def test_on_a_narrow_terminal_free_text_folds_within_the_width() -> None:
    text = shown(nodes_table(NODES, wide=True), Where(200, True))
    assert max(len(line) for line in text.splitlines()) <= 200


def fill_row(policy: str) -> FillSummary:
    return FillSummary(policy, [42, 43], 3.86, 3.8, 3.96, 4.7, 2.9, {"one-gpu": 0.1, "mig": 0.0})


def replay_row(policy: str) -> ReplaySummary:
    return ReplaySummary(policy, [42], 12.0, 2349.0, 7500.0, 81.3, 2, 3.1)


def queue_row(name: str) -> QueueSummary:
    return QueueSummary(
        run="default/queues", queue=name, depth=1, seeds=[42], nominal_gpus=8.0,
        workloads=10, admitted=9, completed=8, delay_p50=2349.0, delay_p95=7500.0,
        delay_max=97380.0, jct_p50=5400.0, gpu_hours_used=12.5, gpu_hours_entitled=16.0,
        preemptions=1, gpu_hours_lost=0.5, longest_short_of_nominal=59.0,
    )  # fmt: skip


PRINTED: dict[str, tuple[Callable[[], None], list[str], list[str]]] = {
    "simulate-fill": (
        lambda: print_fill_summary([fill_row("gpu-clustering"), fill_row("default")], 0),
        ["policy", "median", "range", "frag", "1-gpu", "mig", "s/run"],
        ["gpu-clustering", "3.80-3.96"],
    ),
    "simulate-replay": (
        lambda: print_replay_summary([replay_row("gpu-packing")]),
        ["policy", "p50", "p95", "max", "mean alloc %", "never ran", "s/run"],
        ["gpu-packing", "39m09s", "2h05m"],
    ),
    "simulate-scenario-queues": (
        lambda: print_queue_table([queue_row(LONG_NAME[:63]), queue_row("llm")], 1),
        ["run", "queue", "nominal GPUs", "work-loads", "delay p50 / p95", "JCT p50", "short"],
        [LONG_NAME[:63], "default/queues", "39m09s / 2h05m"],
    ),
}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", list(PRINTED))
def test_simulate_summaries_keep_every_header_and_name(
    case: str, where: Where, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(tables, "console", where.console(buffer))
    printing, headers, whole = PRINTED[case]
    printing()
    lines = buffer.getvalue().splitlines()
    for text in headers + whole:
        assert any(text in line for line in lines), f"{text!r} is not whole on one line"


B200_POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations: {{gpufleet.dev/gpu-models: B200}}
spec:
  containers:
    - name: main
      image: example
      resources: {{limits: {{cpu: "1", memory: 1Gi, nvidia.com/gpu: 1}}}}
"""


@pytest.mark.parametrize("where", WHERE)
def test_place_shows_a_long_pod_name_and_why_it_waits(
    where: Where, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also issue 11 item 20: a GPU model no node has is named, CPU-only nodes not counted."""
    cluster = tmp_path / "nodes.csv"
    cluster.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,2,T4\nc1,32000,65536,0,\n"
    )
    pods = tmp_path / "pods.yaml"
    pods.write_text(B200_POD.format(name=LONG_NAME))
    buffer = io.StringIO()
    monkeypatch.setattr(tables, "console", where.console(buffer))
    result = CliRunner().invoke(app, ["place", "--cluster", str(cluster), "--workload", str(pods)])
    assert result.exit_code == 0, result.output
    lines = buffer.getvalue().splitlines()
    for text in ("pod", "node", "GPUs", "share (milli)", "MIG slices", "why"):
        assert any(text in line for line in lines), text
    assert any(f"default/{LONG_NAME}" in line for line in lines)
    if not where.terminal:  # whole on its row; on a terminal the message folds in its column
        why = (
            f"default/{LONG_NAME} can never fit on this cluster: no node has GPU model B200. "
            "0/2 nodes are available: 1 GPU model not allowed, 1 Insufficient nvidia.com/gpu."
        )
        assert any(why in line for line in lines)


@pytest.mark.usefixtures("env")
def test_get_nodes_wide_piped_keeps_names_models_and_whole_labels() -> None:
    """The command as a user pipes it (CliRunner's output is no terminal)."""
    server = FakeServer(
        {
            ("GET", "/api/v1/nodes"): answer(dumped(NODES)),
            ("GET", "/api/v1/workloads"): answer(dumped([workload(LONG_NAME)])),
            ("GET", "/api/v1/cluster"): answer(dumped(cluster())),
        }
    )
    with use_http(lambda _: httpx.Client(transport=server.transport())):
        nodes = CliRunner().invoke(app, ["get", "nodes", "-o", "wide", "--token", "t"])
        workloads = CliRunner().invoke(app, ["get", "workloads", "--token", "t"])
    assert nodes.exit_code == 0, nodes.output
    header, first, second = nodes.stdout.splitlines()
    assert header.split()[:4] == ["NAME", "GPU", "MODEL", "GPUS"]
    labels = ",".join(f"{k}={v}" for k, v in sorted(GFD_LABELS.items()))
    taints = "nvidia.com/gpu=present:NoSchedule"
    assert first.split() == [
        "h100-0000",
        "A100",
        "1.5/4",
        "38%",
        "8/64",
        "32Gi/256Gi",
        labels,
        taints,
    ]
    assert second.split()[0] == "a100-0001"
    assert workloads.exit_code == 0, workloads.output
    header, row = workloads.stdout.splitlines()
    assert header.split() == WORKLOAD_HEADERS
    assert row.split()[0] == LONG_NAME
    assert len(row.split()) == len(WORKLOAD_HEADERS)
