"""The fake API server records who each request impersonates and, once a test grants writes,
refuses an impersonated user's writes outside its namespaces with RBAC's 403. Sent over plain
``http.client``: the official client cannot send a header line per group."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fakes.kube_api import FakeApiServer
from tests.fakes.kube_api.authz import Caller

Obj = dict[str, Any]
USER = "gpufleet:tenant:team-a"
GROUPS = ("gpufleet:tenants", "gpufleet:tenant:team-a")


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def send(
    api: FakeApiServer, method: str, path: str, body: Obj | None = None, as_user: bool = True
) -> tuple[int, Obj]:
    url = urlsplit(api.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port)
    try:
        connection.putrequest(method, path)
        data = json.dumps(body).encode() if body is not None else b""
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(len(data)))
        if as_user:
            connection.putheader("Impersonate-User", USER)
            for group in GROUPS:
                connection.putheader("Impersonate-Group", group)
        connection.endheaders(data)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def pod(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def test_each_request_records_its_impersonated_identity(api: FakeApiServer) -> None:
    assert send(api, "POST", "/api/v1/namespaces/team-a/pods", pod("p"))[0] == 201
    assert send(api, "GET", "/api/v1/namespaces/team-a/pods/p", as_user=False)[0] == 200
    assert api.callers == [
        Caller("POST", "/api/v1/namespaces/team-a/pods", USER, GROUPS),
        Caller("GET", "/api/v1/namespaces/team-a/pods/p", None, ()),
    ]


def test_without_grants_nothing_is_authorized(api: FakeApiServer) -> None:
    assert send(api, "POST", "/api/v1/namespaces/anywhere/pods", pod("p"))[0] == 201


FORBIDDEN_CASES = [
    pytest.param(
        "POST",
        "/api/v1/namespaces/team-b/pods",
        f'pods is forbidden: User "{USER}" cannot create resource "pods" in API group "" in '
        'the namespace "team-b"',
        {"kind": "pods"},
        id="create-elsewhere",
    ),
    pytest.param(
        "DELETE",
        "/api/v1/namespaces/team-b/pods/q",
        f'pods "q" is forbidden: User "{USER}" cannot delete resource "pods" in API group "" '
        'in the namespace "team-b"',
        {"kind": "pods", "name": "q"},
        id="delete-elsewhere",
    ),
    pytest.param(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        f'priorityclasses.scheduling.k8s.io is forbidden: User "{USER}" cannot create resource '
        '"priorityclasses" in API group "scheduling.k8s.io" at the cluster scope',
        {"kind": "priorityclasses", "group": "scheduling.k8s.io"},
        id="cluster-scoped",
    ),
]


@pytest.mark.parametrize(("method", "path", "message", "details"), FORBIDDEN_CASES)
def test_an_impersonated_write_outside_its_grants_is_forbidden(
    api: FakeApiServer, method: str, path: str, message: str, details: Obj
) -> None:
    api.grant_writes(USER, "team-a")
    api.create({**pod("q"), "metadata": {"name": "q", "namespace": "team-b"}})
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": 1}
    status, answer = send(api, method, path, body if "priority" in path else pod("q"))
    assert status == 403
    assert answer["reason"] == "Forbidden"
    assert answer["code"] == 403
    assert answer["message"] == message
    assert answer["details"] == details
    assert api.get("v1", "Pod", "q", "team-b") is not None  # nothing deleted


def test_granted_writes_reads_and_the_own_identity_pass(api: FakeApiServer) -> None:
    api.grant_writes(USER, "team-a")
    assert send(api, "POST", "/api/v1/namespaces/team-a/pods", pod("p"))[0] == 201
    assert send(api, "GET", "/api/v1/namespaces/team-b/pods")[0] == 200
    assert send(api, "POST", "/api/v1/namespaces/team-b/pods", pod("p"), as_user=False)[0] == 201
    assert send(api, "DELETE", "/api/v1/namespaces/team-a/pods/p")[0] == 200
