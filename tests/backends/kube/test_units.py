"""Unit tests of the Kubernetes backend's parts that need no API server: device annotations,
the device ledger, the client-side rate limit, leader election's protocol, the live catalog."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.backends.kube.device_ledger import DeviceLedger
from gpufleet.backends.kube.leader import LeaderElector
from gpufleet.backends.kube.reporting import ApiReporter
from gpufleet.io.kube.annotations import placement_annotations, placement_from_annotations
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.kube_client.api import ApiError, RateLimiter
from gpufleet.model import Placement
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.builders import make_node, make_pod

Obj = dict[str, Any]


@pytest.mark.parametrize(
    "placement",
    [
        Placement("n1"),
        Placement("n1", (0, 3), 1000),
        Placement("n1", (2,), 250),
        Placement("n1", mig_slices=((0, 1), (1, 0))),
    ],
    ids=["cpu-only", "whole", "share", "mig"],
)
def test_device_annotations_round_trip(placement: Placement) -> None:
    annotations = placement_annotations(placement)
    restored = placement_from_annotations("n1", annotations)
    if not annotations:
        assert restored is None
    else:
        assert restored == placement


def test_broken_device_annotations_read_as_none() -> None:
    assert placement_from_annotations("n1", {"gpufleet.dev/gpu-index": "zero"}) is None


@given(st.lists(st.integers(1, 4), max_size=12))
def test_the_ledger_never_guesses_a_device_twice(counts: list[int]) -> None:
    node = make_node("n1", gpus=8)
    ledger = DeviceLedger()
    taken: list[int] = []
    for i, count in enumerate(counts):
        placement = ledger.guess(make_pod(f"p{i}", gpus=count), node)
        ledger.take(placement)
        taken.extend(placement.gpu_indices)
    assert len(taken) == len(set(taken))
    assert len(taken) <= 8


def test_the_ledger_packs_shares_on_the_fullest_device_that_fits() -> None:
    node = make_node("n1", gpus=2)
    ledger = DeviceLedger()
    ledger.take(Placement("n1", (1,), 500))
    guess = ledger.guess(make_pod("s", gpus=1, milli=250), node)
    assert guess == Placement("n1", (1,), 250)


def test_rate_limiter_allows_a_burst_then_paces() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(qps=10, burst=3, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limiter.acquire()
    assert slept == pytest.approx([0.1, 0.1])


class FakeLeases:
    """The three lease calls with the API server's optimistic concurrency."""

    def __init__(self, now: list[float] | None = None) -> None:
        self.lease: Obj | None = None
        self.version = 0
        #: The clock a write's answer takes ``write_takes_s`` of, and each call's deadline.
        self.now = now if now is not None else [0.0]
        self.write_takes_s = 0.0
        self.deadlines: list[float | None] = []

    def get_lease(self, namespace: str, name: str, timeout_s: float | None = None) -> Obj | None:
        self.deadlines.append(timeout_s)
        return copy.deepcopy(self.lease)

    def create_lease(self, namespace: str, body: Obj, timeout_s: float | None = None) -> Obj:
        self.deadlines.append(timeout_s)
        if self.lease is not None:
            raise ApiError(409, "AlreadyExists", "exists")
        return self._store(body)

    def replace_lease(
        self, namespace: str, name: str, body: Obj, timeout_s: float | None = None
    ) -> Obj:
        self.deadlines.append(timeout_s)
        self.now[0] += self.write_takes_s
        assert self.lease is not None
        sent = body["metadata"].get("resourceVersion")
        if sent != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        return self._store(body)

    def _store(self, body: Obj) -> Obj:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)


def test_leader_election_one_leader_and_takeover_after_the_lease_expires() -> None:
    leases = FakeLeases()
    now = [0.0]
    a, b = (
        LeaderElector(leases, "ns", "lease", name, 15, 10, 2, clock=lambda: now[0])  # type: ignore[arg-type]
        for name in ("a", "b")
    )
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.is_leader()
    assert not b.is_leader()
    now[0] += 5
    assert a.try_acquire_or_renew(), "the leader renews"
    now[0] += 5
    assert not b.try_acquire_or_renew(), "renewed 5 s ago: still held"
    now[0] += 11  # a stops renewing
    assert not a.is_leader(), "past its renew deadline a leader stops acting"
    now[0] += 5
    assert b.try_acquire_or_renew(), "15 s after the last renewal b takes over"
    assert leases.lease is not None
    assert leases.lease["spec"]["leaseTransitions"] == 1


@pytest.mark.parametrize(
    ("write_takes_s", "leads_until"),
    [
        pytest.param(0.0, 5 + 10, id="answered-at-once"),
        pytest.param(4.0, 5 + 4 + 10, id="answered-after-4s-dated-then"),
        # Others count 15 s from when they saw the write, at the earliest when it was sent.
        pytest.param(8.0, 5 + 5 + 10, id="answered-after-8s-dated-at-most-5s-after-sent"),
    ],
)
def test_a_renewal_is_dated_when_it_was_answered(write_takes_s: float, leads_until: float) -> None:
    now = [0.0]
    leases = FakeLeases(now)
    a = LeaderElector(leases, "ns", "lease", "a", 15, 10, 2, clock=lambda: now[0])  # type: ignore[arg-type]
    assert a.try_acquire_or_renew()
    now[0] = 5.0
    leases.write_takes_s = write_takes_s
    leases.deadlines.clear()
    assert a.try_acquire_or_renew()
    assert leases.deadlines == [5.0, 5.0], "each call bounded by what is left of the deadline"
    now[0] = leads_until - 0.01
    assert a.is_leader()
    now[0] = leads_until
    assert not a.is_leader()


def test_a_stale_write_loses_the_race() -> None:
    leases = FakeLeases()
    a = LeaderElector(leases, "ns", "lease", "a", 15, 10, 2, clock=lambda: 0.0)  # type: ignore[arg-type]
    assert a.try_acquire_or_renew()
    stale = leases.get_lease("ns", "lease")
    assert stale is not None
    leases.replace_lease("ns", "lease", stale)  # someone else writes in between
    with pytest.raises(ApiError):
        leases.replace_lease("ns", "lease", stale)


@pytest.mark.parametrize(
    ("queues", "rejected"),
    [
        ([ko.queue("a", {"nvidia.com/gpu": "lots"})], ["a"]),
        ([ko.queue("a", {"nvidia.com/gpu": 4}, parent="missing")], ["a"]),
        ([ko.queue("a", {"nvidia.com/gpu": 4}), ko.queue("b", {"nvidia.com/gpu": 2})], []),
    ],
    ids=["bad-quantity", "missing-parent", "valid"],
)
def test_the_live_catalog_sets_bad_queues_aside(queues: list[Obj], rejected: list[str]) -> None:
    catalog = LiveCatalog(queues)
    assert [r.key for r in catalog.rejected] == rejected
    valid = {q["metadata"]["name"] for q in queues} - set(rejected)
    assert set(catalog.queues) == (valid or {"default"})


class RecordingApi:
    """The reporter's API calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        self.calls.append(f"condition {namespace}/{name}")

    def create_event(self, namespace: str, body: Obj) -> Obj:
        self.calls.append(f"event {body['reason']}")
        return body

    def patch_event(self, namespace: str, name: str, patch: Obj) -> None:
        self.calls.append(f"event count {patch['count']}")


class FailingApi(RecordingApi):
    """Answers the first ``failures`` condition patches with a 500 (etcd away)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        if self.failures > 0:
            self.failures -= 1
            self.calls.append("condition refused")
            raise ApiError(500, "InternalError", "etcdserver: request timed out")
        super().patch_pod_status(namespace, name, patch)


@pytest.mark.parametrize(
    ("then", "told"),
    [("waits", True), ("is bound", False), ("is gone", False)],
    ids=["sent-again-until-taken", "bound-meanwhile", "gone-meanwhile"],
)
def test_a_condition_refused_during_an_outage_is_sent_again(then: str, told: bool) -> None:
    """The core tells each message once: a condition patch refused while etcd is away is sent
    again after a back-off until it is taken, unless the pod was bound or deleted meanwhile
    (the fault suite's etcd kill -9 left a pod untold for good)."""
    api = FailingApi(failures=2)
    now = [0.0]
    reporter = ApiReporter(api, clock=lambda: now[0], retry_s=0.05)  # type: ignore[arg-type]
    pod = ko.gpu_pod("p")
    try:
        reporter.unschedulable(pod, "0/1 nodes are available")
        assert reporter.flush()
        assert api.calls[0] == "condition refused"
        assert reporter.retrying == {"default/p"}
        if then == "is bound":
            reporter.scheduled(pod, Placement("n1", (0,), 1000))
        elif then == "is gone":
            reporter.forget("default/p")
        if not told:
            assert reporter.retrying == frozenset(), "nothing is left to send again"
        deadline = time.monotonic() + 5.0  # the worker looks every retry_s / 2 (0.025 s)
        while told and "condition default/p" not in api.calls and time.monotonic() < deadline:
            now[0] += 1.0  # past the back-off, however far it has doubled
            time.sleep(0.05)
        assert reporter.flush()
        assert ("condition default/p" in api.calls) is told, api.calls
    finally:
        reporter.close()


def test_reporter_tells_a_repeat_once_per_interval_and_again_after_forget() -> None:
    api = RecordingApi()
    now = [0.0]
    reporter = ApiReporter(api, repeat_s=60, clock=lambda: now[0])  # type: ignore[arg-type]
    pod = ko.gpu_pod("p")
    try:
        for _ in range(5):
            reporter.unschedulable(pod, "0/1 nodes are available")
        assert reporter.flush()
        assert api.calls == ["condition default/p", "event FailedScheduling"]
        now[0] = 61
        reporter.unschedulable(pod, "0/1 nodes are available")
        assert reporter.flush()
        assert api.calls[2:] == ["condition default/p", "event count 2"]
        reporter.forget("default/p")
        reporter.unschedulable(pod, "0/1 nodes are available")
        assert reporter.flush()
        assert api.calls[4:] == ["condition default/p"], "events keep their own repeat window"
    finally:
        reporter.close()
