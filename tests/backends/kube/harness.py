"""A scheduler over the fake API server, driven turn by turn, and waits on its outcomes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gpufleet.backends.kube.scheduler import KubeScheduler, SchedulerOptions
from gpufleet.io.kube.binding_signature import BindingKey
from gpufleet.kube_client.api import PODS, KubeApi, RateLimiter
from gpufleet.kube_client.informer import object_key
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.testing import kube_objects as ko
from tests.fakes.kube_api import ApiError, FakeApiServer

Obj = dict[str, Any]
#: The identity the scheduler's client names to the fake API server, which records its
#: requests under it (tests/deploy/test_rbac_evidence.py checks them against its roles).
CLIENT = "gpufleet-scheduler"


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
        """Turn the scheduler until ``check`` holds: after each turn, its writes are answered
        and seen (:meth:`caught_up`), then the loop waits as the scheduler's own does, for the
        next change or the core's next timer. ``timeout`` only bounds a failure."""
        deadline = time.monotonic() + timeout
        self.caught_up(timeout)  # the test's own writes first
        while True:
            self.scheduler.turn()
            self.caught_up(max(deadline - time.monotonic(), 0.0))
            if check():
                return
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out waiting for {what or check}")
            core = self.scheduler.core
            self.backend.wait(core.next_timer() if core is not None else math.inf)

    def settle(self, max_turns: int = 100, timeout: float = 10.0) -> None:
        """Turn until a turn changes nothing: everything it wrote answered, reported and back
        through the informers, and no request made since the turn began. Waits on events
        (answers, the reporter's backlog, the informers' caches), never on quiet time."""
        deadline = time.monotonic() + timeout
        self.caught_up(timeout)  # the test's own writes first
        for _ in range(max_turns):
            before = len(self.server.requests)
            self.scheduler.turn()
            self.caught_up(max(deadline - time.monotonic(), 0.0))
            if len(self.server.requests) == before:
                return
        raise AssertionError(f"the scheduler did not settle in {max_turns} turns")

    def caught_up(self, timeout: float) -> None:
        """Wait until the scheduler's binds and evictions are answered, its reports sent, and
        its informers show every object as the server holds it now (taken in by the next
        turn). Raises when that takes over ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        assert self.backend.wait_calls_answered(timeout), "binds or evictions unanswered"
        assert self.scheduler.reporter.flush(max(deadline - time.monotonic(), 0.0)), "reports"
        for resource, informer in self.backend.informers.items():
            try:
                held = self.server.list(resource.api_version, resource.kind)
            except ApiError:  # a kind whose CRD is not installed: nothing to see
                continue
            versions: dict[str, str | None] = dict.fromkeys(list(informer.cache))
            versions.update((object_key(o), o["metadata"]["resourceVersion"]) for o in held)
            for key, version in versions.items():
                left = max(deadline - time.monotonic(), 0.0)
                seen = self.backend.wait_until_seen(resource, key, version, left)
                assert seen, f"the informers did not catch up with {resource.plural} {key}"

    def close(self) -> None:
        """Stop the scheduler running now (a test may have replaced it) with its informers,
        before the server stops: an informer that outlives its server retries against a closed
        port for the rest of the session."""
        self.scheduler.stop()
        self.scheduler._shutdown()

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
    server: FakeApiServer,
    identity: str = "replica-a",
    leader_elect: bool = False,
    binding_key: BindingKey | None = None,
    **admission: Any,
) -> KubeScheduler:
    api = KubeApi(server.api_client(CLIENT), RateLimiter(10_000, 10_000))
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
        binding_key=binding_key,
    )
    return KubeScheduler(api, options, watch_timeout_s=5)


@contextmanager
def harness(
    *objects: Obj, crds: bool = True, binding_key: BindingKey | None = None, **admission: Any
) -> Iterator[Harness]:
    with FakeApiServer() as server:
        if crds:
            for crd in ko.crds():
                server.create(crd)
        for obj in objects:
            server.create(obj)
        scheduler = make_scheduler(server, binding_key=binding_key, **admission)
        scheduler.backend.start()
        assert scheduler.backend.wait_synced(10), "informers did not sync"
        h = Harness(server, scheduler)
        try:
            yield h
        finally:
            h.close()


__all__ = ["CLIENT", "PODS", "Harness", "harness", "make_scheduler"]
