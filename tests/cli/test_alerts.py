"""``gpufleet alerts export``: which rules, which format, where; bad rule files in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.fleet.alert_rules import builtin_alert_rules

runner = CliRunner()

BUILTIN_ALERTS = [rule.alert_name for rule in builtin_alert_rules()]
MINE = """\
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: power-high}
spec: {metric: POWER_USAGE, comparison: ">", threshold: 650, for: 10m, severity: critical}
"""


def alert_names(document: dict[str, object]) -> list[str]:
    groups = document["groups"] if "groups" in document else document["spec"]["groups"]  # type: ignore[index]
    return [entry["alert"] for entry in groups[0]["rules"]]  # type: ignore[index]


def export(*args: str) -> dict[str, object]:
    result = runner.invoke(app, ["alerts", "export", *args])
    assert result.exit_code == 0, result.output
    loaded: dict[str, object] = yaml.safe_load(result.stdout)
    return loaded


def test_default_is_a_prometheus_rule_of_the_builtin_rules() -> None:
    document = export()
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    assert document["kind"] == "PrometheusRule"
    assert "namespace" not in document["metadata"]  # type: ignore[operator]
    assert alert_names(document) == BUILTIN_ALERTS


def test_namespace_and_plain_rule_file() -> None:
    assert export("--namespace", "monitoring")["metadata"]["namespace"] == "monitoring"  # type: ignore[index]
    plain = export("--format", "rules")
    assert list(plain) == ["groups"]
    assert alert_names(plain) == BUILTIN_ALERTS


@pytest.mark.parametrize("builtin", ["--builtin", "--no-builtin"])
def test_user_rules_follow_the_builtin_ones(builtin: str, tmp_path: Path) -> None:
    (tmp_path / "power.yaml").write_text(MINE)
    names = alert_names(export("--rules", str(tmp_path), builtin))
    expected = ["PowerHigh"] if builtin == "--no-builtin" else [*BUILTIN_ALERTS, "PowerHigh"]
    assert names == expected


def test_output_file(tmp_path: Path) -> None:
    out = tmp_path / "rules.yaml"
    result = runner.invoke(app, ["alerts", "export", "--format", "rules", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert alert_names(yaml.safe_load(out.read_text())) == BUILTIN_ALERTS


BAD = [
    pytest.param(
        MINE.replace("650", "lots"),
        "spec.threshold",
        id="not-a-number",
    ),
    pytest.param(MINE.replace("POWER_USAGE", "FAN_SPEED"), "unknown metric", id="metric"),
    pytest.param(MINE.replace("for: 10m", "forr: 10m"), "forr", id="unknown-field"),
    pytest.param(MINE.replace("power-high", "gpu-memory-high"), "--no-builtin", id="builtin-name"),
]


@pytest.mark.parametrize(("text", "said"), BAD)
def test_bad_rule_file_is_one_line_naming_file_and_field(
    text: str, said: str, tmp_path: Path
) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["alerts", "export", "--rules", str(path)])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {path}")
    assert said in line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--no-builtin"], "no rules to export"),
        (["--format", "rules", "--namespace", "x"], "--namespace applies to"),
        (["--rules", "/nonexistent/rules.yaml"], "no such file"),
    ],
    ids=["nothing", "namespace-on-rules", "missing-file"],
)
def test_usage_errors(args: list[str], said: str) -> None:
    result = runner.invoke(app, ["alerts", "export", *args])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert said in line
