"""``gpufleet serve --scenario`` takes a scenario's GpuFault, SpotInterruption and NodeFailure
objects and its SimulatedTelemetry (checked with the rest: a fault on a GPU or node the cluster
lacks refuses the whole scenario), and ``--usage-profile`` and ``--seed`` win over the
scenario's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.backends.sim.telemetry import LockedTelemetry, SimTelemetry
from gpufleet.cli.main import app
from gpufleet.model.faults import GpuFault
from gpufleet.service.embedded_plane import EmbeddedControlPlane
from gpufleet.service.store import Store
from gpufleet.telemetry.profiles import UsageProfile
from gpufleet.testing.service import as_yaml, pod_doc

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def fault(node: str = "t4-0001", gpu: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": "falls-off"},
        "spec": {"at": "2m", "node": node, "gpu": gpu, "xid": 79, "recoverAfter": "10m"},
    }


def node_fault(kind: str = "SpotInterruption", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "reclaim"},
        "spec": {"nodes": ["t4-0001"], "at": "5m", **spec},
    }


TELEMETRY = {
    "apiVersion": "gpufleet.dev/v1alpha1",
    "kind": "SimulatedTelemetry",
    "metadata": {"name": "usage"},
    "spec": {"defaultProfile": "notebook", "seed": 7},
}


def serve(tmp_path: Path, objects: list[dict[str, Any]], *more: str) -> Any:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(as_yaml(*objects))
    args = ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", "--scenario", str(scenario)]
    return runner.invoke(app, [*args, *more])


def test_the_scenarios_faults_and_telemetry_reach_the_plane(
    tmp_path: Path, served: list[EmbeddedControlPlane]
) -> None:
    result = serve(tmp_path, [fault(), TELEMETRY, pod_doc("p")])
    assert result.exit_code == 0, result.output
    assert "1 GPU faults to play" in result.output
    options = served[0].options
    assert options.faults == (GpuFault(120.0, "t4-0001", 3, 79, 600.0, options.faults[0].name),)
    assert (options.usage_profile, options.telemetry_seed, options.seed) == (
        UsageProfile.NOTEBOOK,
        7,
        0,
    )
    telemetry = served[0].telemetry
    assert isinstance(telemetry, LockedTelemetry)
    assert isinstance(telemetry.source, SimTelemetry)
    assert telemetry.source.default_profile is UsageProfile.NOTEBOOK


def test_the_scenarios_node_faults_reach_the_plane(
    tmp_path: Path, served: list[EmbeddedControlPlane]
) -> None:
    result = serve(tmp_path, [node_fault(), node_fault("NodeFailure"), pod_doc("p")])
    assert result.exit_code == 0, result.output
    assert "2 spot interruptions and node failures to play" in result.output
    faults = served[0].options.node_faults
    assert [(f.kind.value, f.selection.names, f.times) for f in faults] == [
        ("SpotInterruption", ("t4-0001",), (300.0,)),
        ("NodeFailure", ("t4-0001",), (300.0,)),
    ]
    plan = served[0].world.node_plan
    assert plan is not None
    assert plan.chosen == [("t4-0001",), ("t4-0001",)]


def test_the_command_line_wins_over_the_scenario(
    tmp_path: Path, served: list[EmbeddedControlPlane]
) -> None:
    result = serve(tmp_path, [TELEMETRY], "--usage-profile", "Training", "--seed", "3")
    assert result.exit_code == 0, result.output
    options = served[0].options
    assert (options.usage_profile, options.telemetry_seed, options.seed) == (
        UsageProfile.TRAINING,
        3,
        3,
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (fault(node="n9"), "GpuFault falls-off: spec.node: no node 'n9' in the cluster"),
        (fault(gpu=4), "spec.gpu: node 't4-0001' has no GPU 4 (its GPUs: 0, 1, 2, 3)"),
        (
            {**TELEMETRY, "spec": {"defaultProfile": "batch"}},
            "SimulatedTelemetry usage: spec.defaultProfile: expected one of training, inference,",
        ),
        (
            node_fault(nodes=["n9"]),
            "SpotInterruption reclaim: spec.nodes: no node 'n9' in the cluster",
        ),
        (
            node_fault("NodeFailure", notice="1m"),
            "NodeFailure reclaim: spec.notice: unknown field; a node failure gives no notice",
        ),
    ],
    ids=["unknown-node", "unknown-gpu", "unknown-profile", "spot-unknown-node", "failure-notice"],
)
def test_a_bad_fault_or_setting_refuses_the_whole_scenario(
    tmp_path: Path, served: list[EmbeddedControlPlane], bad: dict[str, Any], message: str
) -> None:
    result = serve(tmp_path, [bad, pod_doc("p")])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not served
    store = Store(tmp_path / "g.db")
    assert (store.workloads(), store.meta("seeded")) == ([], None)
    store.close()


def test_a_bad_usage_profile_option_lists_the_profiles(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", "--usage-profile", "x"]
    )
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "--usage-profile: expected one of training, inference, notebook, debug, idle" in text
    assert not (tmp_path / "g.db").exists()


def test_the_usage_profile_is_for_the_simulated_cluster(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    result = runner.invoke(
        app,
        ["serve", "--db", str(tmp_path / "g.db"), "--port", "0",
         "--kubeconfig", str(kubeconfig), "--usage-profile", "idle"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--usage-profile are for the simulated cluster" in " ".join(result.output.split())


@pytest.mark.parametrize(
    "cluster", [None, "examples/clusters/small.yaml"], ids=["bundled", "small"]
)
def test_the_example_loads_on_the_bundled_and_the_small_cluster(
    tmp_path: Path, served: list[EmbeddedControlPlane], cluster: str | None
) -> None:
    args = ["serve", "--db", str(tmp_path / "g.db"), "--port", "0"]
    args += ["--scenario", str(REPO / "examples/tenancy/queues.yaml")]
    args += ["--scenario", str(REPO / "examples/serve/faults.yaml")]
    if cluster is not None:
        args += ["--cluster", str(REPO / cluster)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    options = served[0].options
    assert [(f.node, f.gpu, f.xid) for f in options.faults] == [
        ("h100-0000", 2, 79),
        ("t4-0001", 0, 48),
    ]
    assert options.usage_profile is UsageProfile.NOTEBOOK
