"""`gpufleet simulate --scenario` grows and shrinks a scenario's NodePools: the example of
examples/nodepools (two CPU nodes, every GPU from a reserved, an on-demand and a spot pool) runs
to the end with every job done, says what the pools did on the terminal, in report.html and in
results.json; without --cluster the pools are the cluster; a bad pool refuses the scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpufleet.cli.main import app

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nodepools"
SCENARIO = EXAMPLE / "scenario"
CLUSTER = EXAMPLE / "cluster"


def simulate(out: Path, *extra: str) -> tuple[str, dict[str, Any]]:
    result = runner.invoke(
        app,
        ["simulate", "--workers", "1", "--baseline", "none", "--scenario", str(SCENARIO),
         "--out", str(out), *extra],
    )  # fmt: skip
    text = " ".join(result.output.split())
    assert result.exit_code == 0, text
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return text, data


def test_the_example_adds_nodes_for_waiting_work_and_removes_them_when_unneeded(
    tmp_path: Path,
) -> None:
    text, data = simulate(tmp_path, "--cluster", str(CLUSTER))
    result = data["runs"][0]["result"]
    assert all(job["state"] == "Succeeded" for job in result["jobs"]), result["jobs"]
    assert result["waiting_at_end"] == []
    pools = {usage["pool"]: usage for usage in result["pools"]["pools"]}
    reserved, on_demand, spot = pools["h100-reserved"], pools["h100-on-demand"], pools["h100-spot"]
    assert (reserved["nodes_at_start"], reserved["removed"], reserved["nodes_at_end"]) == (1, 0, 1)
    assert spot["added"] >= 4, "the training gang of 4 x 8 GPUs goes to spot"
    assert on_demand["added"] >= 1, "work that does not tolerate spot gets on-demand nodes"
    assert on_demand["removed"] >= 1
    actions = result["pools"]["actions"]
    assert any("-1 h100-on-demand" in a and "empty for" in a for a in actions)
    assert result["pools"]["cost"] > 0
    # The line on the terminal, from the same numbers.
    (summary,) = data["summary"]["pools"]
    total = summary["rows"][-1]
    assert total["cost"] == result["pools"]["cost"]
    assert (
        f"default/queues node pools: 3 pools, {total['added']} node(s) added, "
        f"{total['removed']} removed, {total['lost']} lost" in text
    )
    assert "node pools: h100-reserved (reserved, 1-1 x 8 NVIDIA-H100-80GB-HBM3" in text
    report = (tmp_path / "report.html").read_text()
    assert "<h2>Node pools</h2>" in report
    assert "Pools (default/queues, seed 42)" in report
    assert "Nodes per pool (default/queues, seed 42)" in report
    assert "h100-spot" in report


def test_without_a_cluster_the_pools_are_the_cluster(tmp_path: Path) -> None:
    text, data = simulate(tmp_path)
    assert "cluster: no nodes but the node pools'" in text
    result = data["runs"][0]["result"]
    assert all(job["state"] == "Succeeded" for job in result["jobs"])


def test_a_bad_pool_refuses_the_scenario_naming_file_pool_and_field(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    for file in SCENARIO.iterdir():
        text = file.read_text()
        if file.name == "pools.yaml":
            text = text.replace("  maxNodes: 4", "  minNodes: 5\n  maxNodes: 4")
        (scenario / file.name).write_text(text)
    result = runner.invoke(
        app,
        ["simulate", "--workers", "1", "--scenario", str(scenario), "--out", str(tmp_path / "o")],
    )
    text = " ".join(result.output.split())
    assert result.exit_code != 0
    assert "pools.yaml" in text
    assert "NodePool h100-on-demand" in text
    assert "spec.maxNodes: 4 is less than spec.minNodes 5" in text
    assert not (tmp_path / "o" / "results.json").exists()
