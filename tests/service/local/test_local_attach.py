"""``/api/v1/workloads/{ns}/{name}/attach`` on ``serve --local``: a real pseudo-terminal
session (bash) through the real API, who may attach, and what an ended one says."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from gpufleet.service.plane_book import create_token
from gpufleet.testing.local_service import TENANT, LocalHarness

BASH = shutil.which("bash") or "/bin/bash"
ATTACH = f"/api/v1/workloads/{TENANT}/{{name}}/attach"


def shell(name: str, tty: bool = True) -> dict[str, Any]:
    """A Pod running an interactive bash, on a terminal (as ``gpufleet run -it`` makes it)."""
    container: dict[str, Any] = {
        "name": "main",
        "command": [BASH, "--norc", "-i"],
        "env": [{"name": "PS1", "value": "$$ "}, {"name": "TERM", "value": "dumb"}],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    if tty:
        container.update(stdin=True, tty=True)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {"containers": [container], "restartPolicy": "Never"},
    }


def started(harness: LocalHarness, name: str, tty: bool = True) -> None:
    assert harness.submit(shell(name, tty))["status"] == 201
    harness.run_until(harness.state_is(name, "Running"))


def until_exit(session: WebSocketTestSession) -> tuple[bytes, dict[str, Any]]:
    """The terminal's bytes until the server says the run ended, and what it said."""
    seen = b""
    while True:
        message = session.receive()
        if message.get("bytes") is not None:
            seen += message["bytes"]
        elif message.get("text") is not None:
            said: dict[str, Any] = json.loads(message["text"])
            return seen, said
        else:
            raise AssertionError(f"closed before the run's end: {message}")


def refusal(harness: LocalHarness, name: str, token: str) -> tuple[int, str]:
    """The status and message of an attach the server refuses."""
    client = harness.client()
    headers = {"Authorization": f"Bearer {token}"}
    with client.websocket_connect(ATTACH.format(name=name), headers=headers) as session:
        said = json.loads(session.receive_text())
        with pytest.raises(WebSocketDisconnect) as closed:
            session.receive_text()
    assert closed.value.code == 4000 + said["status"]
    return said["status"], said["error"]


def test_attach_is_a_terminal_session_that_ends_with_the_runs_exit_code(
    harness: LocalHarness,
) -> None:
    started(harness, "shell")
    client = harness.client()
    with harness.serving(), client.websocket_connect(ATTACH.format(name="shell")) as session:
        session.send_text(json.dumps({"resize": [30, 99]}))
        # Quotes split each printed word, so that the terminal's echo of the line is not it.
        session.send_bytes(b"test -t 0 && echo on-a-t''ty; stty size; echo h''i; exit 3\n")
        seen, said = until_exit(session)
    assert b"on-a-tty" in seen
    assert b"30 99" in seen
    assert b"\nhi" in seen
    assert said == {"exit": {"code": 3, "signal": None, "describe": "exit code 3"}}
    harness.run_until(harness.state_is("shell", "Failed"))
    assert "hi" in harness.log("shell")["text"]  # the session is in the run's log too


def test_a_client_that_leaves_ends_nothing_and_attaches_again(harness: LocalHarness) -> None:
    started(harness, "shell")
    client = harness.client()
    with harness.serving():
        with client.websocket_connect(ATTACH.format(name="shell")) as session:
            session.send_bytes(b"X=kept; echo s''et\n")
            seen = b""
            while b"\nset" not in seen:
                seen += session.receive_bytes()
        with client.websocket_connect(ATTACH.format(name="shell")) as session:
            session.send_bytes(b'echo "got-$X"; exit 0\n')
            seen, said = until_exit(session)
    assert b"got-kept" in seen
    assert said["exit"]["code"] == 0


@pytest.mark.parametrize(
    ("who", "status", "said"),
    [
        pytest.param("other", 404, "workload research/shell not found", id="another-tenant"),
        pytest.param("admin", 403, "only its own tenant (research) attaches", id="an-admin"),
        pytest.param("nobody", 401, "", id="a-bad-token"),
    ],
)
def test_only_the_workloads_own_tenant_attaches(
    harness: LocalHarness, who: str, status: int, said: str
) -> None:
    started(harness, "shell")
    tokens = {**harness.tokens, "other": create_token(harness.store, "other", "tenant")}
    got, message = refusal(harness, "shell", tokens.get(who, "not-a-token"))
    assert got == status
    assert said in message


def test_attach_after_the_run_ended_says_so(harness: LocalHarness) -> None:
    started(harness, "shell")
    with harness.serving(), harness.client().websocket_connect(ATTACH.format(name="shell")) as s:
        s.send_bytes(b"exit 0\n")
        until_exit(s)
    harness.run_until(harness.state_is("shell", "Succeeded"))
    status, message = refusal(harness, "shell", harness.tokens[TENANT])
    assert status == 409
    assert "workload research/shell has ended (Succeeded): there is no terminal" in message
    assert "gpufleet logs research/shell" in message


def test_attach_to_a_run_without_a_terminal_or_not_started_says_why(
    harness: LocalHarness,
) -> None:
    started(harness, "plain", tty=False)
    status, message = refusal(harness, "plain", harness.tokens[TENANT])
    assert status == 409
    assert "workload research/plain has no terminal: it was not started with one" in message
    big = shell("hog")
    big["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    assert harness.submit(big)["status"] == 201
    harness.run_until(harness.state_is("hog", "Running"))
    assert harness.submit(shell("later"))["status"] == 201
    harness.plane.turn()
    status, message = refusal(harness, "later", harness.tokens[TENANT])
    assert status == 409
    assert "is not running yet (Pending): it waits for its GPUs" in message


def test_the_session_outlives_a_server_restart(harness: LocalHarness) -> None:
    started(harness, "shell")
    with harness.serving(), harness.client().websocket_connect(ATTACH.format(name="shell")) as s:
        s.send_bytes(b"X=kept; echo s''et\n")
        seen = b""
        while b"\nset" not in seen:
            seen += s.receive_bytes()
    harness.restart()  # killed: the shim, its terminal and the shell run on
    harness.run_until(harness.state_is("shell", "Running"))
    with harness.serving(), harness.client().websocket_connect(ATTACH.format(name="shell")) as s:
        s.send_bytes(b'echo "got-$X"; exit 3\n')
        seen, said = until_exit(s)
    assert b"got-kept" in seen
    assert said["exit"]["code"] == 3
