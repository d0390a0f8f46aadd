"""Every API call has a deadline: a frozen API server (connections accepted, nothing answered)
fails a call when its deadline passes, never holds a turn of the loop or the metrics, and
costs the lease only when the renew deadline says so."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import generate_latest

from gpufleet.backends.kube.leader import LeaderElector
from gpufleet.kube_client.api import ApiError, KubeApi, RateLimiter
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import harness
from tests.fakes.kube_api import FakeApiServer

#: How long a test lets the server stay frozen at most: a call without a deadline returns
#: only then, so the test fails rather than hangs.
THAW_AFTER_S = 8.0


@contextmanager
def frozen(server: FakeApiServer) -> Iterator[None]:
    server.freeze()
    thaw = threading.Timer(THAW_AFTER_S, server.thaw)
    thaw.start()
    try:
        yield
    finally:
        thaw.cancel()
        server.thaw()


def _api(server: FakeApiServer, timeout_s: float) -> KubeApi:
    api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
    api.timeout_s = timeout_s
    return api


@pytest.mark.parametrize(
    ("call", "method", "path"),
    [
        pytest.param(
            lambda api: api.patch_pod_status("default", "p", {"status": {}}),
            "PATCH",
            "/api/v1/namespaces/default/pods/p/status",
            id="status-patch",
        ),
        pytest.param(
            lambda api: api.get_lease("default", "l"),
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/l",
            id="lease-get",
        ),
        pytest.param(
            lambda api: api.request("GET", "/api/v1/namespaces/default/pods/p"),
            "GET",
            "/api/v1/namespaces/default/pods/p",
            id="writer-request",
        ),
    ],
)
def test_a_call_to_a_frozen_server_fails_at_its_deadline_sent_once(
    call: object, method: str, path: str
) -> None:
    with FakeApiServer() as server:
        server.create(ko.gpu_pod("p"))
        api = _api(server, timeout_s=0.5)
        with frozen(server):
            started = time.monotonic()
            with pytest.raises(ApiError) as raised:
                call(api)  # type: ignore[operator]
            took = time.monotonic() - started
        assert took < 3.0, f"the call returned after {took:.1f} s, past its 0.5 s deadline"
        assert raised.value.status == 0
        assert server.requests.count((method, path)) == 1, "urllib3 retried the call"
        assert api.reachability.errors, "the failure was not counted"


def test_a_turn_and_the_metrics_do_not_wait_on_a_frozen_server() -> None:
    queue = ko.queue("team-a", {"nvidia.com/gpu": 8})
    with harness(ko.gpu_node("n1"), queue) as h:
        h.settle()
        h.server.create(ko.gpu_pod("p", labels={"gpufleet.dev/queue": "team-a"}))
        h.caught_up(10)
        with frozen(h.server):
            started = time.monotonic()
            turn = threading.Thread(target=h.scheduler.turn)
            turn.start()
            turn.join(THAW_AFTER_S + 5)
            took = time.monotonic() - started
            scraped = generate_latest(h.scheduler.metrics.registry)
        assert took < 2.0, f"a turn took {took:.1f} s against a frozen server"
        assert b"gpufleet_api_errors_total" in scraped


def test_a_lease_round_against_a_frozen_server_ends_at_the_renew_deadline() -> None:
    with FakeApiServer() as server:
        api = _api(server, timeout_s=30.0)
        elector = LeaderElector(api, "gpufleet-system", "lease", "a", 3.0, 2.0, 0.2)
        assert elector.try_acquire_or_renew()
        with frozen(server):
            started = time.monotonic()
            with pytest.raises(ApiError):
                elector.try_acquire_or_renew()
            took = time.monotonic() - started
            assert not elector.is_leader(), "past its renew deadline a leader stops acting"
        assert took < 3.0, f"the round returned after {took:.1f} s, past the 2 s renew deadline"
