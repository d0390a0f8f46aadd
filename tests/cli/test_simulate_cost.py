"""`gpufleet simulate --scenario` prices what the pods held: a cost table on the terminal, a
"Cost" section in report.html, the numbers in results.json (each line allocated = used + idle +
unmeasured, the lines adding up to the total, the pods' GPU-hours those the queues counted, the
whole the cluster's GPUs over the window); --cost-by groups by any key of `gpufleet cost --by`,
the default adds the seeds' team / cost-center / project where workloads carry them; a bad
--prices file or --cost-by key is one clear error, exit code 2, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cli.scenario_cost import cost_legend
from gpufleet.report.scenario_cost import CostRow

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "examples" / "idle" / "notebooks.yaml"
CLUSTER = REPO / "examples" / "idle" / "cluster.yaml"
#: examples/idle/cluster.yaml: two nodes of four A100s.
GPUS = 8
HOUR = 3600.0

LABELLED = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
  labels: {labels}
  annotations: {annotations}
spec:
  containers:
    - name: main
      image: busybox
      resources:
        limits: {{cpu: "2", memory: 8Gi, nvidia.com/gpu: 2}}
"""


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["simulate", "--workers", "1", *args])
    return result.exit_code, " ".join(result.output.split())


def simulate(out: Path, *extra: str, scenario: Path = SCENARIO) -> tuple[str, dict[str, Any]]:
    code, text = invoke(
        "--scenario", str(scenario), "--cluster", str(CLUSTER), "--out", str(out), *extra
    )
    assert code == 0, text
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return text, data


def check_lines(summary: dict[str, Any]) -> None:
    """Every line splits in three (and unmeasured), and the lines add up to the total."""
    rows = [*summary["lines"], summary["total"]]
    for row in rows:
        split = row["used"] + row["idle"] + row["unmeasured"]
        assert row["allocated"] == pytest.approx(split, abs=1e-5), row["group"]
    for part in ("gpu_hours", "allocated", "used", "idle", "unmeasured", "gpu", "cpu", "memory"):
        summed = sum(line[part] for line in summary["lines"])
        assert summed == pytest.approx(summary["total"][part], abs=1e-5), part


def test_the_cost_of_each_run_on_the_terminal_in_the_report_and_in_results(
    tmp_path: Path,
) -> None:
    text, data = simulate(tmp_path / "run", "--baseline", "fifo")
    assert "cost: gpufleet's default price list (USD), by queue; namespace" in text
    assert "Cost by queue (USD)" in text
    assert "Also by namespace in report.html and results.json" in text
    assert data["prices"]["name"] == "public-list-prices"
    assert data["cost_by"] == ["queue", "namespace"]
    summaries = data["summary"]["cost"]
    assert [(s["run"], s["by"]) for s in summaries] == [
        ("default/queues", "queue"),
        ("default/queues", "namespace"),
        ("default/fifo", "queue"),
        ("default/fifo", "namespace"),
    ]
    for summary in summaries:
        check_lines(summary)
        run = next(r for r in data["runs"] if f"{r['policy']}/{r['variant']}" == summary["run"])
        [report] = [c for c in run["result"]["cost"] if ",".join(c["by"]) == summary["by"]]
        window_h = (report["window"]["end"] - report["window"]["start"]) / HOUR
        assert summary["total"]["gpu_hours"] == pytest.approx(GPUS * window_h, abs=1e-5)
        held = sum(q["gpu_hours_used"] for q in run["result"]["tenancy"]["queues"].values())
        pods = sum(line["gpu_hours"] for line in summary["lines"] if line["group"] != "__idle__")
        assert pods == pytest.approx(held, abs=1e-3)
        assert summary["total"]["allocated"] == pytest.approx(
            sum(g["gpu_cost"] + g["cpu_cost"] + g["memory_cost"] for g in report["groups"]),
            abs=1e-5,
        )
        assert summary["measured"]
        assert summary["total"]["unmeasured"] == 0
    queues = {line["group"]: line for line in summaries[0]["lines"]}
    # The dev notebooks hardly compute; the research training jobs mostly do.
    assert queues["dev"]["gpu_util_pct"] < 10 < 60 < queues["research"]["gpu_util_pct"]
    assert queues["dev"]["idle"] > queues["research"]["idle"]
    # Stopping the forgotten notebooks leaves their GPUs to nobody: __idle__ grows, dev shrinks.
    fifo = {line["group"]: line for line in summaries[3]["lines"]}
    assert queues["dev"]["gpu_hours"] < fifo["dev"]["gpu_hours"]
    page = (tmp_path / "run" / "report.html").read_text()
    assert "<h2>Cost</h2>" in page
    assert "Cost by queue: used, idle and unmeasured" in page
    assert "Cost by namespace (default/fifo, seed 42)" in page


def test_cost_by_a_label_and_the_default_owner_keys(tmp_path: Path) -> None:
    scenario = tmp_path / "teams.yaml"
    docs = [
        ("a", "ml", "{team: vision}", "{gpufleet.dev/sim-duration: 1h}"),
        ("b", "ml", "{team: nlp}", "{gpufleet.dev/sim-duration: 2h}"),
        ("c", "web", "{}", "{gpufleet.dev/sim-duration: 1h, cost-center: cc-7}"),
    ]
    scenario.write_text(
        "---\n".join(
            LABELLED.format(name=n, namespace=ns, labels=lb, annotations=an)
            for n, ns, lb, an in docs
        )
    )
    _, data = simulate(tmp_path / "default", scenario=scenario)
    assert data["cost_by"] == ["queue", "namespace", "team", "cost-center"]
    text, data = simulate(tmp_path / "team", "--cost-by", "namespace,team", scenario=scenario)
    assert "Cost by namespace,team (USD)" in text
    [summary] = data["summary"]["cost"]
    check_lines(summary)
    lines = {line["group"]: line for line in summary["lines"]}
    assert set(lines) == {"ml/vision", "ml/nlp", "__unallocated__", "__idle__"}
    assert lines["ml/nlp"]["gpu_hours"] == pytest.approx(4.0)
    assert lines["ml/vision"]["gpu_hours"] == pytest.approx(2.0)


def test_an_unknown_label_key_is_warned_about(tmp_path: Path) -> None:
    text, data = simulate(tmp_path / "run", "--cost-by", "teem")
    assert "--cost-by teem: no workload of the scenario carries it" in text
    [summary] = data["summary"]["cost"]
    assert [line["group"] for line in summary["lines"]] == ["__unallocated__", "__idle__"]


BAD_PRICES = """\
apiVersion: gpufleet.dev/v1alpha1
kind: PriceList
metadata: {name: mine}
spec:
  cpu: {on-demand: 0.03}
  memory: {on-demand: 0.004}
  gpus:
    - {model: A100, on-demand: -2}
"""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        pytest.param(["--prices", "{bad}"], ["{bad}", "spec.gpus[0].on-demand"], id="bad-price"),
        pytest.param(["--prices", "{missing}"], ["{missing}", "cannot open"], id="no-file"),
        pytest.param(["--cost-by", "label:"], ["--cost-by", "label:KEY needs a key"], id="label"),
        pytest.param(["--cost-by", "queue,"], ["--cost-by", "expected a grouping key"], id="empty"),
    ],
)
def test_bad_cost_options_are_one_error_before_anything_runs(
    tmp_path: Path, args: list[str], said: list[str]
) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text(BAD_PRICES)
    paths = {"bad": str(bad), "missing": str(tmp_path / "nope.yaml")}
    args = [a.format(**paths) for a in args]
    out = tmp_path / "run"
    code, text = invoke(
        "--scenario", str(SCENARIO), "--cluster", str(CLUSTER), "--out", str(out), *args
    )
    assert code == 2, text
    for part in said:
        assert part.format(**paths) in text
    assert "pods arrived" not in text
    assert "cluster:" not in text
    assert not out.exists()


def test_the_cost_options_need_a_scenario() -> None:
    code, text = invoke("--prices", "p.yaml", "--cost-by", "team")
    assert code == 2
    assert "--prices, --cost-by: only with --scenario" in text


def _row(group: str, estimated: bool = False) -> CostRow:
    return CostRow("r", 42, group, 1, 1.0, 1.0, 1.0, 0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 1.0, 0.0,
                   0.0, estimated)  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "legend"),
    [
        pytest.param([_row("a"), _row("__total__")], "", id="no-marks"),
        pytest.param([_row("a", True), _row("__total__", True)], "; * estimated price", id="star"),
        pytest.param([_row("a"), _row("__idle__")], "; __idle__: GPU time nobody held", id="idle"),
    ],
)
def test_the_cost_caption_explains_only_the_marks_its_table_shows(
    rows: list[CostRow], legend: str
) -> None:
    assert cost_legend(rows) == legend
