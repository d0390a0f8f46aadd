"""Restart, resync after 410 Gone, leader election and bad Queues, against the fake."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import harness, make_scheduler
from tests.fakes.kube_api import FakeApiServer


def _devices(h_pods: list[dict[str, object]]) -> Counter[tuple[str, str]]:
    taken: Counter[tuple[str, str]] = Counter()
    for pod in h_pods:
        spec = pod["spec"]
        metadata = pod["metadata"]
        assert isinstance(spec, dict)
        assert isinstance(metadata, dict)
        node = spec.get("nodeName")
        for index in (metadata.get("annotations") or {}).get(GPU_INDEX_ANNOTATION, "").split(","):
            if node and index:
                taken[(node, index)] += 1
    return taken


def test_a_restarted_scheduler_rebuilds_from_the_api_and_hands_out_no_device_twice() -> None:
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_node("n2", gpus=8)) as h:
        for i in range(6):
            h.server.create(ko.gpu_pod(f"a{i}", gpus=2))
        h.until(lambda: len(h.bound()) == 6, what="first six bound")
        h.settle()
        h.close()
        fresh = make_scheduler(h.server, identity="replica-b")
        fresh.backend.start()
        assert fresh.backend.wait_synced(10)
        h.scheduler = fresh
        for i in range(4):
            h.server.create(ko.gpu_pod(f"b{i}", gpus=1))
        h.until(lambda: len(h.bound()) == 10, what="the rest bound")
        h.settle()
        pods = h.server.list("v1", "Pod")
        assert max(_devices(pods).values()) == 1, "a device was handed out twice"
        binds = [p for m, p in h.server.requests if m == "POST" and p.endswith("/binding")]
        assert len(binds) == len(set(binds)) == 10


def test_a_watch_expired_with_410_lists_again_and_misses_no_deletion() -> None:
    with harness(ko.gpu_node("n1", gpus=2)) as h:
        h.server.create(ko.gpu_pod("first", gpus=2))
        h.until(lambda: h.node_of("first") == "n1", what="first bound")
        h.settle()
        h.server.create(ko.gpu_pod("second", gpus=2))
        h.server.delete("v1", "Pod", "first", "default")
        h.server.compact()
        h.server.close_watches()
        h.until(lambda: h.node_of("second") == "n1", timeout=20, what="second bound")
        assert h.backend.informers[next(iter(h.backend.informers))].relists >= 1


def test_an_invalid_queue_is_reported_in_its_status_and_an_event_and_others_still_work() -> None:
    good = ko.queue("team-a", {"nvidia.com/gpu": 8}, namespaces=["default"])
    bad = ko.queue("team-b", {"nvidia.com/gpu": "plenty"})
    with harness(ko.gpu_node("n1"), good, bad, ko.gpu_pod("train", gpus=2)) as h:
        h.until(lambda: h.node_of("train") == "n1", what="train bound")
        h.settle()
        invalid = [e for e in h.events("InvalidSpec") if e["involvedObject"]["kind"] == "Queue"]
        assert [e["involvedObject"]["name"] for e in invalid] == ["team-b"]
        status = h.server.get("gpufleet.dev/v1alpha1", "Queue", "team-b")
        assert status is not None
        condition = status["status"]["conditions"][0]
        assert (condition["type"], condition["status"]) == ("Valid", "False")
        assert "spec.quota" in condition["message"]
        team_a = h.server.get("gpufleet.dev/v1alpha1", "Queue", "team-a")
        assert team_a is not None
        assert team_a["status"]["usage"]["nvidia.com/gpu"] == 2
        assert team_a["status"]["running"] == 1


def test_a_queue_with_an_unknown_field_is_invalid_with_the_offline_message() -> None:
    """An old CRD (or one that keeps unknown fields) lets ``wieght`` through: the scheduler
    refuses the Queue as the file readers do, naming the field and what was meant."""
    typo = ko.queue("team-a", {"nvidia.com/gpu": 8}, namespaces=["default"], wieght=3)
    with harness(ko.gpu_node("n1"), typo) as h:
        h.until(
            lambda: bool(
                (h.server.get("gpufleet.dev/v1alpha1", "Queue", "team-a") or {}).get("status")
            ),
            what="team-a's status written",
        )
        status = h.server.get("gpufleet.dev/v1alpha1", "Queue", "team-a")
        assert status is not None
        condition = status["status"]["conditions"][0]
        assert (condition["type"], condition["status"]) == ("Valid", "False")
        assert condition["message"].endswith(
            "Queue team-a: spec.wieght: unknown field; did you mean 'weight'?"
        ), condition["message"]


def test_a_queue_change_rebuilds_the_core_and_keeps_what_runs() -> None:
    small = ko.queue(
        "team-a",
        {"nvidia.com/gpu": 2},
        namespaces=["default"],
        borrowingLimit={"nvidia.com/gpu": 0},
    )
    with harness(ko.gpu_node("n1"), small) as h:
        h.server.create(ko.gpu_pod("one", gpus=2))
        h.server.create(ko.gpu_pod("two", gpus=2))
        h.until(lambda: len(h.bound()) == 1, what="one within quota")
        h.settle()
        assert len(h.bound()) == 1
        built = h.scheduler.cores_built
        grown = h.server.get("gpufleet.dev/v1alpha1", "Queue", "team-a")
        assert grown is not None
        grown["spec"]["quota"]["nvidia.com/gpu"] = 4
        h.server.update(grown)
        h.until(lambda: len(h.bound()) == 2, what="two once the quota grows")
        assert h.scheduler.cores_built > built
        assert max(_devices(h.server.list("v1", "Pod")).values()) == 1


@pytest.mark.slow  # the takeover waits for the dead leader's lease to expire, in real time
def test_two_replicas_elect_one_leader_and_the_other_takes_over_when_it_dies() -> None:
    with FakeApiServer() as server:
        for crd in ko.crds():
            server.create(crd)
        server.create(ko.gpu_node("n1", gpus=8))
        replicas = [make_scheduler(server, identity=name, leader_elect=True) for name in ("a", "b")]
        threads = [threading.Thread(target=r.run, daemon=True) for r in replicas]
        for thread in threads:
            thread.start()
        # Each lease write wakes the wait; the replicas renew every 0.2 s.
        server.wait_for(lambda: any(r.is_leader() for r in replicas), 10, "a leader")
        leaders = [r for r in replicas if r.is_leader()]
        assert len(leaders) == 1
        leader = leaders[0]
        standby = next(r for r in replicas if r is not leader)
        server.create(ko.gpu_pod("p1", gpus=1))
        server.wait_for(lambda: _node(server, "p1") == "n1", 30, "p1 bound")
        # The leader dies without giving the lease back.
        assert leader.elector is not None
        leader.elector.stop(release=False)
        leader.stop()
        threads[replicas.index(leader)].join(5)
        server.wait_for(standby.is_leader, 10, "the standby leading")
        server.create(ko.gpu_pod("p2", gpus=1))
        server.wait_for(lambda: _node(server, "p2") == "n1", 30, "p2 bound")
        standby.stop()
        threads[replicas.index(standby)].join(5)
        binds = [p for m, p in server.requests if m == "POST" and p.endswith("/binding")]
        assert sorted(binds) == [
            "/api/v1/namespaces/default/pods/p1/binding",
            "/api/v1/namespaces/default/pods/p2/binding",
        ]
        lease = server.get(
            "coordination.k8s.io/v1", "Lease", "gpufleet-scheduler", "gpufleet-system"
        )
        assert lease is not None
        assert lease["spec"]["leaseTransitions"] >= 1


def _node(server: FakeApiServer, name: str) -> str | None:
    pod = server.get("v1", "Pod", name, "default")
    return None if pod is None else pod["spec"].get("nodeName")
