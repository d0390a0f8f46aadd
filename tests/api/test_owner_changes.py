"""The owner's changes of a waiting workload through the API on the embedded plane: removing
scheduling gates (``POST .../ungate``), resuming and suspending a Job (``.../resume``,
``.../suspend``): held workloads explained, released into their queue, kept so across a
restart; refused for another tenant (404) and where there is nothing to change (409)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.testing.service import (
    ServiceHarness,
    as_yaml,
    job_doc,
    make_harness,
    pod_doc,
    queue_doc,
)

YAML = {"Content-Type": "application/yaml"}


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    return make_harness(
        tmp_path, queues=[queue_doc("team-a", 8, namespaces=["team-a"]), queue_doc("team-b", 8)]
    )


def submit(client: TestClient, *documents: dict[str, Any]) -> None:
    response = client.post("/api/v1/workloads", content=as_yaml(*documents), headers=YAML)
    assert response.status_code == 201, response.text


def why(client: TestClient, name: str) -> tuple[str, str | None]:
    explained = client.get(f"/api/v1/workloads/team-a/{name}/explain").json()
    return explained["state"], explained.get("waiting_for")


@pytest.mark.parametrize(
    ("document", "held", "action", "body"),
    [
        (pod_doc("w", gates=["example.com/quota"]), "SchedulingGated", "ungate", None),
        (
            pod_doc("w", gates=["example.com/a", "example.com/b"]),
            "SchedulingGated",
            "ungate",
            {"gates": ["example.com/a", "example.com/b"]},
        ),
        (job_doc("w", 2, gates=["example.com/quota"]), "SchedulingGated", "ungate", {}),
        (job_doc("w", 2, suspend=True), "Suspended", "resume", None),
    ],
    ids=["pod-all-gates", "pod-named-gates", "job-gates-empty-body", "suspended-job"],
)
def test_a_held_workload_waits_explained_until_its_owner_releases_it(
    harness: ServiceHarness,
    document: dict[str, Any],
    held: str,
    action: str,
    body: dict[str, Any] | None,
) -> None:
    client = harness.client("team-a")
    submit(client, document)
    harness.advance(1)
    assert why(client, "w") == ("Pending", held)
    listed = client.get("/api/v1/workloads/team-a/w").json()
    assert listed["waiting_for"] == held
    answer = client.post(f"/api/v1/workloads/team-a/w/{action}", json=body)
    assert answer.status_code == 200, answer.text
    harness.advance(1)
    assert why(client, "w")[0] == "Running"
    events = [e["reason"] for e in client.get("/api/v1/workloads/team-a/w").json()["events"]]
    assert events[:2] == ["Submitted", {"ungate": "Ungated", "resume": "Resumed"}[action]]


def test_removing_some_gates_leaves_it_gated_by_the_rest(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, pod_doc("w", gates=["example.com/a", "example.com/b"]))
    harness.advance(1)
    answer = client.post("/api/v1/workloads/team-a/w/ungate", json={"gates": ["example.com/a"]})
    assert answer.status_code == 200
    harness.advance(1)
    assert why(client, "w") == ("Pending", "SchedulingGated")
    events = client.get("/api/v1/workloads/team-a/w").json()["events"]
    assert events[-1]["message"] == (
        "scheduling gate example.com/a removed by team-a; still gated by example.com/b"
    )
    assert client.post("/api/v1/workloads/team-a/w/ungate").status_code == 200
    harness.advance(1)
    assert why(client, "w")[0] == "Running"


def test_a_gated_suspended_job_runs_once_both_are_released(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, job_doc("w", 1, suspend=True, gates=["example.com/q"]))
    harness.advance(1)
    assert why(client, "w") == ("Pending", "Suspended")
    client.post("/api/v1/workloads/team-a/w/resume")
    harness.advance(1)
    assert why(client, "w") == ("Pending", "SchedulingGated")
    client.post("/api/v1/workloads/team-a/w/ungate")
    harness.advance(1)
    assert why(client, "w")[0] == "Running"


def test_suspending_a_waiting_job_holds_it_until_resumed(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, job_doc("big", 3, 4, runtime="1h"), job_doc("w", 2, 4))
    harness.advance(1)
    assert why(client, "w") in (("Pending", "quota"), ("Pending", "capacity"))
    suspended = client.post("/api/v1/workloads/team-a/w/suspend")
    assert suspended.status_code == 200, suspended.text
    harness.advance(1)
    assert why(client, "w") == ("Pending", "Suspended")
    client.delete("/api/v1/workloads/team-a/big")
    harness.advance(1)
    assert why(client, "w") == ("Pending", "Suspended")  # room now, but it is suspended
    client.post("/api/v1/workloads/team-a/w/resume")
    harness.advance(1)
    assert why(client, "w")[0] == "Running"


@pytest.mark.parametrize(
    ("document", "action", "body", "message"),
    [
        (pod_doc("w"), "ungate", None, "workload team-a/Pod/w has no scheduling gates"),
        (
            pod_doc("w", gates=["example.com/a"]),
            "ungate",
            {"gates": ["example.com/b"]},
            "has no scheduling gate 'example.com/b' (its gates: example.com/a)",
        ),
        (job_doc("w", 1), "resume", None, "workload team-a/Job/w is not suspended"),
        (job_doc("w", 1, suspend=True), "suspend", None, "is suspended already"),
        (pod_doc("w"), "suspend", None, "is a Pod: only a Job can be suspended"),
        (job_doc("w", 1, runtime="1h"), "suspend", None, "has started"),
    ],
    ids=["no-gates", "unknown-gate", "not-suspended", "suspended-already", "not-a-job", "running"],
)
def test_nothing_to_change_is_a_conflict(
    harness: ServiceHarness,
    document: dict[str, Any],
    action: str,
    body: dict[str, Any] | None,
    message: str,
) -> None:
    client = harness.client("team-a")
    submit(client, document)
    harness.advance(1)
    answer = client.post(f"/api/v1/workloads/team-a/w/{action}", json=body)
    assert answer.status_code == 409, answer.text
    assert message in answer.json()["message"]


def test_an_ended_workload_cannot_be_changed(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, job_doc("w", 1, gates=["example.com/q"]))
    harness.advance(1)
    client.delete("/api/v1/workloads/team-a/w")
    answer = client.post("/api/v1/workloads/team-a/w/ungate")
    assert answer.status_code == 409
    assert "has ended (Cancelled)" in answer.json()["message"]


@pytest.mark.parametrize("action", ["ungate", "resume", "suspend"])
def test_another_tenants_workload_is_not_found_and_an_admin_may_change_it(
    harness: ServiceHarness, action: str
) -> None:
    submit(harness.client("team-a"), job_doc("w", 1, suspend=action == "resume", gates=["g"]))
    harness.advance(1)
    other = harness.client("team-b").post(f"/api/v1/workloads/team-a/w/{action}")
    assert other.status_code == 404
    admin = harness.client("admin").post(f"/api/v1/workloads/team-a/w/{action}")
    assert admin.status_code == 200, admin.text


def test_released_and_suspended_forms_survive_a_restart(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(
        client,
        job_doc("gated", 1, gates=["example.com/a", "example.com/b"], runtime="1h"),
        job_doc("held", 1, runtime="1h", gates=["example.com/c"]),
    )
    harness.advance(1)
    client.post("/api/v1/workloads/team-a/gated/ungate", json={"gates": ["example.com/a"]})
    client.post("/api/v1/workloads/team-a/held/suspend")
    harness.restart()
    client = harness.client("team-a")
    harness.advance(1)
    assert why(client, "gated") == ("Pending", "SchedulingGated")
    assert why(client, "held") == ("Pending", "Suspended")
    client.post("/api/v1/workloads/team-a/gated/ungate")
    client.post("/api/v1/workloads/team-a/held/resume")
    harness.restart()
    client = harness.client("team-a")
    harness.advance(1)
    assert why(client, "held") == ("Pending", "SchedulingGated")  # its gate is still there
    assert why(client, "gated")[0] == "Running"
