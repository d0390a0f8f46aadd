"""The commands' readers on real-world input: a directory of an application's manifests (what is
skipped is said once, on one line), names Kubernetes would refuse (bad input, exit 2, not a 404),
and inputs over the size limit (refused before they are read, stdin included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.manifests import LIMIT_VARIABLE
from gpufleet.testing.service import ServiceHarness, as_yaml, pod_doc
from tests.cli.test_remote import as_, served

__all__ = ["served"]  # the fixture, used by the tests below

runner = CliRunner()
SMALL = "examples/clusters/small.yaml"
CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {}}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}, "spec": {}}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train"},
    "spec": {"containers": [{"name": "c"}]},
}


def write(path: Path, *documents: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(list(documents)))
    return path


def test_place_skips_what_has_no_scheduling_meaning_saying_so_once(tmp_path: Path) -> None:
    write(tmp_path / "app" / "config.yaml", CONFIG_MAP, SERVICE)
    write(tmp_path / "app" / "pods.yaml", CONFIG_MAP | {"metadata": {"name": "b"}}, POD)
    result = runner.invoke(app, ["place", "--cluster", SMALL, "--workload", str(tmp_path / "app")])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == [
        "warning: skipped 3 objects of kinds with no scheduling meaning: ConfigMap (2), Service (1)"
    ]
    assert "1 of 1 pods placed" in result.stdout


def test_simulate_scenario_skips_too(tmp_path: Path) -> None:
    path = write(tmp_path / "scenario.yaml", POD, CONFIG_MAP)
    result = runner.invoke(app, ["place", "--cluster", SMALL, "--scenario", str(path)])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("skipped 1 object of kinds with no scheduling meaning") == 1


def test_a_bad_name_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path / "pods.yaml", POD | {"metadata": {"name": "train-🚀"}})
    result = runner.invoke(app, ["place", "--cluster", SMALL, "--workload", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {path}:document 1 (line 1), Pod default/train-🚀: metadata.name: must be a "
        "DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with a "
        "letter or digit): '🚀' is not allowed; got 'train-🚀'"
    )


def test_place_refuses_a_big_file_before_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LIMIT_VARIABLE, "3Ki")  # the cluster file is below it
    path = tmp_path / "big.yaml"
    path.write_text("#" * 4095 + "\n")
    result = runner.invoke(app, ["place", "--cluster", SMALL, "--workload", str(path)])
    assert result.exit_code == 2
    assert f"{path}: the input is 4 KiB; manifests above 3 KiB are refused" in result.stderr


def test_submit_a_directory_with_config_files(served: ServiceHarness, tmp_path: Path) -> None:
    write(tmp_path / "app" / "a-config.yaml", CONFIG_MAP, SERVICE)
    write(tmp_path / "app" / "b-train.yaml", pod_doc("train"), CONFIG_MAP)
    result = as_(served, "team-a", "submit", "-f", str(tmp_path / "app"))
    assert result.code == 0, result.err
    assert result.out.startswith("workload/team-a/train accepted: Pod")
    assert result.err.splitlines() == [
        "warning: skipped 3 objects of kinds with no scheduling meaning: ConfigMap (2), Service (1)"
    ]


def test_submit_a_directory_of_nothing_to_schedule(served: ServiceHarness, tmp_path: Path) -> None:
    write(tmp_path / "app" / "a.yaml", CONFIG_MAP)
    write(tmp_path / "app" / "b.yaml", SERVICE)
    result = as_(served, "team-a", "submit", "-f", str(tmp_path / "app"))
    assert result.code == 2
    assert "no workloads in" in result.err
    assert "skipped 2 objects of kinds with no scheduling meaning" in result.err


def test_submit_of_one_file_of_nothing_to_schedule_is_the_servers_422(
    served: ServiceHarness,
) -> None:
    result = as_(served, "team-a", "submit", "-f", "-", input=as_yaml(CONFIG_MAP))
    assert result.code == 2
    assert "no workloads in the request" in result.err


def test_submit_reads_stdin_up_to_the_limit(
    served: ServiceHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LIMIT_VARIABLE, "1Ki")
    result = as_(served, "team-a", "submit", "-f", "-", input="#" * 5000 + "\n")
    assert result.code == 2
    assert result.err.strip() == (
        "error: stdin: the input has more than 1 KiB; manifests above 1 KiB are refused before "
        f"they are read (set {LIMIT_VARIABLE}, e.g. to 256Mi, to allow more)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["get", "workloads", "Train-1"], "workload name 'Train-1': must be", id="workload"
        ),
        pytest.param(
            ["get", "workloads", "team.a/x"],
            "namespace 'team.a': must be a DNS-1123 label",
            id="namespace-in-the-name",
        ),
        pytest.param(["get", "workloads", "-n", "Team-A"], "namespace 'Team-A'", id="-n"),
        pytest.param(["get", "queues", "Q" * 70], "queue 'QQQ", id="queue"),
        pytest.param(["get", "workloads", "--queue", "a b"], "queue 'a b'", id="--queue"),
        pytest.param(["describe", "node", "node_1"], "node 'node_1'", id="node"),
        pytest.param(["delete", "workload", "тест"], "workload name 'тест'", id="delete"),
    ],
)
def test_names_on_the_command_line_are_checked(
    served: ServiceHarness, args: list[str], message: str
) -> None:
    result = as_(served, "team-a", *args)
    assert result.code == 2, result.err
    assert message in result.err
    assert len(result.err.splitlines()) == 1
