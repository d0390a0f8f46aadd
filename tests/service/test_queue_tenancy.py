"""Who may use a queue, in embedded ``serve`` (issue 26, items 3 and 9): a submission its
queue would never admit (another namespace, a priority class the queue does not allow) is
refused with a 422 naming the field; a pod's own ``spec.priority`` is refused as the API
server's Priority admission plugin refuses it; and a workload its queue stops admitting after
it was accepted waits, told why, as the core tells it in every world."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpufleet.testing.service import (
    as_yaml,
    make_harness,
    pod_doc,
    priority_class_doc,
    queue_doc,
)

YAML = {"Content-Type": "application/yaml"}


def with_priority(doc: dict[str, Any], value: object) -> dict[str, Any]:
    doc["spec"]["priority"] = value
    return doc


@dataclass(frozen=True)
class Refused:
    who: str
    doc: dict[str, Any]
    field: str
    message: str


CLASSES = [priority_class_doc("batch", 100), priority_class_doc("high", 1000)]
TEAM_A = {**queue_doc("team-a", 8), "spec": {"quota": {"nvidia.com/gpu": 8}}}
TEAM_A_BATCH_ONLY = {**TEAM_A, "spec": {**TEAM_A["spec"], "priorityClasses": ["batch"]}}

REFUSED = {
    "admin-into-a-team-queue-from-another-namespace": Refused(
        "admin",
        pod_doc("grab", queue="team-a", namespace="default"),
        "metadata.namespace",
        "namespace default is not admitted by queue team-a (it admits team-a)",
    ),
    "class-the-queue-does-not-allow": Refused(
        "team-a",
        pod_doc("urgent", queue="team-a", priority_class="high"),
        "spec.priorityClassName",
        "priority class high is not allowed by queue team-a (it allows batch)",
    ),
    "raw-priority-without-a-class": Refused(
        "team-a",
        with_priority(pod_doc("raw", queue="team-a"), 5),
        "spec.priority",
        "the integer value of priority (5) must not be provided in pod spec; priority "
        "admission controller computed 0 from the given PriorityClass name",
    ),
    "raw-priority-disagreeing-with-its-class": Refused(
        "team-a",
        with_priority(pod_doc("raw", queue="team-a", priority_class="batch"), 1000),
        "spec.priority",
        "the integer value of priority (1000) must not be provided in pod spec; priority "
        "admission controller computed 100 from the given PriorityClass name",
    ),
    "priority-outside-int32": Refused(
        "team-a",
        with_priority(pod_doc("huge", queue="team-a"), 10**20),
        "spec.priority",
        "expected a whole number <= 2147483647, got 100000000000000000000",
    ),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_a_submission_its_queue_would_never_admit_is_refused_naming_the_field(
    tmp_path: Path, case: Refused
) -> None:
    harness = make_harness(
        tmp_path, queues=[TEAM_A_BATCH_ONLY, queue_doc("team-b", 8)], priority_classes=CLASSES
    )
    response = harness.client(case.who).post(
        "/api/v1/workloads", content=as_yaml(case.doc), headers=YAML
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert case.field in (body.get("field") or "")
    assert case.message in body["message"]
    assert not harness.plane.records
    harness.close()


def test_a_priority_equal_to_its_class_is_accepted_as_the_api_server_accepts_it(
    tmp_path: Path,
) -> None:
    harness = make_harness(tmp_path, queues=[TEAM_A_BATCH_ONLY], priority_classes=CLASSES)
    doc = with_priority(pod_doc("same", queue="team-a", priority_class="batch"), 100)
    response = harness.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(doc), headers=YAML
    )
    assert response.status_code == 201, response.text
    harness.close()


def test_a_workload_its_queue_stops_admitting_waits_told_why(tmp_path: Path) -> None:
    """Accepted, then the admin narrows team-a's namespaces before it ran: the core (not the
    submission) keeps it out, and says why."""
    harness = make_harness(tmp_path, queues=[TEAM_A])
    client = harness.client("team-a")
    posted = client.post(
        "/api/v1/workloads", content=as_yaml(pod_doc("train", queue="team-a")), headers=YAML
    )
    assert posted.status_code == 201, posted.text
    narrowed = {**TEAM_A, "spec": {**TEAM_A["spec"], "namespaces": ["team-a-prod"]}}
    assert harness.client("admin").put("/api/v1/queues", json=narrowed).status_code == 200
    harness.advance(1)
    view = client.get("/api/v1/workloads/team-a/train").json()
    assert view["state"] == "Pending"
    assert view["waiting_for"] == "namespace"
    assert (
        "namespace team-a is not admitted by queue team-a (it admits team-a-prod)"
        in (view["message"])
    )
    harness.close()
