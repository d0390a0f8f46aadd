"""Faults of the control plane, against the fake API server: bind answers lost or refused while
the write committed (or not), requests held, a resync with work queued, a leader paused past its
lease. What must hold: no pod deleted that nobody decided to evict, no eviction of a pod whose
bind is in flight, nothing of an earlier term sent, no bind sent by a replica that lost the lease.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.backends.kube import evictions
from gpufleet.kube_client.api import PODS, ApiError, KubeApi, RateLimiter
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import Harness, harness, make_scheduler
from tests.fakes.kube_api import FakeApiServer

HIGH = ko.priority_class("inference-critical", 100_000)
LOW = ko.priority_class("training-batch", 1_000)


def _gang(name: str, size: int, gpus: int = 4) -> list[dict[str, Any]]:
    labels = {"gpufleet.dev/pod-group": name}
    return [ko.gpu_pod(f"{name}-{i}", gpus=gpus, labels=labels) for i in range(size)]


def _turn_until(h: Harness, check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Turn the scheduler until ``check`` holds, while some of its calls stay unanswered."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {check}"
        h.scheduler.turn()
        h.backend.wait(h.backend.clock.now() + 0.05)


def _posts(h: Harness, suffix: str, name: str = "") -> list[str]:
    return [
        p
        for m, p in h.server.requests
        if m == "POST" and p.endswith(suffix) and f"/pods/{name}" in p
    ]


@pytest.mark.parametrize(
    "status",
    [
        pytest.param(409, id="409-etcd-unavailable"),
        pytest.param(500, id="500"),
        pytest.param(504, id="504-timeout"),
        pytest.param(0, id="connection-reset"),
    ],
)
def test_a_bind_answered_with_an_error_that_committed_is_taken_as_bound(status: int) -> None:
    """The pod is read before anything is rolled back: bound, so the gang stays whole."""
    with harness(ko.gpu_node("n1", gpus=8), ko.pod_group("ddp", min_member=2)) as h:
        h.server.fail_next("POST", r"/pods/ddp-0/binding$", status, commit=True)
        for pod in _gang("ddp", 2):
            h.server.create(pod)
        h.until(lambda: len(h.bound()) == 2, what="the gang bound")
        h.settle()
        assert _posts(h, "/eviction") == []
        assert h.bound() == {"default/ddp-0": "n1", "default/ddp-1": "n1"}
        assert not any(p["metadata"].get("deletionTimestamp") for p in h.server.list("v1", "Pod"))


def test_a_gang_member_whose_bind_is_held_is_not_evicted_until_it_is_known_bound() -> None:
    """One member's bind is refused (409, not written), another's is held in the API server:
    the rollback evicts the held one only once its bind committed, never while pending."""
    held = threading.Event()
    with harness(ko.gpu_node("n1", gpus=8), ko.pod_group("ddp", min_member=2)) as h:
        h.server.fail_next("POST", r"/pods/ddp-0/binding$", 409)
        h.server.fail_next("POST", r"/pods/ddp-1/binding$", 500, commit=True, hold=held)
        for pod in _gang("ddp", 2):
            h.server.create(pod)
        _turn_until(h, lambda: bool(_posts(h, "/binding", "ddp-1")))
        # ddp-0's refusal is read back (pending), and the gang is rolled back meanwhile.
        _turn_until(h, lambda: "default/ddp-1" in h.backend.state.evict_after_bind)
        for _ in range(3):
            h.scheduler.turn()
            assert h.backend.wait_calls_answered(0.3) is False  # ddp-1's bind is held
        assert _posts(h, "/eviction", "ddp-1") == [], "evicted while its bind was in flight"
        assert h.pod("ddp-1")["metadata"].get("deletionTimestamp") is None
        held.set()
        h.until(lambda: bool(_posts(h, "/eviction", "ddp-1")), what="the rollback's eviction")
        evicted = h.pod("ddp-1")
        assert evicted["spec"]["nodeName"] == "n1", "only a member known bound is evicted"
        assert evicted["metadata"].get("deletionTimestamp") is not None


def test_a_gang_member_whose_held_bind_failed_is_not_evicted_and_waits_again() -> None:
    held = threading.Event()
    group = ko.pod_group("ddp", min_member=2)
    with harness(ko.gpu_node("n1", gpus=8), group, backoff_base=0.5) as h:
        h.server.fail_next("POST", r"/pods/ddp-0/binding$", 422)
        h.server.fail_next("POST", r"/pods/ddp-1/binding$", 500, hold=held)
        for pod in _gang("ddp", 2):
            h.server.create(pod)
        _turn_until(h, lambda: "default/ddp-1" in h.backend.state.evict_after_bind)
        held.set()
        uid = h.pod("ddp-1")["metadata"]["uid"]
        h.until(lambda: len(h.bound()) == 2, timeout=20, what="the gang bound on its retry")
        assert _posts(h, "/eviction") == []
        assert h.pod("ddp-1")["metadata"]["uid"] == uid, "the pending pod was never deleted"


@pytest.mark.parametrize("precondition", ["uid", "resourceVersion"])
def test_the_fake_refuses_an_eviction_whose_precondition_fails(precondition: str) -> None:
    with FakeApiServer() as server:
        server.create(ko.gpu_pod("p", gpus=1, node="n1"))
        api = KubeApi(server.api_client(), RateLimiter(100, 100))
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "p", "namespace": "default"},
            "deleteOptions": {"preconditions": {precondition: "another"}},
        }
        with pytest.raises(ApiError) as refused:
            api.poster.post("/api/v1/namespaces/default/pods/p/eviction", body)  # type: ignore[union-attr]
        assert refused.value.status == 409
        assert server.get("v1", "Pod", "p", "default") is not None


def test_an_eviction_carries_the_uid_of_the_pod_decided_about() -> None:
    with FakeApiServer() as server:
        created = server.create(ko.gpu_pod("p", gpus=1, node="n1"))
        api = KubeApi(server.api_client(), RateLimiter(100, 100))
        with pytest.raises(ApiError) as refused:
            api.evict("default", "p", uid="not-" + created["metadata"]["uid"])
        assert refused.value.status == 409
        api.evict("default", "p", uid=created["metadata"]["uid"])
        pod = server.get("v1", "Pod", "p", "default")
        assert pod is None or pod["metadata"].get("deletionTimestamp") is not None


def test_an_eviction_queued_for_retry_is_not_sent_after_a_resync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PodDisruptionBudget refuses an eviction; a new core is built (here: a PriorityClass
    is added) after its preemptor left: the old core's retry is never sent."""
    monkeypatch.setattr(evictions, "EVICTION_RETRY_S", 3.0)
    budget = ko.disruption_budget("keep-batch", {"app": "batch"}, min_available=1)
    with harness(ko.gpu_node("n1", gpus=8), HIGH, LOW, budget, min_runtime=0.0) as h:
        batch = ko.gpu_pod(
            "batch", gpus=8, priority_class="training-batch", labels={"app": "batch"}
        )
        h.server.create(batch)
        h.until(lambda: h.node_of("batch") == "n1", what="batch bound")
        h.kubelet_runs("batch")
        h.server.create(ko.gpu_pod("serve", gpus=4, priority_class="inference-critical"))
        h.until(lambda: bool(h.events("EvictionBlocked")), what="the eviction refused")
        assert h.backend.state.evictions_due, "the refused eviction is queued for a retry"
        h.server.delete("v1", "Pod", "serve", "default")
        h.server.delete("policy/v1", "PodDisruptionBudget", "keep-batch", "default")
        built = h.scheduler.cores_built
        h.server.create(ko.priority_class("another", 10))
        h.until(lambda: h.scheduler.cores_built > built, what="a new core")
        retry_at = time.monotonic() + 3.5
        h.until(lambda: time.monotonic() > retry_at, timeout=10, what="the retry's time")
        h.settle()
        assert h.pod("batch")["metadata"].get("deletionTimestamp") is None
        assert len(_posts(h, "/eviction", "batch")) == 1


class _GatedLimiter(RateLimiter):
    """A rate limit that holds every call until opened: the binder queue of a paused process."""

    def __init__(self) -> None:
        super().__init__(10_000, 10_000)
        self.open = threading.Event()
        self.open.set()

    def acquire(self) -> None:
        self.open.wait()
        super().acquire()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _leading_harness(server: FakeApiServer) -> tuple[Harness, _Clock, _GatedLimiter]:
    scheduler = make_scheduler(server, identity="a", leader_elect=True)
    limiter = _GatedLimiter()
    scheduler.backend.api.limiter = limiter
    clock = _Clock()
    assert scheduler.elector is not None
    scheduler.elector.clock = clock
    scheduler.backend.start()
    assert scheduler.backend.wait_synced(10)
    assert scheduler.elector.try_acquire_or_renew()
    return Harness(server, scheduler), clock, limiter


def test_a_bind_queued_before_a_pause_past_the_lease_is_not_sent_after_it() -> None:
    """SIGSTOP in a burst: the binder queue resumes after the lease expired; the fence just
    before each POST drops it."""
    with FakeApiServer() as server:
        server.create(ko.gpu_node("n1", gpus=16))
        h, clock, limiter = _leading_harness(server)
        try:
            server.create(ko.gpu_pod("p1", gpus=8))
            h.until(lambda: h.node_of("p1") == "n1", what="p1 bound while leading")
            limiter.open.clear()  # the process stops with a bind queued...
            created = server.create(ko.gpu_pod("p2", gpus=8))
            version = created["metadata"]["resourceVersion"]
            assert h.backend.wait_until_seen(PODS, "default/p2", version, 5)
            h.scheduler.turn()  # p2 decided, its bind queued
            clock.now += 25.0  # ...for longer than its lease
            limiter.open.set()
            assert h.backend.wait_calls_answered(5)
            assert _posts(h, "/binding", "p2") == [], "sent by a replica that lost its lease"
            assert h.node_of("p2") is None
        finally:
            h.close()


def test_a_turn_whose_leader_lost_the_lease_carries_out_nothing() -> None:
    with FakeApiServer() as server:
        server.create(ko.gpu_node("n1", gpus=8))
        h, clock, _ = _leading_harness(server)
        try:
            h.scheduler.turn()  # the core built while leading
            server.create(ko.gpu_pod("p1", gpus=8))
            h.caught_up(5)
            clock.now += 25.0  # paused past the lease, resumed in the middle of the loop
            term = h.backend.term
            h.scheduler.turn()
            assert h.backend.wait_calls_answered(5)
            assert _posts(h, "/binding", "p1") == []
            assert h.backend.term > term, "the term ended: nothing it queued is sent"
            assert h.scheduler.elector is not None
            assert h.scheduler.elector.try_acquire_or_renew()  # leading again
            h.until(lambda: h.node_of("p1") == "n1", what="p1 bound by the new term's core")
            assert len(_posts(h, "/binding", "p1")) == 1
        finally:
            h.close()


def test_a_pod_bound_beyond_its_node_is_reported_on_the_pod_and_in_a_metric() -> None:
    with harness(ko.gpu_node("n1", gpus=8)) as h:
        h.server.create(ko.gpu_pod("ours", gpus=8))
        h.until(lambda: h.node_of("ours") == "n1", what="ours bound")
        # An earlier leader's bind, landed after this leader's: the same devices.
        devices = h.pod("ours")["metadata"]["annotations"]
        h.server.create(ko.gpu_pod("late", gpus=8, node="n1", annotations=devices))
        h.until(lambda: bool(h.events("Overcommitted")), what="the Overcommitted event")
        event = h.events("Overcommitted")[0]
        assert event["type"] == "Warning"
        assert event["involvedObject"]["name"] == "late"
        assert _gauge(h, "gpufleet_overcommitted_pods") == 1.0
        h.server.delete("v1", "Pod", "late", "default")
        h.until(lambda: _gauge(h, "gpufleet_overcommitted_pods") == 0.0, what="gauge back")


def _gauge(h: Harness, name: str) -> float | None:
    value = h.scheduler.metrics.registry.get_sample_value(name)
    return None if value is None else float(value)
