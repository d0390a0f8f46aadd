"""`gpufleet simulate --scenario` serves a scenario's InferenceLoads: the example chat service
autoscaled by its annotations (a line on the terminal, an "Inference services" section in
report.html, the reports in results.json), and the FIFO baseline serving it alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "autoscaling"
CLUSTER = REPO / "examples" / "clusters" / "small.yaml"


def simulate(out: Path, *extra: str) -> tuple[str, dict[str, Any]]:
    result = runner.invoke(
        app,
        [
            "simulate", "--workers", "1",
            "--scenario", str(EXAMPLES / "annotations.yaml"),
            "--scenario", str(EXAMPLES / "chat-traffic.yaml"),
            "--cluster", str(CLUSTER), "--out", str(out), *extra,
        ],
    )  # fmt: skip
    text = " ".join(result.output.split())
    assert result.exit_code == 0, text
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return text, data


def test_the_example_service_is_autoscaled_and_reported(tmp_path: Path) -> None:
    text, data = simulate(tmp_path, "--baseline", "fifo")
    assert "served ml-serving/Deployment/chat (annotations of Deployment ml-serving/chat)" in text
    runs = {r["variant"]: r["result"] for r in data["runs"]}
    queues, fifo = runs["queues"]["serving"][0], runs["fifo"]["serving"][0]
    for served in (queues, fifo):
        assert served["minutes"] == 24 * 60, "the run lasts as long as the requests"
        assert 1 <= served["replicas_min"] <= served["replicas_max"] <= 8
        assert served["scale_changes"] > 0
        assert served["minutes_met_pct"] > 50
        assert served["gpu_hours"] < 8 * 24, "fewer GPU-hours than 8 replicas all day"
        assert len(served["timeline"]) == 24 * 60
    summary = data["summary"]["serving"]
    assert {row["run"] for row in summary} == {"default/queues", "default/fifo"}
    report = (tmp_path / "report.html").read_text()
    assert "Inference services" in report
    assert "Why the replica counts changed" in report
    assert "ml-serving/Deployment/chat" in report


def test_without_requests_nothing_is_served(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["simulate", "--workers", "1", "--scenario", str(EXAMPLES / "annotations.yaml"),
         "--cluster", str(CLUSTER), "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["runs"][0]["result"]["serving"] == []
    assert "Inference services" not in (tmp_path / "report.html").read_text()
