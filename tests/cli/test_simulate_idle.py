"""`gpufleet simulate --scenario` runs the scenario's IdlePolicies: the example in examples/idle
stops the two forgotten notebooks (not the exempt one, not training), the job waiting behind
them starts sooner than in the FIFO baseline (which runs without the policies), and the
summary, report and results.json say what was reclaimed; --idle-dry-run only reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "examples" / "idle" / "notebooks.yaml"
CLUSTER = REPO / "examples" / "idle" / "cluster.yaml"
HOUR = 3600.0


def simulate(out: Path, *extra: str) -> tuple[str, dict[str, Any]]:
    result = runner.invoke(
        app,
        [
            "simulate", "--scenario", str(SCENARIO), "--cluster", str(CLUSTER),
            "--baseline", "fifo", "--workers", "1", "--out", str(out), *extra,
        ],
    )  # fmt: skip
    text = " ".join(result.output.split())
    assert result.exit_code == 0, text
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return text, data


def run_of(data: dict[str, Any], variant: str) -> dict[str, Any]:
    found: dict[str, Any] = next(r for r in data["runs"] if r["variant"] == variant)
    return found


def longest_wait(run: dict[str, Any]) -> float:
    """The longest queueing delay of any workload (here: pretrain's)."""
    queues = run["result"]["tenancy"]["queues"].values()
    return max(float(q["queueing_delay"]["max"]) for q in queues)


def test_the_policy_stops_forgotten_notebooks_and_the_waiting_job_starts(tmp_path: Path) -> None:
    text, data = simulate(tmp_path / "run")
    idle = run_of(data, "queues")["result"]["idle"]
    assert sorted(idle["stopped"]) == ["dev/nb-alice-0", "dev/nb-bob-0"]
    assert idle["stopped_training"] == []
    assert [d["action"] for d in idle["decisions"]] == ["Notify", "Notify", "Stop", "Stop"]
    assert all(d["mean_util_pct"] < 10 for d in idle["decisions"])
    # Both hold 2 GPUs and would have run 10 h; stopped at 1 h 15 min.
    assert idle["gpu_hours_reclaimed"] == 2 * 2 * (10 - 1.25)
    assert run_of(data, "fifo")["result"]["idle"] is None
    # pretrain (arrived at 30 min) waited for the Stop at 1 h 15 min, not for finetune's end.
    assert longest_wait(run_of(data, "queues")) == 0.75 * HOUR
    assert longest_wait(run_of(data, "fifo")) >= 5.5 * HOUR
    [summary] = data["summary"]["idle"]
    assert summary["actions"] == {"Notify": 2, "Stop": 2}
    assert summary["workloads_stopped"] == 2
    assert "35.0 GPU-h reclaimed; actions: 2 Notify, 2 Stop; 2 workload(s) stopped" in text
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Idle GPU reclaim" in page
    assert "Idle-policy actions (default/queues, seed 42)" in page
    assert "IdlePolicy forgotten-notebooks, step 2 of 2" in page


def test_a_dry_run_reports_and_stops_nothing(tmp_path: Path) -> None:
    text, data = simulate(tmp_path / "run", "--idle-dry-run")
    run = run_of(data, "queues")
    idle = run["result"]["idle"]
    assert idle["stopped"] == []
    assert idle["gpu_hours_reclaimed"] == 0
    assert {d["action"] for d in idle["decisions"]} == {"Notify", "Stop"}
    assert all(d["dry_run"] for d in idle["decisions"])
    # Nothing freed: pretrain waits until finetune ends at 6 h.
    assert longest_wait(run) == 5.5 * HOUR
    assert "IdlePolicy forgotten-notebooks (dry run: report only)" in text
    assert "dry run, nothing carried out: 0.0 GPU-h reclaimed" in text
    assert "0 workload(s) stopped" in text


def test_idle_dry_run_needs_a_scenario(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--idle-dry-run", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "--idle-dry-run" in " ".join(result.output.split())
