"""``gpufleet serve``'s options about what it observes: alert rules and prices reach the plane
and the API, and each bad one is one clear error before anything is stored or served."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.service.embedded_plane import EmbeddedControlPlane

runner = CliRunner()

RULE = """
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: gpu-busy}
spec: {metric: DCGM_FI_DEV_GPU_UTIL, comparison: ">", threshold: 30, for: 1m}
"""
PRICES = """
apiVersion: gpufleet.dev/v1alpha1
kind: PriceList
metadata: {name: ours}
spec:
  currency: USD
  cpu: {on-demand: 0.03, spot: 0.01, reserved: 0.03}
  memory: {on-demand: 0.004, spot: 0.001, reserved: 0.004}
  gpus:
    - {model: A100, on-demand: 2.0, source: our contract, asOf: "2026-11-01"}
"""


def serve(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", *args])
    return result.exit_code, " ".join(result.output.split())


def test_rules_from_a_file_join_or_replace_the_built_in_ones(
    tmp_path: Path,
    served: list[EmbeddedControlPlane],
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    code, output = serve(tmp_path, "--alert-rules", str(rules))
    assert code == 0, output
    observatory = served[0].observatory
    assert observatory is not None
    names = {rule.name for rule in observatory.rules}
    assert {"gpu-busy", "gpu-memory-high", "workload-gpu-idle"} <= names
    code, output = serve(tmp_path, "--alert-rules", str(rules), "--no-builtin-alerts")
    assert code == 0, output
    assert served[1].observatory is not None
    assert [rule.name for rule in served[1].observatory.rules] == ["gpu-busy"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--alert-rules", "RULES"],
            "spec.threshold",
            id="malformed-rule",
        ),
        pytest.param(["--prices", "PRICES"], "PRICES", id="bad-prices"),
        pytest.param(
            ["--prometheus-url", "http://127.0.0.1:9090"],
            "--prometheus-url is for --kubeconfig",
            id="prometheus-without-kubeconfig",
        ),
    ],
)
def test_bad_options_are_refused_before_anything_is_stored(
    tmp_path: Path,
    served: list[EmbeddedControlPlane],
    args: list[str],
    message: str,
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE.replace("threshold: 30", "threshold: hot"))
    prices = tmp_path / "prices.yaml"
    prices.write_text("kind: PriceList\nspec: {gpus: [{model: A100, onDemand: -1}]}\n")
    named = {"RULES": str(rules), "PRICES": str(prices)}
    code, output = serve(tmp_path, *[named.get(a, a) for a in args])
    assert code == 2, output
    assert named.get(message, message) in output
    assert not served
    assert not (tmp_path / "g.db").exists()


def test_a_price_list_reaches_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    apps: list[FastAPI] = []

    def run(server: uvicorn.Server, **_: object) -> None:
        assert isinstance(server.config.app, FastAPI)
        apps.append(server.config.app)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    code, output = serve(tmp_path, "--prices", str(prices))
    assert code == 0, output
    (served_app,) = apps
    assert [gpu.model for gpu in served_app.state.price_list().gpus] == ["A100"]
