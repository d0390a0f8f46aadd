"""What every request and response passes first (issue 26, item 12): the Host check against
DNS rebinding, the security headers on every response, and ``?token=`` taken only by the event
stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.front_door import CSP, DOCS_CSP, HostPolicy
from gpufleet.testing.service import ServiceHarness, make_harness, queue_doc

SERVING = HostPolicy.of(["localhost", "gpu-box", "gpufleet.example.com", "*.corp.example"])


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    return make_harness(tmp_path, queues=[queue_doc("team-a", 8, namespaces=["team-a"])])


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("localhost", True),
        ("localhost:8080", True),
        ("LOCALHOST:8080", True),
        ("gpu-box:8080", True),
        ("gpufleet.example.com.", True),
        ("a.corp.example:443", True),
        ("corp.example", False),
        ("127.0.0.1:8080", True),
        ("10.1.2.3", True),
        ("[::1]:8080", True),
        ("[fe80::1]", True),
        ("evil.example", False),
        ("evil.example:8080", False),
        ("localhost.evil.example", False),
        ("gpu-box.evil.example", False),
        ("localhost:80:80", False),
        ("[::1]x", False),
        ("", False),
    ],
    ids=lambda value: repr(value) if isinstance(value, str) else None,
)
def test_hosts_allowed(host: str, allowed: bool) -> None:
    assert SERVING.allows(host) is allowed


def test_the_default_answers_local_names_the_machines_and_the_bind_name() -> None:
    policy = HostPolicy.serving("gpufleet.internal", ["extra.example"])
    assert policy.allows("localhost:8080")
    assert policy.allows("gpufleet.internal:8080")
    assert policy.allows("extra.example")
    assert not policy.allows("rebound.attacker.example:8080")
    assert HostPolicy.serving("0.0.0.0", ["*"]).allows("anything.example")


def test_a_request_for_another_host_is_refused_before_the_app(harness: ServiceHarness) -> None:
    app = create_app(harness.plane, hosts=HostPolicy.serving("127.0.0.1"))
    token = harness.tokens["team-a"]
    headers = {"Authorization": f"Bearer {token}"}
    rebound = TestClient(app, base_url="http://rebound.attacker.example:8080")
    for path in ("/api/v1/whoami", "/", "/metrics", "/healthz"):
        response = rebound.get(path, headers=headers)
        assert response.status_code == 400, path
        assert response.json()["field"] == "Host"
        assert response.headers["content-security-policy"] == CSP
    local = TestClient(app, base_url="http://localhost:8080")
    assert local.get("/api/v1/whoami", headers=headers).json()["tenant"] == "team-a"
    by_address = TestClient(app, base_url="http://127.0.0.1:8080")
    assert by_address.get("/api/v1/whoami", headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("path", "status", "csp"),
    [
        ("/", 200, CSP),
        ("/static/dashboard.css", 200, CSP),
        ("/static/vendor/plotly.min.js", 200, CSP),
        ("/healthz", 200, CSP),
        ("/metrics", 401, CSP),  # for the admin or a metrics token only
        ("/api/v1/whoami", 401, CSP),
        ("/api/v1/nowhere", 404, CSP),
        ("/openapi.json", 200, CSP),
        ("/docs", 200, DOCS_CSP),
        ("/redoc", 200, DOCS_CSP),
    ],
    ids=lambda value: value if isinstance(value, str) and value.startswith("/") else None,
)
def test_every_response_carries_the_security_headers(
    harness: ServiceHarness, path: str, status: int, csp: str
) -> None:
    harness.plane.start()
    try:
        response = harness.client("nobody").get(path)
    finally:
        harness.plane.stop()
    assert response.status_code == status
    assert response.headers["content-security-policy"] == csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in csp


def test_the_dashboard_loads_nothing_from_elsewhere() -> None:
    assert "https:" not in CSP
    assert "http:" not in CSP
    assert "'unsafe-inline'" not in CSP.split("script-src", 1)[1].split(";")[0]
    static = Path(__file__).parents[2] / "gpufleet" / "api" / "static" / "index.html"
    page = static.read_text()
    assert "<script>" not in page
    assert "<style" not in page


def test_a_token_in_the_address_is_refused_except_by_the_stream(harness: ServiceHarness) -> None:
    client = harness.client("nobody")
    token = harness.tokens["team-a"]
    for path in ("/api/v1/whoami", "/api/v1/workloads", "/api/v1/cost"):
        response = client.get(f"{path}?token={token}")
        assert response.status_code == 401, path
        assert "?token= is accepted only by /api/v1/stream" in response.json()["message"]
    with client.stream("GET", f"/api/v1/stream?token={token}") as response:
        assert response.status_code == 200
        first = next(line for line in response.iter_lines() if line.startswith("data: "))
    assert json.loads(first.removeprefix("data: "))["data"] == {"hello": True}
    with client.stream("GET", "/api/v1/stream?token=gf_wrong") as response:
        assert response.status_code == 401
