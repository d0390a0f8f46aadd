"""``serve --local`` and a pod's ``restartPolicy``: a Deployment's replica (``Always``) is
restarted in place whenever its process ends, a Pod with ``OnFailure`` when it fails, each after
the kubelet's back-off (doubling to a cap, reset after a long run; short here), each restart a
new run with its own log, counted on the pod, across a restart of the plane too; a
cancellation stops it for good. The jobs are a script that counts its attempts and ends each
as its plan says."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from gpufleet.backends.local.restarts import CrashBackoff
from gpufleet.backends.local.run_state import EXIT_FILE
from gpufleet.testing.local_service import LocalHarness
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import write_script
from tests.service.local.test_local_plane import events, pod, tenant_dir

#: ``planned.py PLAN``: counts its attempts in ./attempts and prints ``ATTEMPT n on GPUS``
#: (its ``CUDA_VISIBLE_DEVICES``); PLAN is a
#: comma-separated exit code per attempt (``3@0.4``: after 0.4 s); later attempts wait for
#: ./stop, then exit 0.
PLANNED = """
import os, sys, time
count = int(open("attempts").read()) + 1 if os.path.exists("attempts") else 1
open("attempts.tmp", "w").write(str(count))
os.replace("attempts.tmp", "attempts")  # whole, for the test that reads it
print(f"ATTEMPT {count} on {os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
plan = [p for p in sys.argv[1].split(",") if p]
if count > len(plan):
    while not os.path.exists("stop"):
        time.sleep(0.005)
    sys.exit(0)
code, _, after = plan[count - 1].partition("@")
time.sleep(float(after or 0))
sys.exit(int(code))
"""


def planned(harness: LocalHarness, plan: str) -> list[str]:
    script = write_script(tenant_dir(harness), "planned.py", PLANNED)
    return [sys.executable, str(script), plan]


def deployment(name: str, command: list[str]) -> dict[str, Any]:
    template = pod("x", command, gpus=1)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
        },
    }


def attempts(harness: LocalHarness) -> int:
    path = tenant_dir(harness) / "attempts"
    return int(path.read_text()) if path.exists() else 0


def backoffs(harness: LocalHarness, name: str) -> list[str]:
    return [m for r, m in events(harness, name) if r == "BackOff"]


def pod_view(harness: LocalHarness, name: str) -> Any:
    [only] = harness.workload(name)["pod_views"]
    return only


def test_a_replica_is_restarted_in_place_whenever_it_ends_with_a_growing_back_off(
    harness: LocalHarness,
) -> None:
    harness.machine.crash_backoff = CrashBackoff(0.05, 0.2, 1.0)
    # Exit 0, 3, 3, 3 at once; then 3 after a run longer than the reset (1 s); then runs.
    plan = "0,3,3,3,3@1.2"
    assert harness.submit(deployment("web", planned(harness, plan)))["status"] == 201
    harness.run_until(lambda: attempts(harness) == 6, timeout_s=30)
    harness.run_until(lambda: len(backoffs(harness, "web-0")) == 5)

    assert harness.workload("web-0")["state"] == "Running"
    delays = [m.split("back-off of ")[1].split("s ")[0] for m in backoffs(harness, "web-0")]
    assert delays == ["0.05", "0.1", "0.2", "0.2", "0.05"]  # doubled, capped, reset
    assert "ended (exit code 0)" in backoffs(harness, "web-0")[0]
    assert "ended (exit code 3)" in backoffs(harness, "web-0")[1]
    assert "restart 5, restartPolicy Always" in backoffs(harness, "web-0")[4]
    view = pod_view(harness, "web-0")
    assert view["restarts"] == 5
    runs = harness.machine.runs_of("research/web-0")
    assert runs == [f"research_web-0_{n}" for n in range(1, 7)]
    gpus = set()
    for attempt in range(1, 7):  # each run's own log, on the same GPU
        text = harness.log("web-0", attempt=attempt)["text"]
        assert text.startswith(f"ATTEMPT {attempt} on GPU-")
        assert text.count("ATTEMPT") == 1
        gpus.add(text.split(" on ")[1].strip())
    assert len(gpus) == 1

    # Cancelled: stopped for good, not restarted.
    harness.client().delete("/api/v1/workloads/research/web-0")
    harness.run_until(harness.state_is("web-0", "Cancelled"))
    harness.run_until(lambda: not harness.machine.supervisor.running)
    harness.plane.turn()
    assert attempts(harness) == 6


@pytest.mark.parametrize(
    ("plan", "restarts", "state"),
    [
        pytest.param("3,3,0", 2, "Succeeded", id="fails-twice-then-succeeds"),
        pytest.param("0", 0, "Succeeded", id="succeeds-not-restarted"),
    ],
)
def test_on_failure_restarts_a_pod_only_after_a_failure(
    harness: LocalHarness, plan: str, restarts: int, state: str
) -> None:
    document = pod("once", planned(harness, plan), gpus=1)
    document["spec"]["restartPolicy"] = "OnFailure"
    assert harness.submit(document)["status"] == 201
    harness.run_until(harness.state_is("once", state))

    assert attempts(harness) == restarts + 1
    assert len(backoffs(harness, "once")) == restarts
    assert pod_view(harness, "once")["restarts"] == restarts
    assert dict(events(harness, "once"))["Exited"].startswith("pod once: exit code 0")


@pytest.mark.parametrize(
    "policy", [pytest.param(None, id="none-given"), pytest.param("Never", id="never")]
)
def test_a_pod_without_a_restart_policy_or_never_ends_with_its_process(
    harness: LocalHarness, policy: str | None
) -> None:
    document = pod("plain", [sys.executable, "-c", "raise SystemExit(3)"])
    if policy is not None:
        document["spec"]["restartPolicy"] = policy
    assert harness.submit(document)["status"] == 201
    harness.run_until(harness.state_is("plain", "Failed"))
    assert backoffs(harness, "plain") == []
    assert harness.machine.runs_of("research/plain") == ["research_plain_1"]


def test_a_replica_that_ended_while_the_plane_was_down_is_restarted_and_its_count_kept(
    harness: LocalHarness,
) -> None:
    # Attempt 1 exits 3 at once (restart 1, while up); attempt 2 waits for ./stop.
    assert harness.submit(deployment("web", planned(harness, "3")))["status"] == 201
    harness.run_until(lambda: attempts(harness) == 2)
    run = harness.machine.run_of("research/web-0")
    assert run == "research_web-0_2"

    def stop_it() -> None:  # it ends (exit 0) while no server runs
        (tenant_dir(harness) / "stop").touch()
        wait_until(lambda: (harness.machine.supervisor.run_dir(run) / EXIT_FILE).exists())
        (tenant_dir(harness) / "stop").unlink()

    harness.restart(stop_it)
    assert pod_view(harness, "web-0")["restarts"] == 2  # the one before, the one while down
    harness.run_until(lambda: attempts(harness) == 3)
    harness.run_until(lambda: len(backoffs(harness, "web-0")) == 2)
    assert pod_view(harness, "web-0")["restarts"] == 2
    assert "ended (exit code 0)" in backoffs(harness, "web-0")[-1]
    assert "restart 2," in backoffs(harness, "web-0")[-1]
    assert harness.machine.runs_of("research/web-0") == [f"research_web-0_{n}" for n in range(1, 4)]
    assert harness.workload("web-0")["state"] == "Running"
    assert harness.workload("web-0")["jobs"] == []  # a replica is no Job: no completions


@pytest.mark.parametrize(
    ("kind", "policy"),
    [
        pytest.param("Deployment", "Never", id="deployment-never"),
        pytest.param("StatefulSet", "OnFailure", id="statefulset-on-failure"),
    ],
)
def test_a_replica_restart_policy_other_than_always_is_refused(
    harness: LocalHarness, kind: str, policy: str
) -> None:
    document = deployment("web", ["python3", "-c", "pass"])
    document["kind"] = kind
    document["spec"]["template"]["spec"]["restartPolicy"] = policy
    answer = harness.submit(document)
    assert answer["status"] == 422, answer
    assert answer["field"] == "spec.template.spec.restartPolicy"
    assert f"expected 'Always', got '{policy}'" in answer["message"]
    assert harness.store.workloads() == []


def test_a_preempted_replica_is_not_restarted_in_place_but_placed_again(
    harness: LocalHarness,
) -> None:
    document = deployment("web", planned(harness, ""))  # runs until ./stop
    template = document["spec"]["template"]["spec"]
    template["priorityClassName"] = "low"
    template["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    assert harness.submit(document)["status"] == 201
    harness.run_until(lambda: attempts(harness) == 1)

    urgent = pod("urgent", [sys.executable, "-c", "pass"], gpus=8, priority_class="high")
    assert harness.submit(urgent)["status"] == 201
    harness.run_until(harness.state_is("urgent", "Succeeded"))
    harness.run_until(lambda: attempts(harness) == 2)  # placed again: a new run

    assert any(reason == "Preempted" for reason, _ in events(harness, "web-0"))
    assert backoffs(harness, "web-0") == []
    assert pod_view(harness, "web-0")["restarts"] == 0
    assert harness.machine.runs_of("research/web-0") == ["research_web-0_1", "research_web-0_2"]


def test_a_replica_waiting_out_its_back_off_is_crash_loop_back_off_in_get_and_describe(
    harness: LocalHarness,
) -> None:
    """As kubectl shows it: a crash-looping replica is not ``Running`` while it waits."""
    harness.machine.crash_backoff = CrashBackoff(1.5, 1.5, 600.0)
    assert harness.submit(deployment("web", planned(harness, "3")))["status"] == 201
    harness.run_until(lambda: len(backoffs(harness, "web-0")) == 1)

    assert pod_view(harness, "web-0")["reason"] == "CrashLoopBackOff"
    [listed] = harness.client().get("/api/v1/workloads").json()
    assert (listed["state"], listed["reason"]) == ("Running", "CrashLoopBackOff")

    harness.run_until(lambda: attempts(harness) == 2)  # its back-off over, it runs again
    harness.plane.turn()
    assert pod_view(harness, "web-0")["reason"] is None
    [listed] = harness.client().get("/api/v1/workloads").json()
    assert (listed["state"], listed["reason"]) == ("Running", None)
