"""``gpufleet cost`` against the real app in-process: every ``-o``, and bad input (an unknown
``-o``, a bad window, a ``by`` naming nothing) refused with one line and exit code 2."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cli.remote import use_http
from gpufleet.model.times import simulated_time
from gpufleet.testing.service import ServiceHarness, as_yaml, make_harness, pod_doc

runner = CliRunner()


@pytest.fixture
def served(env: Path, tmp_path: Path) -> Iterator[ServiceHarness]:
    """4 nodes x 4 A100 (priced by gpufleet's default list); team-a runs a 2-GPU pod labelled
    team=red and team-b a 1-GPU pod, for two simulated hours."""
    harness = make_harness(tmp_path)
    client = TestClient(harness.app)
    with use_http(lambda _: client):
        red = pod_doc("train", 2, namespace="team-a", runtime="10h")
        red["metadata"]["labels"]["team"] = "red"
        for who, doc in (("team-a", red), ("team-b", pod_doc("nb", 1, namespace="team-b"))):
            args = ["submit", "-f", "-", "--token", harness.tokens[who]]
            result = runner.invoke(app, args, input=as_yaml(doc))
            assert result.exit_code == 0, result.stderr
        harness.advance(1)
        harness.advance(2 * 3600)
        yield harness
    client.close()
    harness.close()


def run(harness: ServiceHarness, *args: str, who: str = "admin") -> tuple[int, str, str]:
    result = runner.invoke(app, ["cost", *args, "--token", harness.tokens[who]])
    return result.exit_code, result.stdout, result.stderr


def test_the_table_has_a_row_per_group_and_the_total(served: ServiceHarness) -> None:
    code, out, err = run(served, "--by", "team", "--window", "7d")
    assert code == 0, err
    rows = [line.split()[0] for line in out.splitlines()]
    assert rows[:5] == ["TEAM", "red", "__unallocated__", "__idle__", "TOTAL"]
    assert "GPU UTIL" in out.splitlines()[0]
    assert "IDLE GPU-HOURS" not in out
    now = served.plane.now()
    assert f"the 7d to {simulated_time(now)};" in out, "the window's end as the cluster's time"


def test_wide_adds_the_parts(served: ServiceHarness) -> None:
    code, out, _ = run(served, "-o", "wide")
    assert code == 0
    assert "IDLE GPU-HOURS" in out.splitlines()[0]
    assert "UNPRICED GPU-HOURS" in out.splitlines()[0]


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_are_the_api_object(served: ServiceHarness, fmt: str) -> None:
    code, out, _ = run(served, "--by", "namespace", "-o", fmt)
    assert code == 0
    body = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert [line["name"] for line in body["lines"]] == ["team-a", "team-b", "__idle__"]
    assert body["by"] == ["namespace"]
    assert body["window"] == "7d"


def test_csv_has_a_header_and_a_row_per_group(served: ServiceHarness) -> None:
    code, out, _ = run(served, "--by", "namespace,queue", "-o", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["name"] for r in rows] == ["team-a/team-a", "team-b/team-b", "__idle__", "__total__"]
    a = rows[0]
    assert float(a["gpu_hours"]) == pytest.approx(4.0, rel=0.01)
    assert a["utilisation"] == ""  # unmeasured: empty, not 0
    assert float(a["allocated"]) == pytest.approx(float(a["used"]) + float(a["unmeasured"]))


def test_a_tenant_sees_its_own(served: ServiceHarness) -> None:
    code, out, _ = run(served, "-o", "csv", who="team-b")
    assert code == 0
    assert [r["name"] for r in csv.DictReader(io.StringIO(out))] == ["team-b", "__total__"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["-o", "xml"],
            "-o/--output: expected one of wide, json, yaml, csv, got 'xml'",
            id="unknown-output",
        ),
        pytest.param(["--window", "7x"], "window: expected a duration such as 7d", id="window"),
        pytest.param(["--by", "label:"], "by: label:KEY needs a key", id="by-nothing"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    served: ServiceHarness, args: list[str], message: str
) -> None:
    code, out, err = run(served, *args)
    assert code == 2
    assert out == ""
    assert err.startswith(f"error: {message}")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        pytest.param(
            ["--by", "teem"],
            "no workload has the label or annotation 'teem': every one is in __unallocated__; "
            "did you mean 'team'?",
            id="misspelt",
        ),
        pytest.param(
            ["--by", "label:team", "-o", "csv"],
            None,
            id="present",
        ),
        pytest.param(
            ["--by", "namespace,annotation:team", "-o", "csv"],
            "no workload has the annotation 'team': every one is in __unallocated__",
            id="label-not-annotation",
        ),
        pytest.param(
            ["--by", "label:colour", "-o", "csv"],
            "no workload has the label 'colour': every one is in __unallocated__ (they carry: ",
            id="nothing-close",
        ),
    ],
)
def test_a_key_no_workload_has_is_warned_of(
    served: ServiceHarness, args: list[str], warning: str | None
) -> None:
    code, _, err = run(served, *args)
    assert code == 0, err
    said = " ".join(err.split())
    if warning is None:
        assert "no workload has" not in said
    else:
        assert warning in said
