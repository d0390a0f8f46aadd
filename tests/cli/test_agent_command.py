"""``gpufleet agent``'s errors before it starts: each names what is wrong, with the exit code
of its kind (2 bad input, 1 no driver), and nothing is started."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.testing.agent_builders import write_binding_key

runner = CliRunner()


def test_a_node_name_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = runner.invoke(app, ["agent"])
    assert result.exit_code == 2
    assert "--node-name is required" in result.output


def test_a_bad_fake_gpu_file_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("devices:\n  - product: NVIDIA H100 80GB HBM3\n    count: -1\n")
    result = runner.invoke(app, ["agent", "--node-name", "n", "--fake-gpus", str(path)])
    assert result.exit_code == 2
    assert "gpus.yaml" in result.output
    assert "count" in result.output


def test_a_bad_metrics_address(tmp_path: Path) -> None:
    result = runner.invoke(app, ["agent", "--node-name", "n", "--metrics-address", "9400"])
    assert result.exit_code == 2
    assert "HOST:PORT" in result.output


def test_a_bad_log_level_names_the_choices() -> None:
    result = runner.invoke(app, ["agent", "--node-name", "n", "--log-level", "loud"])
    assert result.exit_code == 2
    assert "DEBUG, INFO, WARNING, ERROR" in result.output


def test_no_driver_is_a_failure_that_says_how_to_run_without_a_gpu() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a driver is present here")
    result = runner.invoke(app, ["agent", "--node-name", "n"])
    assert result.exit_code == 1
    assert "--fake-gpus" in result.output


def test_a_node_the_api_server_does_not_have_is_a_failure_with_a_hint(tmp_path: Path) -> None:
    from tests.fakes.kube_api import FakeApiServer

    example = Path(__file__).resolve().parents[2] / "examples" / "agent" / "fake-gpus.yaml"
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        result = runner.invoke(
            app,
            [
                "agent",
                "--node-name",
                "not-there",
                "--fake-gpus",
                str(example),
                "--kubeconfig",
                str(kubeconfig),
                "--device-plugin-dir",
                str(tmp_path),
                "--pod-resources-socket",
                str(tmp_path / "pr.sock"),
                "--metrics-address",
                "127.0.0.1:0",
                "--binding-key-file",
                str(write_binding_key(tmp_path / "binding.key")),
            ],
        )
    assert result.exit_code == 1
    assert 'nodes "not-there" not found' in result.output
    assert "is --node-name this node's name?" in result.output
