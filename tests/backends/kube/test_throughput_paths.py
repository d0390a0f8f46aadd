"""What keeps binding fast: POSTs past the client on kept-alive connections, a rate limit of
their own for reports, each cycle's binds sent as it ends, and metrics that do not walk every
pod on every turn (only a scrape reads the core's state)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.control.loop import Turn
from gpufleet.kube_client.api import ApiError, JsonPoster, KubeApi, RateLimiter
from gpufleet.metrics.scheduler import SchedulerMetrics
from gpufleet.model.actions import Action, Bind
from gpufleet.model.events import WorkloadAdded
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.builders import make_node, make_workload
from gpufleet.testing.fakes import make_core
from tests.backends.kube.harness import make_scheduler
from tests.fakes.kube_api import FakeApiServer

Obj = dict[str, Any]


def _api(server: FakeApiServer) -> KubeApi:
    return KubeApi(server.api_client(), RateLimiter(10_000, 10_000))


def test_binds_and_events_go_past_the_client_on_one_kept_connection() -> None:
    with FakeApiServer() as server:
        server.create(ko.gpu_node("n1"))
        for name in ("a", "b"):
            server.create(ko.gpu_pod(name))
        api = _api(server)
        assert api.poster is not None
        api.bind("default", "a", "n1", {"gpufleet.dev/gpu-index": "0"})
        connection = api.poster._local.connection
        api.bind("default", "b", "n1", {"gpufleet.dev/gpu-index": "1"})
        assert api.poster._local.connection is connection, "the connection is kept alive"
        bound = server.get("v1", "Pod", "b", "default")
        assert bound is not None
        assert bound["spec"]["nodeName"] == "n1"
        assert bound["metadata"]["annotations"]["gpufleet.dev/gpu-index"] == "1"
        body = {"metadata": {"name": "a.1"}, "involvedObject": {"kind": "Pod", "name": "a"}}
        created = api.create_event("default", {**body, "reason": "Scheduled", "message": "m"})
        assert created["metadata"]["name"] == "a.1"
        assert ("POST", "/api/v1/namespaces/default/events") in server.requests


def test_a_refused_post_raises_the_servers_status_and_message() -> None:
    with FakeApiServer() as server:
        api = _api(server)
        with pytest.raises(ApiError) as refused:
            api.bind("default", "ghost", "n1", {})
        assert refused.value.status == 404
        assert "ghost" in refused.value.message


def test_a_post_on_a_connection_closed_under_it_is_sent_again_on_a_new_one() -> None:
    with FakeApiServer() as server:
        server.create(ko.gpu_node("n1"))
        for name in ("a", "b"):
            server.create(ko.gpu_pod(name))
        api = _api(server)
        assert api.poster is not None
        api.bind("default", "a", "n1", {})
        stale = api.poster._local.connection
        stale.sock.close()  # as a server that dropped an idle keep-alive connection
        api.bind("default", "b", "n1", {})
        assert api.poster._local.connection is not stale
        assert (server.get("v1", "Pod", "b", "default") or {})["spec"]["nodeName"] == "n1"


def test_through_a_proxy_posts_go_through_the_client() -> None:
    with FakeApiServer() as server:
        client = server.api_client()
        client.configuration.proxy = "http://proxy.invalid:3128"
        assert JsonPoster.for_configuration(client) is None


def test_reports_have_a_rate_limit_of_their_own_of_the_same_size() -> None:
    with FakeApiServer() as server:
        scheduler = make_scheduler(server)
        try:
            ours, theirs = scheduler.api.limiter, scheduler.reporter.api.limiter
            assert theirs is not ours
            assert (theirs.qps, theirs.burst) == (ours.qps, ours.burst)
            assert scheduler.reporter.api.client is scheduler.api.client
        finally:
            scheduler._shutdown()


def test_each_cycles_binds_go_out_before_the_next_cycle_runs() -> None:
    """A core admits a workload a cycle; each cycle's binds reach ``on_cycle`` before the next
    cycle runs (what has been bound when they arrive is what they bind, no more)."""
    core = make_core([make_node("n1", gpus=8)])
    core.handle_all(WorkloadAdded(make_workload(f"w{i}", gpus=1)) for i in range(3))
    applied: list[tuple[int, int]] = []

    def apply(actions: list[Action]) -> None:
        binds = sum(isinstance(a, Bind) for a in actions)
        applied.append((binds, len(core.running)))

    actions = core.run_until_idle(0.0, on_cycle=apply)
    assert sum(isinstance(a, Bind) for a in actions) == 3
    assert applied == [(1, 1), (1, 2), (1, 3)], "a cycle, its binds out, the next cycle"


def test_a_turn_counts_what_it_did_without_reading_the_cores_state() -> None:
    reads = [0]

    def read() -> None:
        reads[0] += 1

    metrics = SchedulerMetrics(read)
    core = make_core([make_node("n1", gpus=4)])
    core.handle_all(WorkloadAdded(make_workload(f"w{i}", gpus=1)) for i in range(3))
    for _ in range(50):
        actions = core.run_until_idle(0.0)
        metrics.turn_done(core, Turn(0.0, (), actions, 0.001))
    assert reads == [0], "a turn does not walk the core's pods; a scrape does"
    exposed = metrics.exposition().decode()
    assert reads == [1]
    assert "gpufleet_scheduled_pods_total 3.0" in exposed
    assert 'gpufleet_admitted_workloads_total{queue="default"} 3.0' in exposed
    assert "gpufleet_scheduling_turn_seconds_count 50.0" in exposed
