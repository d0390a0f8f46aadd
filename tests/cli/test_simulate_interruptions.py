"""`gpufleet simulate --scenario` plays a scenario's spot interruptions, node failures and GPU
faults (the example in examples/interruptions) and says what they cost in the terminal,
report.html and results.json: GPU-hours lost, restarts, jobs failed, and what spot saved; a
fault on a node the cluster lacks is one clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "examples" / "interruptions" / "spot.yaml"
CLUSTER = REPO / "examples" / "interruptions" / "cluster.yaml"
HOUR = 3600.0
#: The H100 on-demand price of gpufleet's default list, and its spot estimate (0.6 of it).
H100 = 10.447


def simulate(out: Path, *extra: str) -> tuple[str, dict[str, Any], int]:
    result = runner.invoke(
        app,
        [
            "simulate", "--scenario", str(SCENARIO), "--cluster", str(CLUSTER),
            "--baseline", "none", "--workers", "1", "--out", str(out), *extra,
        ],
    )  # fmt: skip
    text = " ".join(result.output.split())
    data: dict[str, Any] = {}
    if result.exit_code == 0:
        data = json.loads((out / "results.json").read_text())
    return text, data, result.exit_code


def test_the_example_loses_what_its_comments_say(tmp_path: Path) -> None:
    text, data, code = simulate(tmp_path / "run")
    assert code == 0, text
    (run,) = data["runs"]
    report = run["result"]["interruptions"]
    # The XID at 1h40m: pretrain's 16 GPUs lose 10 min (since its 1h30m checkpoint). The sweep
    # node goes at 1h47m: 8 GPUs lose the 47 min since the round began at 1h. The train node
    # goes at 2h32m: pretrain saved at the notice, 16 GPUs lose 2 min. The on-demand node fails
    # at 3h: eval's 1 GPU loses its 2h50m.
    by_cause = {"GPU fault": 16 * 10 / 60, "spot interruption": (8 * 47 + 16 * 2) / 60,
                "node failure": 170 / 60}  # fmt: skip
    for cause, hours in by_cause.items():
        assert report["gpu_hours_lost_by_cause"][cause] == pytest.approx(hours, abs=1e-5)
    assert report["gpu_hours_lost"] == pytest.approx(sum(by_cause.values()), abs=1e-5)
    counts = (report["spot_interruptions"], report["node_failures"], report["gpu_crashes"])
    assert counts == (2, 1, 1)
    assert (report["pods_lost"], report["pods_taken_down"], report["restarts"]) == (7, 2, 3)
    assert (report["jobs_failed"], report["pods_checkpointed"]) == (1, 2)
    jobs = {j["name"]: (j["state"], j["reason"]) for j in run["result"]["jobs"]}
    assert jobs == {
        "pretrain": ("Succeeded", "Completed"),
        "sweep": ("Succeeded", "Completed"),  # its podFailurePolicy ignored the disruption
        "eval": ("Failed", "BackoffLimitExceeded"),
    }
    assert run["result"]["tenancy"]["partial_gangs"] == 0
    # Spot: the lost work on spot nodes at the on-demand price comes off the gross saving.
    savings = report["savings"]
    assert savings["lost_gpu_hours"] == pytest.approx(by_cause["spot interruption"], abs=1e-5)
    assert savings["lost_cost"] == pytest.approx(savings["lost_gpu_hours"] * H100, abs=1e-4)
    assert savings["gross_saved"] == pytest.approx(
        savings["spot_gpu_hours"] * H100 * (1 - 0.6), abs=1e-3
    )
    assert savings["net_saved"] == pytest.approx(
        savings["gross_saved"] - savings["lost_cost"], abs=1e-5
    )
    assert savings["estimated"] is True  # the list has no H100 spot price: its estimate
    (summary,) = data["summary"]["interruptions"]
    assert summary["saved_net"] == savings["net_saved"]
    assert (
        "default/queues interruptions: 2 spot interruption(s), 1 node failure(s), 1 GPU "
        "crash(es); 7 pod(s) lost, 2 taken down with their gangs, 3 restart(s), 1 job(s) "
        "failed; 12.30 GPU-h of work lost; spot saved"
    ) in text
    html = (tmp_path / "run" / "report.html").read_text()
    assert "Spot interruptions and node failures" in html
    assert "Nodes lost and GPU faults (default/queues, seed 42)" in html


def test_a_seed_repeats_its_random_strikes(tmp_path: Path) -> None:
    def events(out: str, seed: str) -> list[tuple[float, str, str]]:
        text, data, code = simulate(tmp_path / out, "--seeds", seed)
        assert code == 0, text
        (run,) = data["runs"]
        return [(e["at"], e["node"], e["event"]) for e in run["result"]["interruptions"]["events"]]

    assert events("a", "5") == events("b", "5")


def test_a_fault_on_a_node_the_cluster_lacks_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        SCENARIO.read_text().replace("nodes: [spot-sweep-0000]", "nodes: [spot-sweep-0009]")
    )
    result = runner.invoke(
        app,
        ["simulate", "--scenario", str(bad), "--cluster", str(CLUSTER), "--out",
         str(tmp_path / "out")],
    )  # fmt: skip
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert (
        "SpotInterruption reclaim-sweep: spec.nodes: no node 'spot-sweep-0009' in the cluster"
        in text
    )
    assert not (tmp_path / "out").exists()
