"""A scheduler over the fake API server, driven turn by turn, and waits on its outcomes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gpufleet.backends.kube.api import PODS, KubeApi, RateLimiter
from gpufleet.backends.kube.scheduler import KubeScheduler, SchedulerOptions
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.testing import kube_objects as ko
from tests.fakes.kube_api import FakeApiServer

Obj = dict[str, Any]


class Harness:
    def __init__(self, server: FakeApiServer, scheduler: KubeScheduler) -> None:
        self.server = server
        self.scheduler = scheduler

    @property
    def backend(self) -> Any:
        return self.scheduler.backend

    def pod(self, name: str, namespace: str = "default") -> Obj:
        found = self.server.get("v1", "Pod", name, namespace)
        assert found is not None, f"pod {namespace}/{name} does not exist"
        return found

    def node_of(self, name: str, namespace: str = "default") -> str | None:
        found = self.server.get("v1", "Pod", name, namespace)
        return None if found is None else found["spec"].get("nodeName")

    def until(self, check: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
        """Turn the scheduler until ``check`` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.scheduler.turn()
            if check():
                return
            self.backend.wait(time.time() + 0.05)
        raise AssertionError(f"timed out waiting for {what or check}")

    def settle(self, quiet_s: float = 0.3, timeout: float = 10.0) -> None:
        """Turn until nothing changes for ``quiet_s`` (binds answered, watches caught up)."""
        deadline = time.monotonic() + timeout
        last = len(self.server.requests)
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            self.scheduler.turn()
            time.sleep(0.02)
            now = len(self.server.requests)
            if now != last:
                last, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_s:
                self.scheduler.reporter.flush()
                return
        raise AssertionError("the scheduler did not settle")

    def kubelet_runs(self, name: str, namespace: str = "default") -> None:
        """Play the kubelet: the bound pod is Running and Ready."""
        pod = self.pod(name, namespace)
        pod["status"] = {
            **pod.get("status", {}),
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        self.server.update(pod)

    def kubelet_removes(self, name: str, namespace: str = "default") -> None:
        self.server.delete("v1", "Pod", name, namespace)

    def events(self, reason: str | None = None) -> list[Obj]:
        found = self.server.list("v1", "Event")
        return [e for e in found if reason is None or e.get("reason") == reason]

    def bound(self) -> dict[str, str]:
        return {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"]["nodeName"]
            for p in self.server.list("v1", "Pod")
            if p["spec"].get("nodeName")
        }


def make_scheduler(
    server: FakeApiServer, identity: str = "replica-a", leader_elect: bool = False, **admission: Any
) -> KubeScheduler:
    api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
    options = SchedulerOptions(
        policy="bestfit",
        leader_elect=leader_elect,
        identity=identity,
        lease_namespace="gpufleet-system",
        lease_duration_s=3.0,
        renew_deadline_s=2.0,
        retry_period_s=0.2,
        status_every_s=0.0,
        admission=AdmissionConfig(**admission),
    )
    return KubeScheduler(api, options, watch_timeout_s=5)


@contextmanager
def harness(*objects: Obj, crds: bool = True, **admission: Any) -> Iterator[Harness]:
    with FakeApiServer() as server:
        if crds:
            for crd in ko.crds():
                server.create(crd)
        for obj in objects:
            server.create(obj)
        scheduler = make_scheduler(server, **admission)
        scheduler.backend.start()
        assert scheduler.backend.wait_synced(10), "informers did not sync"
        h = Harness(server, scheduler)
        try:
            yield h
        finally:
            # The scheduler running now (a test may have replaced it), stopped with its
            # informers before the server stops: an informer that outlives its server retries
            # against a closed port for the rest of the session.
            h.scheduler.stop()
            h.scheduler._shutdown()


__all__ = ["PODS", "Harness", "harness", "make_scheduler"]
