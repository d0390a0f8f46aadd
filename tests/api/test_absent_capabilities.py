"""What the API answers where the plane's world lacks a capability (issue 31 item 3): the
simulated cluster keeps no logs and has no terminals (``serve --local`` has both), but it
makes an owner's changes. The answers are pinned word for word, as they were when each plane
answered them itself: the capabilities moved to optional parts the API checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.websockets import WebSocketDisconnect

from gpufleet.service.embedded_plane import EmbeddedControlPlane
from gpufleet.testing.service import ServiceHarness, as_yaml, make_harness, pod_doc

YAML = {"Content-Type": "application/yaml"}
KEY = "team-a/Pod/train"


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    made = make_harness(tmp_path)
    submitted = made.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(pod_doc("train", 1)), headers=YAML
    )
    assert submitted.status_code == 201, submitted.text
    return made


def attach_refusal(harness: ServiceHarness, who: str) -> tuple[int, str]:
    """The status and message of an attach the server refuses."""
    headers = {"Authorization": f"Bearer {harness.tokens[who]}"}
    path = "/api/v1/workloads/team-a/train/attach"
    with harness.client().websocket_connect(path, headers=headers) as session:
        said = json.loads(session.receive_text())
        with pytest.raises(WebSocketDisconnect) as closed:
            session.receive_text()
    assert closed.value.code == 4000 + said["status"]
    return said["status"], said["error"]


def test_the_simulated_cluster_offers_owners_changes_and_neither_logs_nor_terminals(
    harness: ServiceHarness,
) -> None:
    plane = harness.plane
    assert isinstance(plane, EmbeddedControlPlane)
    assert plane.logs is None
    assert plane.terminals is None
    assert plane.waiting_changes is not None


@pytest.mark.parametrize(
    ("who", "status", "message"),
    [
        pytest.param(
            "team-a",
            404,
            f"workload {KEY}: no logs here (this control plane runs on a simulated cluster; "
            "logs are kept by `gpufleet serve --local`)",
            id="its-tenant-is-told-where-logs-are-kept",
        ),
        pytest.param("team-b", 404, "workload team-a/train not found", id="another-tenant"),
    ],
)
def test_logs_where_none_are_kept(
    harness: ServiceHarness, who: str, status: int, message: str
) -> None:
    answer = harness.client(who).get("/api/v1/workloads/team-a/train/logs")
    assert answer.status_code == status
    assert answer.json()["message"] == message


@pytest.mark.parametrize(
    ("who", "status", "message"),
    [
        pytest.param(
            "team-a",
            404,
            f"workload {KEY}: no terminal to attach to here (this control plane runs on a "
            "simulated cluster; `gpufleet serve --local` runs `gpufleet run -it`)",
            id="its-tenant-is-told-where-terminals-are",
        ),
        pytest.param("team-b", 404, "workload team-a/train not found", id="another-tenant"),
    ],
)
def test_attach_where_there_are_no_terminals(
    harness: ServiceHarness, who: str, status: int, message: str
) -> None:
    assert attach_refusal(harness, who) == (status, message)
