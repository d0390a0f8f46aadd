"""``serve --local`` through its API: workloads submitted as YAML run as processes on the fake
GPUs, with their devices, their logs, their ends; preemption, gangs, a restart, bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.backends.local.run_state import EXIT_FILE, read_exit
from gpufleet.model.inventory import NodeInventory
from gpufleet.testing.local_service import TENANT, LocalHarness, MovableClock
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import CHECKPOINTING, REPORT, write_script


def pod(
    name: str,
    command: list[str],
    gpus: int = 1,
    priority_class: str | None = None,
    **container: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "command": command,
                "resources": {"limits": {"nvidia.com/gpu": gpus}},
                **container,
            }
        ]
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def job(name: str, pods: int, command: list[str], gpus: int = 1) -> dict[str, Any]:
    template = pod("x", command, gpus)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"parallelism": pods, "completions": pods, "template": {"spec": template["spec"]}},
    }


def tenant_dir(harness: LocalHarness) -> Path:
    return harness.machine.tenant_root(TENANT)


def report(harness: LocalHarness, *args: str) -> list[str]:
    """``python report.py ARGS``: prints what it sees (``SEEN {json}``), then exits."""
    script = write_script(tenant_dir(harness), "report.py", REPORT)
    return [sys.executable, str(script), *args]


def seen(harness: LocalHarness, name: str, **params: Any) -> dict[str, Any]:
    text = harness.log(name, **params)["text"]
    line = next(line for line in text.splitlines() if line.startswith("SEEN "))
    found: dict[str, Any] = json.loads(line.removeprefix("SEEN "))
    return found


def printed(harness: LocalHarness, name: str, text: str = "SEEN ", **params: Any) -> Any:
    def check() -> bool:
        return text in str(harness.log(name, **params).get("text", ""))

    check.__name__ = f"{text!r} in the log of {name}"
    return check


def events(harness: LocalHarness, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in harness.workload(name)["events"]]


def test_a_submitted_pod_runs_with_its_own_gpus_and_ends_with_its_exit_code(
    harness: LocalHarness,
) -> None:
    release = tenant_dir(harness) / "release"
    first = harness.submit(pod("first", report(harness, "0", str(release)), gpus=3))
    second = harness.submit(pod("second", report(harness, "3", str(release)), gpus=2))
    assert (first["status"], second["status"]) == (201, 201)
    harness.run_until(lambda: printed(harness, "first")() and printed(harness, "second")())
    # A process may print before the turn after its bind reads it as started.
    harness.run_until(harness.state_is("first", "Running"))

    devices = {n: seen(harness, n)["CUDA_VISIBLE_DEVICES"].split(",") for n in ("first", "second")}
    assert [len(devices["first"]), len(devices["second"])] == [3, 2]
    assert not set(devices["first"]) & set(devices["second"])
    assert set(devices["first"]) | set(devices["second"]) <= {
        d.uuid for d in harness.inventory.devices
    }
    assert seen(harness, "first")["cwd"] == str(tenant_dir(harness).resolve())

    release.touch()
    harness.run_until(harness.state_is("second", "Failed"))
    harness.run_until(harness.state_is("first", "Succeeded"))
    exited = dict(events(harness, "first"))["Exited"]
    assert exited.startswith("pod first: exit code 0 after ")
    assert dict(events(harness, "second"))["Exited"].startswith("pod second: exit code 3 after ")
    log = harness.log("first")
    assert (log["attempt"], log["attempts"], log["running"], log["finished"]) == (1, 1, False, True)


def test_logs_are_read_from_an_offset(harness: LocalHarness) -> None:
    command = [sys.executable, "-c", "print('hello'); print('world')"]
    harness.submit(pod("hello", command, gpus=0))
    harness.run_until(harness.state_is("hello", "Succeeded"))
    whole = harness.log("hello")
    assert whole["text"] == "hello\nworld\n"
    rest = harness.log("hello", offset=6)
    assert (rest["text"], rest["next_offset"]) == ("world\n", whole["next_offset"])
    # its last bytes, and where they start (the dashboard shows a log's tail, then follows it)
    tail = harness.log("hello", tail=6)
    assert (tail["text"], tail["offset"], tail["next_offset"]) == ("world\n", 6, 12)
    assert harness.log("hello", tail=100)["text"] == "hello\nworld\n"


def test_a_high_priority_job_evicts_a_low_one_which_checkpoints_and_resumes(
    harness: LocalHarness,
) -> None:
    root = tenant_dir(harness)
    script = write_script(root, "train.py", CHECKPOINTING)
    checkpoint = root / "step.txt"
    train = [sys.executable, str(script), str(checkpoint), "100000"]
    harness.submit(pod("low", train, gpus=8, priority_class="low"))
    harness.run_until(printed(harness, "low", "step 3\n"))

    harness.submit(pod("high", [sys.executable, "-c", "pass"], gpus=8, priority_class="high"))
    harness.run_until(harness.state_is("high", "Succeeded"))
    assert any(reason == "Preempted" for reason, _ in events(harness, "low"))
    assert "checkpoint at" in harness.log("low", attempt=1)["text"]
    saved = int(checkpoint.read_text())

    harness.run_until(printed(harness, "low", f"resumed from {saved}", attempt=2))
    # Its process may print before the turn that started it has recorded it as running.
    harness.run_until(harness.state_is("low", "Running"))


def test_a_gang_of_two_starts_together_with_the_rendezvous_variables(
    harness: LocalHarness,
) -> None:
    release = tenant_dir(harness) / "release"
    harness.submit(job("ddp", 2, report(harness, "0", str(release))))
    harness.run_until(
        lambda: printed(harness, "ddp", pod="ddp-0")() and printed(harness, "ddp", pod="ddp-1")()
    )
    ranks = [seen(harness, "ddp", pod=f"ddp-{i}") for i in range(2)]
    assert [r["RANK"] for r in ranks] == ["0", "1"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"2"}
    assert ranks[0]["MASTER_PORT"] == ranks[1]["MASTER_PORT"] is not None
    assert {r["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"}
    assert len({r["CUDA_VISIBLE_DEVICES"] for r in ranks}) == 2
    release.touch()
    harness.run_until(harness.state_is("ddp", "Succeeded"))


def test_a_restarted_plane_finds_its_running_job_and_does_not_start_it_twice(
    harness: LocalHarness,
) -> None:
    release = tenant_dir(harness) / "release"
    harness.submit(pod("long", report(harness, "0", str(release)), gpus=2))
    harness.run_until(printed(harness, "long"))
    before = seen(harness, "long")

    harness.restart()
    assert harness.workload("long")["state"] == "Running"
    assert set(harness.plane.core.owner) == {"research/long"}
    assert seen(harness, "long")["pid"] == before["pid"]
    release.touch()
    harness.run_until(harness.state_is("long", "Succeeded"))
    assert harness.machine.runs_of("research/long") == ["research_long_1"]
    assert "SEEN " in harness.log("long")["text"]  # its output kept


def test_a_run_that_ended_while_the_plane_was_down_is_recorded_on_restart(
    harness: LocalHarness,
) -> None:
    release = tenant_dir(harness) / "release"
    harness.submit(pod("short", report(harness, "4", str(release)), gpus=1))
    harness.run_until(printed(harness, "short"))
    harness.restart()
    release.touch()
    harness.run_until(harness.state_is("short", "Failed"))
    assert dict(events(harness, "short"))["Exited"].startswith("pod short: exit code 4")
    assert harness.machine.runs_of("research/short") == ["research_short_1"]


@pytest.mark.parametrize(
    ("document", "field", "message"),
    [
        pytest.param(
            pod("x", ["no-such-command-xyz"]),
            "spec.containers[0].command[0]",
            "not found on PATH",
            id="command-not-found",
        ),
        pytest.param(
            pod("x", ["python3"], workingDir="/etc"),
            "spec.containers[0].workingDir",
            "inside the tenant's root",
            id="workdir-outside-the-tenant",
        ),
        pytest.param(
            pod("x", ["python3"], gpus=9), "resources", "asks for 9 GPUs; this machine has 8",
            id="more-gpus-than-the-machine",
        ),
        pytest.param(
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x"},
             "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
                 "spec": pod("m", ["python3"])["spec"]}}}}},
            "kind", "reads no process from a PyTorchJob", id="kind-without-a-process",
        ),
    ],
)  # fmt: skip
def test_bad_input_is_a_422_with_nothing_stored_or_started(
    harness: LocalHarness, document: dict[str, Any], field: str, message: str
) -> None:
    answer = harness.submit(document)
    assert answer["status"] == 422, answer
    assert answer["field"] == field
    assert message in answer["message"]
    harness.plane.turn()
    assert harness.store.workloads() == []
    assert harness.plane.records == {}
    assert list(harness.machine.supervisor.runs_dir.iterdir()) == []


def test_each_replica_of_a_deployment_runs_its_template_on_its_own_gpu_and_restarts(
    harness: LocalHarness,
) -> None:
    release = tenant_dir(harness) / "release"
    template = pod("x", report(harness, "0", str(release)), gpus=1)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
        },
    }
    assert harness.submit(deployment)["status"] == 201
    harness.run_until(lambda: printed(harness, "web-0")() and printed(harness, "web-1")())
    devices = {seen(harness, f"web-{i}")["CUDA_VISIBLE_DEVICES"] for i in range(2)}
    assert len(devices) == 2
    release.touch()  # each ends, and is restarted in place (restartPolicy Always)
    harness.run_until(lambda: all(len(harness.machine.runs_of(f"research/web-{i}")) > 1
                                  for i in range(2)))  # fmt: skip
    assert harness.workload("web-0")["state"] == "Running"
    for i in range(2):
        harness.client().delete(f"/api/v1/workloads/research/web-{i}")
    harness.run_until(lambda: not harness.machine.supervisor.running)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, None, id="declares-none"),
        pytest.param({"gpufleet.dev/expected-runtime": "2h"}, 7200.0, id="declares-2h"),
    ],
)
def test_the_expected_runtime_is_what_the_workload_declares(
    harness: LocalHarness, annotations: dict[str, str], expected: float | None
) -> None:
    """Not the simulated cluster's default run time: a process runs until it ends, and the
    scheduler's estimates assume what it declares."""
    manifest = pod("declared", [sys.executable, "-c", "pass"])
    manifest["metadata"]["annotations"] = annotations
    body = harness.submit(manifest)
    assert body["status"] == 201, body
    assert harness.workload("declared")["expected_runtime"] == expected
    harness.run_until(harness.state_is("declared", "Succeeded"))


def test_a_run_that_ended_while_down_is_dated_and_billed_to_its_recorded_end(
    eight_gpus: NodeInventory, state_root: Path
) -> None:
    """The shim recorded its end (``exit.json``); the server came back 30 s later: the run is
    dated, timed and charged to that end, not to the restart."""
    clock = MovableClock()
    harness = LocalHarness.start(eight_gpus, state_root, clock=clock)
    try:
        release = tenant_dir(harness) / "release"
        harness.submit(pod("short", report(harness, "0", str(release)), gpus=1))
        harness.run_until(printed(harness, "short"))
        run_dir = harness.machine.supervisor.run_dir("research_short_1")
        started = harness.workload("short")["started"]

        def end_then_stay_down() -> None:
            release.touch()
            wait_until(lambda: read_exit(run_dir / EXIT_FILE) is not None)
            clock.advance(30.0)  # the server is back 30 s after the run ended

        harness.restart(end_then_stay_down)
        harness.run_until(harness.state_is("short", "Succeeded"))
        record = read_exit(run_dir / EXIT_FILE)
        assert record is not None
        ended = record.ended_at
        detail = harness.workload("short")
        assert detail["finished"] == pytest.approx(ended, abs=0.01)
        [exited] = [e for e in detail["events"] if e["reason"] == "Exited"]
        assert exited["time"] == pytest.approx(ended, abs=0.01)
        ran = exited["message"].split(" after ")[1]
        assert float(ran.removesuffix("s")) < 10, exited["message"]  # not 30 s and more
        assert ended - started < 10
    finally:
        harness.shut_down()


def test_a_cancelled_run_has_its_exited_event(harness: LocalHarness) -> None:
    harness.submit(pod("victim", report(harness, "0", str(tenant_dir(harness) / "never")), gpus=1))
    harness.run_until(printed(harness, "victim"))
    harness.client().delete("/api/v1/workloads/research/victim")
    harness.run_until(lambda: "Exited" in dict(events(harness, "victim")))
    message = dict(events(harness, "victim"))["Exited"]
    assert message.startswith("pod victim: cancelled; "), message
    assert " after " in message
