"""A scheduler's start: the first listing from the watch cache, informers started before the
scheduler exists (as ``gpufleet scheduler`` starts them), objects read once per version."""

from __future__ import annotations

import threading

import pytest

from gpufleet.backends.kube.scheduler import KubeScheduler, SchedulerOptions
from gpufleet.kube_client.api import PODS, WATCHED, KubeApi, RateLimiter, Resource
from gpufleet.kube_client.informer import Informers
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import harness
from tests.fakes.kube_api import FakeApiServer


class ListingApi(KubeApi):
    """The real client, remembering the resourceVersion each listing asked for (``relisted``
    set once there are ``wanted``)."""

    asked: list[tuple[str, str]]
    relisted: threading.Event
    wanted = 2

    def list(self, resource: Resource, resource_version: str = "") -> tuple[list[dict], str]:  # type: ignore[type-arg]
        self.asked.append((resource.plural, resource_version))
        try:
            return super().list(resource, resource_version)
        finally:
            if len(self.asked) >= self.wanted:
                self.relisted.set()


@pytest.mark.parametrize(
    ("refused_at_that_version", "relists"),
    [
        pytest.param(False, ["last"], id="watch-cache-at-the-last-version"),
        pytest.param(True, ["last", ""], id="etcd-when-that-version-is-gone-too"),
    ],
)
def test_the_first_listing_and_a_relist_after_410_read_the_watch_cache(
    refused_at_that_version: bool, relists: list[str]
) -> None:
    """As client-go's reflector: list at "0", and after a 410 at the last resourceVersion seen
    (served from the watch cache, no older than that); "" (etcd) only when that is refused."""
    with FakeApiServer() as server:
        server.create(ko.gpu_node("n1"))
        api = ListingApi(server.api_client(), RateLimiter(10_000, 10_000))
        api.asked, api.relisted = [], threading.Event()
        api.wanted = 1 + len(relists)
        informers = Informers(api, [PODS], watch_timeout_s=5)
        informers.start()
        pods = informers.by_resource[PODS]
        assert pods.synced.wait(10)
        written = server.create(ko.gpu_pod("p"))
        last = written["metadata"]["resourceVersion"]
        assert pods.wait_until_seen("default/p", last, 10)
        server.compact()
        if refused_at_that_version:  # the watch again, then the list at that version
            server.fail_next("GET", "^/api/v1/pods$", 410, times=2)
        server.close_watches()
        assert api.relisted.wait(10), "no listing after the 410"
        informers.stop.set()
        server.close_watches()
        expected = [("pods", "0")] + [("pods", last if v == "last" else v) for v in relists]
        assert api.asked[: len(expected)] == expected


def test_a_scheduler_takes_informers_started_before_it() -> None:
    with FakeApiServer() as server:
        for crd in ko.crds():
            server.create(crd)
        server.create(ko.gpu_node("n1", gpus=4))
        for i in range(3):
            server.create(ko.gpu_pod(f"p{i}"))
        api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
        informers = Informers(api, WATCHED, watch_timeout_s=5)
        informers.start()
        options = SchedulerOptions(policy="bestfit", leader_elect=False, status_every_s=0.0)
        scheduler = KubeScheduler(api, options, watch_timeout_s=5, informers=informers)
        assert scheduler.backend.informers is informers.by_resource
        runner = threading.Thread(target=scheduler.run, daemon=True)
        runner.start()
        try:
            server.wait_for(
                lambda: all(p["spec"].get("nodeName") == "n1" for p in server.list("v1", "Pod")),
                20,
                "every pod bound",
            )
        finally:
            scheduler.stop()
            runner.join(20)
        assert not runner.is_alive()


def test_a_node_is_read_once_per_version() -> None:
    with harness(ko.gpu_node("n1", gpus=4)) as h:
        h.until(lambda: h.scheduler.core is not None, what="a core")
        first = h.backend.resync()
        again = h.backend.resync()
        assert first[0] is again[0]
        node = h.server.get("v1", "Node", "n1")
        assert node is not None
        node["metadata"]["labels"]["zone"] = "b"
        h.server.update(node)
        h.until(lambda: h.backend.resync()[0] is not first[0], what="the changed node read")
        assert dict(h.backend.resync()[0].labels)["zone"] == "b"
