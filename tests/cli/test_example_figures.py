"""One run, one set of figures: every example scenario the README runs is simulated, and the
tables of its report are checked against each other (issue 29, item 10): the per-queue GPU-hours
against the cost table's, each inference service's GPU-hours against its namespace's cost, the
GPU allocation against the GPU time the cost table says was held, and, with node pools, the
cost table saying it is not the bill (the pools' cost is)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
SMALL = "examples/clusters/small.yaml"
#: GPU-hours are rounded to 3 places in the queues' results.
TOLERANCE_H = 0.01

#: The README's commands: scenario files, then the cluster.
EXAMPLES = {
    "tenancy": (["examples/tenancy"], SMALL),
    "idle": (["examples/idle/notebooks.yaml"], "examples/idle/cluster.yaml"),
    "interruptions": (["examples/interruptions/spot.yaml"], "examples/interruptions/cluster.yaml"),
    "nodepools": (["examples/nodepools/scenario"], "examples/nodepools/cluster"),
    "autoscaling": (
        ["examples/autoscaling/annotations.yaml", "examples/autoscaling/chat-traffic.yaml"],
        SMALL,
    ),
    "budgets": (["examples/budgets"], SMALL),
}


def _simulate(name: str, out: Path) -> list[dict[str, Any]]:
    scenarios, cluster = EXAMPLES[name]
    args = ["simulate", "--cluster", str(REPO / cluster), "--out", str(out)]
    for scenario in scenarios:
        args += ["--scenario", str(REPO / scenario)]
    result = runner.invoke(app, [*args, "--baseline", "none"])
    assert result.exit_code == 0, result.output
    assert "no price for GPU model" not in result.output
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return [run["result"] for run in results["runs"]]


def _parents(name: str) -> dict[str, str]:
    """Each queue of example ``name`` with a parent, and its parent."""
    parents = {}
    for scenario in EXAMPLES[name][0]:
        path = REPO / scenario
        for file in sorted(path.rglob("*.yaml")) if path.is_dir() else [path]:
            for doc in yaml.safe_load_all(file.read_text(encoding="utf-8")):
                if isinstance(doc, dict) and doc.get("kind") == "Queue":
                    parent = (doc.get("spec") or {}).get("parent")
                    if parent:
                        parents[doc["metadata"]["name"]] = parent
    return parents


def _groups(run: dict[str, Any], by: str) -> dict[str, dict[str, Any]]:
    report = next(r for r in run["cost"] if r["by"] == [by])
    return {group["name"]: group for group in report["groups"]}


@pytest.mark.parametrize("name", sorted(EXAMPLES), ids=sorted(EXAMPLES))
def test_every_table_of_an_example_run_reconciles_with_the_others(
    name: str, tmp_path: Path
) -> None:
    for run in _simulate(name, tmp_path):
        by_queue = _groups(run, "queue")
        queues = run["tenancy"]["queues"]
        # Every pod is its queue's, replicas an autoscaler made too.
        assert "__unallocated__" not in by_queue
        parents = _parents(name)
        held = 0.0
        for queue, stats in queues.items():
            own = by_queue.get(queue, {}).get("gpu_hours", 0.0)
            held += own
            # A queue's GPU-hours count its subtree: its own pods' and its children's.
            children = sum(queues[q]["gpu_hours_used"] for q, p in parents.items() if p == queue)
            assert stats["gpu_hours_used"] == pytest.approx(own + children, abs=TOLERANCE_H), queue
        by_namespace = _groups(run, "namespace")
        for service in run["serving"]:
            namespace = service["workload"].split("/", 1)[0]
            assert service["gpu_hours"] == pytest.approx(
                by_namespace[namespace]["gpu_hours"], abs=0.05
            ), service["workload"]
        if held > 0:
            assert run["allocation_busy_pct"] > 0
        if run["pools"] is not None:
            notes = " ".join(n for r in run["cost"] for n in r["notes"])
            assert "the bill is the node pools' cost" in notes
