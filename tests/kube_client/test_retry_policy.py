"""The one policy on sending a request again (gpufleet.kube_client.retry_policy), over a real
HTTP server that carries a request out and then drops the connection without an answer: a
Binding or an Eviction is sent again and its repeat read for what it says of the first; any
other request whose answer is lost is not sent again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.kube_client.api import ApiError, KubeApi, RateLimiter
from gpufleet.kube_client.light_api import LightKubeApi
from gpufleet.kube_client.light_config import ClusterAccess
from gpufleet.kube_client.retry_policy import Repeat, repeat_of, settle_binding
from gpufleet.testing import kube_objects as ko
from tests.fakes.kube_api import FakeApiServer

Obj = dict[str, Any]

BINDING = r"/pods/p/binding$"
EVICTION = r"/pods/p/eviction$"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as running:
        running.create(ko.gpu_node("n1"))
        running.create(ko.gpu_node("n2"))
        yield running


def _api(server: FakeApiServer) -> KubeApi:
    api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
    assert api.poster is not None, "these tests are about the poster's sends"
    return api


def _posts(server: FakeApiServer, suffix: str) -> int:
    return sum(1 for m, p in server.requests if m == "POST" and p.endswith(suffix))


def _node_of(server: FakeApiServer, name: str) -> str | None:
    pod = server.get("v1", "Pod", name, "default")
    return None if pod is None else pod["spec"].get("nodeName")


def test_a_binding_whose_answer_was_lost_is_sent_again_and_its_409_read_as_bound(
    server: FakeApiServer,
) -> None:
    server.create(ko.gpu_pod("p"))
    server.fail_next("POST", BINDING, 0, commit=True)
    _api(server).bind("default", "p", "n1", {})
    assert _posts(server, "/binding") == 2, "sent again: the repeat answered 409"
    assert _node_of(server, "p") == "n1"


def test_a_repeated_binding_that_finds_the_pod_on_another_node_is_a_conflict(
    server: FakeApiServer,
) -> None:
    server.create(ko.gpu_pod("p", node="n2"))
    server.fail_next("POST", BINDING, 0)
    with pytest.raises(ApiError) as conflict:
        _api(server).bind("default", "p", "n1", {})
    assert (conflict.value.status, conflict.value.reason) == (409, "Conflict")
    assert "'n2'" in conflict.value.message
    assert _posts(server, "/binding") == 2


def test_a_first_409_to_a_binding_is_not_read_as_a_repeat(server: FakeApiServer) -> None:
    """Only a repeat's answer says what the first send did: a 409 to the first is raised."""
    server.create(ko.gpu_pod("p", node="n1"))
    with pytest.raises(ApiError) as refused:
        _api(server).bind("default", "p", "n1", {})
    assert refused.value.status == 409
    assert _posts(server, "/binding") == 1


@pytest.mark.parametrize(
    "grace_s",
    [
        pytest.param(0, id="pod-gone-404"),
        pytest.param(30, id="pod-terminating-2xx"),
    ],
)
def test_an_eviction_whose_answer_was_lost_is_sent_again_and_its_repeat_is_a_success(
    server: FakeApiServer, grace_s: int
) -> None:
    pod = ko.gpu_pod("p", node="n1", spec_fields={"terminationGracePeriodSeconds": grace_s})
    uid = server.create(pod)["metadata"]["uid"]
    server.fail_next("POST", EVICTION, 0, commit=True)
    _api(server).evict("default", "p", uid)
    assert _posts(server, "/eviction") == 2
    left = server.get("v1", "Pod", "p", "default")
    assert left is None or left["metadata"].get("deletionTimestamp")


def test_an_event_whose_answer_timed_out_on_a_kept_alive_connection_is_not_sent_again(
    server: FakeApiServer,
) -> None:
    """A timeout is not a stale connection: the server may be working on the request."""
    api = _api(server)
    assert api.poster is not None
    api.poster.TIMEOUT_S = 0.5
    event = {"involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Scheduled"}
    api.create_event("default", {**event, "metadata": {"name": "p.1"}})  # kept alive after
    held = threading.Event()
    server.fail_next("POST", r"/events$", 0, commit=True, hold=held)
    try:
        with pytest.raises(ApiError) as lost:
            api.create_event("default", {**event, "metadata": {"name": "p.2"}})
    finally:
        held.set()
    assert lost.value.status == 0
    assert _posts(server, "/events") == 2, "each event sent once"


def test_the_node_agents_patch_whose_answer_was_lost_is_not_sent_again(
    server: FakeApiServer,
) -> None:
    server.fail_next("PATCH", r"/nodes/n1$", 0, commit=True)
    api = LightKubeApi(ClusterAccess(server.url, "test"))
    try:
        with pytest.raises(ApiError) as lost:
            api.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    finally:
        api.close()
    assert lost.value.status == 0
    assert sum(1 for m, p in server.requests if m == "PATCH") == 1


@pytest.mark.parametrize(
    ("method", "path", "repeat"),
    [
        pytest.param("POST", "/api/v1/namespaces/a/pods/p/binding", Repeat.DETECTED, id="binding"),
        pytest.param("POST", "/api/v1/namespaces/a/pods/p/eviction", Repeat.DETECTED, id="evict"),
        pytest.param("POST", "/api/v1/namespaces/a/events", Repeat.HARMLESS, id="event"),
        pytest.param("GET", "/api/v1/namespaces/a/pods/p/binding", Repeat.HARMLESS, id="get"),
        pytest.param("PATCH", "/api/v1/nodes/n1", Repeat.HARMLESS, id="patch"),
        pytest.param("post", "/k8s/c/api/v1/namespaces/a/pods/p/eviction", Repeat.DETECTED,
                     id="behind-a-prefix"),
    ],
)  # fmt: skip
def test_which_requests_have_a_detected_repeat(method: str, path: str, repeat: Repeat) -> None:
    assert repeat_of(method, path) is repeat


@pytest.mark.parametrize(
    ("status", "pod", "outcome"),
    [
        pytest.param(409, {"spec": {"nodeName": "n1"}}, "bound", id="409-on-its-node"),
        pytest.param(409, {"spec": {"nodeName": "n2"}}, "conflict", id="409-elsewhere"),
        pytest.param(409, {"spec": {}}, "as-answered", id="409-unbound"),
        pytest.param(409, None, "as-answered", id="409-pod-gone"),
        pytest.param(500, {"spec": {"nodeName": "n1"}}, "as-answered", id="500"),
    ],
)
def test_what_an_error_answer_to_a_repeated_binding_says(
    status: int, pod: Obj | None, outcome: str
) -> None:
    answered = ApiError(status, "Answered", "as the server said")
    try:
        settle_binding(answered, "n1", lambda: pod)
    except ApiError as error:
        got = "as-answered" if error is answered else error.reason.lower()
    else:
        got = "bound"
    assert got == outcome
