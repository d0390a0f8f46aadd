"""``gpufleet serve --local`` with what observes the GPUs: its plane reads this machine's GPUs
(the fake NVML here) for its samples and alerts, takes ``--idle-policies`` (and IdlePolicy
objects from ``--scenario``), closes NVML when it stops, and still refuses
``--replica-autoscaling``, which needs replica controllers the local machine lacks."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from gpufleet.backends.local.telemetry import LocalTelemetry
from gpufleet.cli.main import app
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.service.idle_actions import IdleReclaimer
from gpufleet.service.local_plane import LocalControlPlane
from tests.backends.local.conftest import DGX_EXAMPLE
from tests.cli.test_serve_idle import POLICY, write

runner = CliRunner()


def serve(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(
        app,
        ["serve", "--local", "--fake-gpus", str(DGX_EXAMPLE), "--db", str(tmp_path / "g.db"),
         "--port", "0", *args],
    )  # fmt: skip
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[LocalControlPlane, int]]:
    """``serve`` builds everything, then returns: each plane it would have served, with the
    number of GPU samples one read of its telemetry gave while it served."""
    planes: list[tuple[LocalControlPlane, int]] = []

    def run(server: uvicorn.Server, **_: object) -> None:
        application = server.config.app
        assert isinstance(application, FastAPI)
        plane = application.state.plane
        assert isinstance(plane, LocalControlPlane)
        assert plane.telemetry is not None
        (reading,) = plane.telemetry.read()
        planes.append((plane, len(reading.samples)))

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return planes


def test_idle_policies_act_on_a_local_plane_that_reads_its_gpus(
    tmp_path: Path, served: list[tuple[LocalControlPlane, int]]
) -> None:
    policies = write(tmp_path, "idle.yaml", POLICY.replace("NAME", "notebooks"))
    scenario = write(
        tmp_path,
        "scenario.yaml",
        POLICY.replace("NAME", "debug")
        + "---\n"
        + (Path(__file__).parents[2] / "gpufleet/data/serve/local-queues.yaml").read_text(),
    )
    code, output = serve(tmp_path, "--idle-policies", policies, "--scenario", scenario)
    assert code == 0, output
    assert "idle policies notebooks, debug" in output
    plane, samples = served[0]
    # The README's fake DGX: eight GPUs, GPU 7's four MIG instances.
    assert samples == 12
    assert isinstance(plane.telemetry, LocalTelemetry)
    assert plane.observatory is not None
    reclaimers = [
        owner
        for owner in (getattr(s, "__self__", None) for s in plane.observatory._subscribers)
        if isinstance(owner, IdleReclaimer)
    ]
    assert [sorted(p.name for p in r.engine.policies) for r in reclaimers] == [
        ["debug", "notebooks"]
    ]
    # Alerts go out from a local plane too.
    code, output = serve(tmp_path, "--alert-webhook", "http://127.0.0.1:9/hook")
    assert code == 0, output
    assert "alerts sent to 1 route(s)" in output
    # Stopped when serve ends: NVML shut down with it.
    devices = plane.devices
    assert isinstance(devices, NvmlDeviceSource)
    assert devices._closed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--replica-autoscaling"],
            "--replica-autoscaling is not for --local: it scales Deployments through their "
            "replica controllers, and the local machine has none",
            id="replica-autoscaling",
        ),
        pytest.param(
            ["--idle-policies", "GOOD", "--scenario", "GOOD"],
            "IdlePolicy 'notebooks' is given twice",
            id="same-policy-twice",
        ),
    ],
)
def test_what_local_cannot_do_is_refused_before_it_serves(
    tmp_path: Path,
    served: list[tuple[LocalControlPlane, int]],
    args: list[str],
    message: str,
) -> None:
    good = write(tmp_path, "good.yaml", POLICY.replace("NAME", "notebooks"))
    code, output = serve(tmp_path, *[good if a == "GOOD" else a for a in args])
    assert code != 0
    assert message in output
    assert served == []


def test_observe_every_sets_the_rounds_of_the_local_plane(
    tmp_path: Path, served: list[tuple[LocalControlPlane, int]]
) -> None:
    code, output = serve(tmp_path, "--observe-every", "5")
    assert code == 0, output
    plane, _ = served[0]
    assert plane.observatory is not None
    assert plane.observatory.step_s == 5
    assert plane._observe._period == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--local", "--observe-every", "0"],
            "--observe-every must be above 0 seconds, got 0",
            id="zero",
        ),
        pytest.param(
            ["--observe-every", "5"],
            "--observe-every is for --local",
            id="without-local",
        ),
        pytest.param(
            ["--local", "--observe-every", "2.5"],
            "--observe-every: the observatory's step must be a whole number of seconds "
            "dividing 600, got 2.5",
            id="not-whole-seconds",
        ),
    ],
)
def test_observe_every_refused(
    tmp_path: Path, served: list[tuple[LocalControlPlane, int]], args: list[str], message: str
) -> None:
    result = runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", *args])
    output = " ".join(result.output.split())
    assert result.exit_code != 0
    assert message in output
    assert served == []
