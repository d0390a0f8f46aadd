"""``gpufleet run``, ``logs``, ``describe`` and ``get workloads`` against a ``serve --local``
plane in-process (its loop in its thread, the processes real, the GPUs fake)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.cli import local_runs
from gpufleet.cli.local_runs import default_name, run_manifest
from gpufleet.cli.main import app
from gpufleet.cli.remote import use_http
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.queues import QUEUE_LABEL
from gpufleet.testing.local_service import TENANT, LocalHarness
from tests.backends.local.conftest import eight_gpus, no_process_left, state_root

__all__ = ["eight_gpus", "no_process_left", "state_root"]

runner = CliRunner()


@pytest.fixture
def served(
    env: Path, eight_gpus: NodeInventory, state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalHarness]:
    monkeypatch.setattr(local_runs, "FOLLOW_EVERY_S", 0.01)
    harness = LocalHarness.start(eight_gpus, state_root)
    client = TestClient(harness.app)
    try:
        with use_http(lambda _: client), harness.serving():
            yield harness
    finally:
        client.close()
        harness.shut_down()


def gpufleet(harness: LocalHarness, *args: str) -> tuple[int, str, str]:
    # The token from the environment: after ``--`` every word is the command's.
    result = runner.invoke(app, list(args), env={"GPUFLEET_TOKEN": harness.tokens[TENANT]})
    return result.exit_code, result.stdout, result.stderr


def test_run_follow_logs_describe_and_get_end_to_end(served: LocalHarness) -> None:
    show = "import os; print('sees', os.environ['CUDA_VISIBLE_DEVICES'])"
    code, out, err = gpufleet(
        served, "run", "--gpus", "2", "--queue", TENANT, "--name", "hello", "-f",
        "--", sys.executable, "-c", show,
    )  # fmt: skip
    assert code == 0, err
    assert "workload/research/hello accepted: 2 GPU(s), queue research" in out
    seen = next(line for line in out.splitlines() if line.startswith("sees "))
    uuids = seen.removeprefix("sees ").split(",")
    assert len(uuids) == 2
    assert set(uuids) <= {d.uuid for d in served.inventory.devices}

    code, out, _ = gpufleet(served, "logs", "hello")
    assert (code, out) == (0, seen + "\n")
    code, out, _ = gpufleet(served, "describe", "workload", "hello")
    assert code == 0
    assert "Exited" in out
    assert "exit code 0 after" in out
    code, out, _ = gpufleet(served, "get", "workloads")
    assert code == 0
    assert "hello" in out
    assert "Succeeded" in out


def test_run_follow_exits_1_when_the_command_fails_and_describe_says_why(
    served: LocalHarness,
) -> None:
    code, _, _ = gpufleet(
        served, "run", "--name", "bad", "-f", "--", sys.executable, "-c", "raise SystemExit(3)"
    )
    assert code == 1
    _, out, _ = gpufleet(served, "describe", "workload", "bad")
    assert "exit code 3" in out


def test_run_of_a_command_that_does_not_exist_is_bad_input(served: LocalHarness) -> None:
    code, _, err = gpufleet(served, "run", "--gpus", "1", "--", "no-such-command-xyz")
    assert code == 2
    assert "command 'no-such-command-xyz' not found on PATH" in err
    assert served.plane.records == {}


@pytest.mark.parametrize(
    ("argv", "stem"),
    [
        pytest.param(["python", "-u", "train.py", "--lr", "3"], "train", id="script"),
        pytest.param(["/usr/bin/nvidia-smi"], "nvidia-smi", id="program"),
        pytest.param(["python", "My_Eval.PY"], "my-eval", id="made-a-name"),
    ],
)
def test_a_default_name_comes_from_the_command(argv: list[str], stem: str) -> None:
    name = default_name(argv)
    assert name.rsplit("-", 1)[0] == stem
    assert len(name.rsplit("-", 1)[1]) == 6


def test_a_one_liner_is_a_pod_that_keeps_its_command_literal() -> None:
    manifest = run_manifest(
        ["sh", "-c", "echo $(HOME) $$"], 2, "x", queue="research", env={"A": "$(B)"}
    )
    container = manifest["spec"]["containers"][0]
    assert container["command"] == ["sh", "-c", "echo $$(HOME) $$$$"]
    assert container["env"] == [{"name": "A", "value": "$$(B)"}]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert manifest["metadata"]["labels"] == {QUEUE_LABEL: "research"}


@pytest.mark.parametrize(
    ("gpus", "cpus", "memory", "resources"),
    [
        (0, "500m", "100Mi", {"limits": {"cpu": "500m", "memory": "100Mi"},
                              "requests": {"cpu": "500m", "memory": "100Mi"}}),
        (1, None, "1Gi", {"limits": {"nvidia.com/gpu": 1, "memory": "1Gi"},
                          "requests": {"memory": "1Gi"}}),
        (0, None, None, None),
    ],
    ids=["cpus-and-memory", "a-gpu-and-memory", "nothing"],
)  # fmt: skip
def test_cpus_and_memory_are_the_pods_requests_and_limits(
    gpus: int, cpus: str | None, memory: str | None, resources: dict[str, object] | None
) -> None:
    manifest = run_manifest(["true"], gpus, "x", cpus=cpus, memory=memory)
    assert manifest["spec"]["containers"][0].get("resources") == resources
