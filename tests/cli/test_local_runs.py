"""``gpufleet run``, ``logs``, ``describe`` and ``get workloads`` against a ``serve --local``
plane in-process (its loop in its thread, the processes real, the GPUs fake)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.cli import local_runs
from gpufleet.cli.local_runs import array_manifest, default_name, run_manifest
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


@pytest.mark.parametrize(
    ("array", "gpus", "server_gpus", "completions", "parallelism", "first_last"),
    [
        pytest.param("0-99", 1, 8, 100, 8, "0-99", id="all-at-once-as-the-gpus-hold"),
        pytest.param("0-99%4", 1, 8, 100, 4, "0-99", id="percent-n-at-a-time"),
        pytest.param("1-10", 0, 8, 10, 10, "1-10", id="no-gpus-all-at-once"),
        pytest.param("0-9%20", 2, 8, 10, 4, "0-9", id="two-gpus-each-four-at-a-time"),
        pytest.param("3-3", 1, None, 1, 1, "3-3", id="one-task-gpus-unknown"),
    ],
)
def test_an_array_is_an_indexed_job_of_as_many_completions_as_tasks(
    array: str,
    gpus: int,
    server_gpus: int | None,
    completions: int,
    parallelism: int,
    first_last: str,
) -> None:
    pod = run_manifest(["python", "task.py"], gpus, "sweep", queue="research")
    manifest = array_manifest(pod, array, server_gpus)
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch/v1", "Job")
    assert manifest["metadata"] == {
        "name": "sweep",
        "labels": {QUEUE_LABEL: "research"},
        "annotations": {"gpufleet.dev/array": first_last},
    }
    spec = manifest["spec"]
    assert (spec["completions"], spec["parallelism"]) == (completions, parallelism)
    assert (spec["completionMode"], spec["backoffLimitPerIndex"]) == ("Indexed", 0)
    assert spec["template"]["spec"] == pod["spec"]


@pytest.mark.parametrize(
    "array",
    [
        pytest.param("5-1", id="last-before-first"),
        pytest.param("0-9%0", id="zero-at-a-time"),
        pytest.param("1,3,5", id="a-list"),
    ],
)
def test_a_malformed_array_is_bad_input(served: LocalHarness, array: str) -> None:
    code, _, err = gpufleet(served, "run", "--array", array, "--", sys.executable, "-c", "")
    assert code == 2
    assert "--array: expected" in err
    assert served.plane.records == {}


#: A task: prints its index and task id; task 3 (index 2) fails.
TASK = (
    "import os, sys; i = os.environ['JOB_COMPLETION_INDEX']; "
    "print('TASK', i, os.environ['SLURM_ARRAY_TASK_ID'], os.environ['SLURM_ARRAY_TASK_COUNT']); "
    "sys.exit(3 if i == '2' else 0)"
)


def test_run_array_runs_every_task_once_and_a_failed_one_alone(served: LocalHarness) -> None:
    code, _, err = gpufleet(
        served, "run", "--array", "1-4%2", "--gpus", "1", "--name", "sweep", "-f",
        "--", sys.executable, "-c", TASK,
    )  # fmt: skip
    assert code == 1, err  # task 3 failed: the Job failed, at the end
    printed = []
    for rank in range(2):  # 2 at a time: its two pods ran the four tasks in turn
        for run in served.machine.runs_of(f"research/sweep-{rank}"):
            text = served.machine.supervisor.log_path(run).read_text()
            printed += [tuple(line.split()[1:]) for line in text.splitlines()]
    assert sorted(printed) == [("0", "1", "4"), ("1", "2", "4"), ("2", "3", "4"), ("3", "4", "4")]
    _, out, _ = gpufleet(served, "describe", "workload", "sweep")
    assert "FailedIndexes" in out
    assert "Failed indexes" in out
    assert "Job has failed indexes 2" in out


#: Prints that it is up, then sleeps; with ``stubborn``, it ignores SIGTERM (grace then kill).
SLEEPER = "import signal, sys, time; {ignore}print('up', flush=True); time.sleep(60)"


def press_ctrl_c(harness: LocalHarness, name: str, times: int) -> Callable[[float], None]:
    """A follow loop's pause that raises KeyboardInterrupt once ``name`` is running and has
    printed ``up`` (and on the next pauses, ``times`` in all), as Ctrl-C does."""
    pressed = 0

    def pause(seconds: float) -> None:
        nonlocal pressed
        up = pressed or "up" in str(harness.log(name).get("text", ""))
        if up and pressed < times:
            pressed += 1
            raise KeyboardInterrupt
        time.sleep(seconds)

    return pause


@pytest.mark.parametrize(
    ("stubborn", "presses", "said"),
    [
        pytest.param(False, 1, "waiting for it to stop", id="cancels-and-waits"),
        pytest.param(True, 2, "stopped waiting: workload/research/sleeper",
                     id="twice-stops-waiting"),
    ],
)  # fmt: skip
def test_ctrl_c_on_run_follow_cancels_the_workload_and_exits_130(
    served: LocalHarness,
    monkeypatch: pytest.MonkeyPatch,
    stubborn: bool,
    presses: int,
    said: str,
) -> None:
    monkeypatch.setattr(local_runs, "pause", press_ctrl_c(served, "sleeper", presses))
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if stubborn else ""
    code, out, err = gpufleet(
        served, "run", "--name", "sleeper", "-f", "--", sys.executable, "-c",
        SLEEPER.format(ignore=ignore),
    )  # fmt: skip
    assert code == 130, err
    assert "Ctrl-C: workload/research/sleeper (Pod) cancelled" in out
    assert said in out
    assert served.workload("sleeper")["state"] == "Cancelled"
    # It waited for the run to stop, unless told not to (a stubborn one's 5 s grace).
    assert (served.machine.run_of("research/sleeper") is not None) is stubborn


def test_ctrl_c_on_run_follow_detach_leaves_it_running(
    served: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_runs, "pause", press_ctrl_c(served, "sleeper", 1))
    code, out, err = gpufleet(
        served, "run", "--name", "sleeper", "-f", "--detach", "--", sys.executable, "-c",
        SLEEPER.format(ignore=""),
    )  # fmt: skip
    assert code == 0, err
    assert "detached: workload/research/sleeper goes on; follow it again with: " in out
    assert "gpufleet logs -f research/sleeper" in out
    assert served.workload("sleeper")["state"] == "Running"
