"""Informers recover as client-go's reflectors do: a broken connection is watched again from
the last resourceVersion (no list), a 410 lists again from the watch cache at that version,
the back-off ends as soon as the server answers again, and an outage is told in a few lines."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gpufleet.kube_client.api import NODES, PODS, KubeApi, RateLimiter
from gpufleet.kube_client.informer import Informers
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import harness
from tests.fakes.kube_api import FakeApiServer

PODS_PATH = "/api/v1/pods"


@contextmanager
def pod_informer(server: FakeApiServer) -> Iterator[Informers]:
    api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
    informers = Informers(api, [PODS], watch_timeout_s=300)
    informers.start()
    try:
        assert informers.by_resource[PODS].synced.wait(10)
        yield informers
    finally:
        for informer in informers.by_resource.values():
            informer.close()
            informer.join(5)


def _sees(informers: Informers, written: dict[str, object], timeout: float = 10.0) -> bool:
    metadata = written["metadata"]
    assert isinstance(metadata, dict)
    key = f"{metadata['namespace']}/{metadata['name']}"
    informer = informers.by_resource[PODS]
    return informer.wait_until_seen(key, str(metadata["resourceVersion"]), timeout)


def _watched_from(server: FakeApiServer) -> list[str]:
    return [
        query.get("resourceVersion", "")
        for (method, path), query in zip(server.requests, server.queries, strict=True)
        if method == "GET" and path == PODS_PATH and query.get("watch", "").lower() == "true"
    ]


def test_a_dropped_watch_is_watched_again_from_its_last_version_without_a_list() -> None:
    with FakeApiServer() as server, pod_informer(server) as informers:
        first = server.create(ko.gpu_pod("a"))
        assert _sees(informers, first)
        server.drop_connections()
        second = server.create(ko.gpu_pod("b"))
        assert _sees(informers, second), "the informer did not watch again"
        lists, watches = server.lists_and_watches(PODS_PATH)
        assert lists == 1, "a dropped connection listed everything again"
        assert watches >= 2
        assert first["metadata"]["resourceVersion"] in _watched_from(server)[1:]


def test_a_410_lists_again_from_the_watch_cache_at_the_last_version() -> None:
    with FakeApiServer() as server, pod_informer(server) as informers:
        first = server.create(ko.gpu_pod("a"))
        assert _sees(informers, first)
        server.compact()  # the watch's version is gone from the server's history
        server.drop_connections()
        second = server.create(ko.gpu_pod("b"))
        assert _sees(informers, second), "the informer did not list again"
        lists = [
            query.get("resourceVersion", "")
            for (method, path), query in zip(server.requests, server.queries, strict=True)
            if method == "GET" and path == PODS_PATH and query.get("watch", "").lower() != "true"
        ]
        last_seen = first["metadata"]["resourceVersion"]
        assert lists == ["0", last_seen], "the relist was not served from the watch cache"


def test_an_outage_is_told_in_a_few_lines_and_its_back_off_ends_when_the_server_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with harness(ko.gpu_node("n1")) as h:
        h.settle()
        caplog.clear()
        caplog.set_level(logging.INFO)
        pod_informer_ = h.backend.informers[PODS]
        with h.server.outage():
            for _ in range(12):  # long enough for the informers' back-off to reach 4 s
                h.server.create(ko.gpu_pod(f"waiting-{_}"))
                h.scheduler.turn()  # each turn has reports to send that fail
                time.sleep(0.5)
        h.scheduler.api.list(NODES)  # the server answers again
        fresh = h.server.create(ko.gpu_pod("after"))
        key, version = "default/after", fresh["metadata"]["resourceVersion"]
        assert pod_informer_.wait_until_seen(key, version, 1.5), "the back-off outlived the outage"
        h.scheduler.reporter.flush(10)
    told = [r for r in caplog.records if r.levelno >= logging.INFO]
    lines = [f"{r.name}: {r.getMessage()}" for r in told]
    assert not [r for r in told if r.name.startswith("urllib3")], lines
    assert len(told) <= 4, "\n".join(lines)
    assert any("unreachable since" in line for line in lines), lines
    assert any("reachable again after" in line for line in lines), lines
    errors = h.scheduler.api.reachability.error_counts()
    assert any(code == "<error>" for _, code in errors), errors
