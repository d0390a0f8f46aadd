"""``gpufleet serve --kubeconfig K --prometheus-url URL`` scales the workloads annotated for it
unless told ``--no-replica-autoscaling``; asked for without what it needs, it says which."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from gpufleet.backends.prometheus.inference import PrometheusInferenceMetrics
from gpufleet.cli.main import app
from gpufleet.service.kube_plane import KubeControlPlane
from gpufleet.testing.agent_builders import write_binding_key
from tests.fakes.kube_api import FakeApiServer

runner = CliRunner()


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[KubeControlPlane]:
    """``serve`` builds and starts everything, then returns; the planes it would have served."""
    planes: list[KubeControlPlane] = []

    def run(server: uvicorn.Server, **_: object) -> None:
        application = server.config.app
        assert isinstance(application, FastAPI)
        plane = application.state.plane
        assert isinstance(plane, KubeControlPlane)
        planes.append(plane)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return planes


def serve(tmp_path: Path, *args: str) -> tuple[int, str]:
    key = write_binding_key(tmp_path / "binding.key")
    command = ["serve", "--db", str(tmp_path / "g.db"), "--port", "0"]
    result = runner.invoke(app, [*command, "--binding-key-file", str(key), *args])
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(
    ("args", "scaling"),
    [
        pytest.param([], True, id="on-by-default"),
        pytest.param(["--no-replica-autoscaling"], False, id="turned-off"),
        pytest.param(["--replica-autoscaling"], True, id="asked-for"),
    ],
)
def test_the_scaler_runs_with_prometheus_unless_turned_off(
    tmp_path: Path, served: list[KubeControlPlane], args: list[str], scaling: bool
) -> None:
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        code, output = serve(
            tmp_path,
            *("--kubeconfig", str(kubeconfig), "--prometheus-url", "http://127.0.0.1:9"),
            *args,
        )
    assert code == 0, output
    (plane,) = served
    assert ("annotated gpufleet.dev/max-replicas autoscaled" in output) is scaling
    if scaling:
        assert plane.replica_scaler is not None
        assert isinstance(plane.replica_scaler.metrics, PrometheusInferenceMetrics)
    else:
        assert plane.replica_scaler is None


def test_without_prometheus_nothing_is_scaled(
    tmp_path: Path, served: list[KubeControlPlane]
) -> None:
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        code, output = serve(tmp_path, "--kubeconfig", str(kubeconfig))
    assert code == 0, output
    (plane,) = served
    assert plane.replica_scaler is None
    assert "autoscaled" not in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--replica-autoscaling"], "is for --kubeconfig", id="simulated"),
        pytest.param(
            ["--replica-autoscaling", "--kubeconfig", "kubeconfig"],
            "needs --prometheus-url",
            id="no-prometheus",
        ),
    ],
)
def test_asked_for_without_what_it_needs(
    tmp_path: Path, served: list[KubeControlPlane], args: list[str], message: str
) -> None:
    code, output = serve(tmp_path, *args)
    assert code == 2, output
    assert "--replica-autoscaling" in output
    assert message in output
    assert not served
    assert not (tmp_path / "g.db").exists()
