"""Informers stop before their API server, and say in one line when it cannot be reached."""

from __future__ import annotations

import logging
import threading

import pytest

from gpufleet.backends.kube.backend import KubeBackend
from gpufleet.kube_client.api import QUEUES, KubeApi, RateLimiter
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.waiting import wait_until
from tests.fakes.kube_api import FakeApiServer

REACHABILITY_LOG = "gpufleet.kube_client.reachability"


def _backend(server: FakeApiServer, watch_timeout_s: int = 300) -> KubeBackend:
    backend = KubeBackend(
        KubeApi(server.api_client(), RateLimiter(10_000, 10_000)),
        binders=1,
        watch_timeout_s=watch_timeout_s,
    )
    backend.start()
    assert backend.wait_synced(10), "informers did not sync"
    return backend


class _Noticed(logging.Handler):
    """Set once an informer warns of a failure other than a kind not installed (404)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "404" not in record.getMessage():
            self.event.set()

    def wait(self, timeout: float) -> bool:
        return self.event.wait(timeout)


def test_closing_the_backend_ends_open_watches_and_joins_its_informers() -> None:
    with FakeApiServer() as server:
        for crd in ko.crds():
            server.create(crd)
        server.create(ko.gpu_node("n1"))
        # Watches open for five minutes: only an interrupted watch ends within close().
        backend = _backend(server, watch_timeout_s=300)
        backend.close()  # joins them for 5 s at most: only interrupted watches end in time
        alive = [t.name for t in threading.enumerate() if t.name.startswith("informer-")]
        assert alive == [], f"informers still running after close: {alive}"


def test_an_unreachable_server_is_one_line_for_all_informers_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client's Reachability tells the outage once; the informers, which all fail with
    it, add nothing of their own (a kind not installed, 404, is still theirs to tell)."""
    caplog.set_level(logging.DEBUG, logger="gpufleet.backends.kube")
    noticed = _Noticed()
    logging.getLogger(REACHABILITY_LOG).addHandler(noticed)
    server = FakeApiServer().start()
    for crd in ko.crds():
        server.create(crd)
    backend = _backend(server, watch_timeout_s=300)
    try:
        server.stop()  # the server goes while the informers watch
        assert noticed.wait(10), "nobody told that the server was gone"
        wait_until(
            lambda: all(i.last_error is not None for i in backend.informers.values()),
            "every informer to fail",
            every_s=0.05,
        )
    finally:
        backend.close()
        logging.getLogger(REACHABILITY_LOG).removeHandler(noticed)
    warnings = [
        r
        for r in caplog.records
        if r.name.startswith("gpufleet")
        and r.levelno >= logging.WARNING
        and "404" not in r.getMessage()
    ]
    lines = [r.getMessage() for r in warnings]
    # Only the client's Reachability speaks; a call that raced the stop and got through may
    # add its "reachable again" (seen under load), never an informer's own line.
    assert {r.name for r in warnings} == {REACHABILITY_LOG}, lines
    assert "unreachable" in lines[0], lines
    assert "unreachable since" in lines[0]
    assert "\n" not in lines[0]
    assert [r for r in warnings if r.exc_info is not None] == [], "tracebacks were logged"


def test_a_write_is_waited_for_until_the_informers_show_it_and_then_taken_in() -> None:
    """The control plane reads what an admin wrote: the wait returns once the informer shows
    that resourceVersion (or a later one; a deletion: the object gone), its change queued."""
    with FakeApiServer() as server:
        for crd in ko.crds():
            server.create(crd)
        backend = _backend(server)
        try:
            written = server.create(ko.queue("team-a", {"nvidia.com/gpu": 1}))
            version = written["metadata"]["resourceVersion"]
            assert backend.wait_until_seen(QUEUES, "team-a", version, timeout=10)
            backend.drain()
            assert backend.objects[QUEUES]["team-a"]["metadata"]["resourceVersion"] == version
            later = str(int(version) + 1000)
            assert not backend.wait_until_seen(QUEUES, "team-a", later, timeout=0)
            assert not backend.wait_until_seen(QUEUES, "team-a", None, timeout=0)
            server.delete("gpufleet.dev/v1alpha1", "Queue", "team-a")
            assert backend.wait_until_seen(QUEUES, "team-a", None, timeout=10)
            backend.drain()
            assert "team-a" not in backend.objects[QUEUES]
            assert not backend.wait_until_seen(QUEUES, "team-a", version, timeout=0)
        finally:
            backend.close()
