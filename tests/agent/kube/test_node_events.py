"""The node agent's Events, against the fake API server: as kubectl shows them, repeats
counted on one Event, many similar messages combined, an expired Event made again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.agent.kube.node_events import (
    COMBINED_PREFIX,
    NORMAL,
    WARNING,
    EventRecorder,
    ObjectRef,
)
from gpufleet.kube_client.api import KubeApi, RateLimiter
from tests.fakes.kube_api import FakeApiServer

NODE = "gpu-1"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def recorder(server: FakeApiServer, clock: Clock) -> Iterator[EventRecorder]:
    api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
    found = EventRecorder(api, host=NODE, clock=clock)
    yield found
    found.close()


def events(server: FakeApiServer, namespace: str | None = None) -> list[dict[str, Any]]:
    return server.list("v1", "Event", namespace)


def test_node_event_as_the_kubelet_writes_it(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    recorder.event(ObjectRef.node(NODE), WARNING, "GpuUnhealthy", "GPU 3 (GPU-3f): XID 79")
    assert recorder.flush()
    (event,) = events(server, "default")
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": NODE,
        "uid": NODE,
    }
    assert event["metadata"]["name"].startswith(f"{NODE}.")
    assert (event["type"], event["reason"], event["count"]) == (WARNING, "GpuUnhealthy", 1)
    assert event["source"] == {"component": "gpufleet-agent", "host": NODE}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("gpufleet-agent", NODE)
    assert event["firstTimestamp"] == event["lastTimestamp"]


def test_pod_event_lives_in_the_pods_namespace(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    pod = ObjectRef.pod("team-a", "train-0", "uid-1")
    recorder.event(pod, WARNING, "UnexpectedDevices", "kubelet offered GPU 2, scheduler chose 1")
    assert recorder.flush()
    (event,) = events(server, "team-a")
    assert event["involvedObject"]["uid"] == "uid-1"
    assert event["involvedObject"]["namespace"] == "team-a"


def test_repeats_are_counted_on_one_event(server: FakeApiServer, recorder: EventRecorder) -> None:
    for _ in range(3):
        recorder.event(ObjectRef.node(NODE), NORMAL, "GpuHealthy", "GPU 3 is healthy again")
    recorder.event(ObjectRef.node(NODE), NORMAL, "GpuHealthy", "GPU 4 is healthy again")
    assert recorder.flush()
    counts = sorted((e["message"], e["count"]) for e in events(server))
    assert counts == [("GPU 3 is healthy again", 3), ("GPU 4 is healthy again", 1)]
    assert server.requests.count(("POST", "/api/v1/namespaces/default/events")) == 2


def test_many_similar_messages_are_combined(
    server: FakeApiServer, recorder: EventRecorder, clock: Clock
) -> None:
    for gpu in range(14):
        recorder.event(ObjectRef.node(NODE), WARNING, "Xid", f"GPU {gpu}: XID 13")
    assert recorder.flush()
    found = events(server)
    plain = [e for e in found if not e["message"].startswith(COMBINED_PREFIX)]
    (combined,) = [e for e in found if e["message"].startswith(COMBINED_PREFIX)]
    assert len(plain) == 9
    assert combined["message"] == COMBINED_PREFIX + "GPU 13: XID 13"
    assert combined["count"] == 5
    # A new window: messages are told one by one again.
    clock.now += 601
    recorder.event(ObjectRef.node(NODE), WARNING, "Xid", "GPU 20: XID 13")
    assert recorder.flush()
    assert any(e["message"] == "GPU 20: XID 13" for e in events(server))


def test_an_expired_event_is_made_again_with_its_count(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    ref = ObjectRef.node(NODE)
    recorder.event(ref, WARNING, "Xid", "GPU 1: XID 79")
    assert recorder.flush()
    (first,) = events(server)
    server.delete("v1", "Event", first["metadata"]["name"], "default")
    recorder.event(ref, WARNING, "Xid", "GPU 1: XID 79")
    assert recorder.flush()
    (again,) = events(server)
    assert again["count"] == 2
    assert again["metadata"]["name"] != first["metadata"]["name"]
    recorder.event(ref, WARNING, "Xid", "GPU 1: XID 79")
    assert recorder.flush()
    (third,) = events(server)
    assert (third["metadata"]["name"], third["count"]) == (again["metadata"]["name"], 3)


def test_bad_type_is_refused(recorder: EventRecorder) -> None:
    with pytest.raises(ValueError, match="'Error' is not Normal or Warning"):
        recorder.event(ObjectRef.node(NODE), "Error", "Xid", "m")


def test_what_it_remembers_is_bounded(server: FakeApiServer) -> None:
    api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
    small = EventRecorder(api, host=NODE, remembered=4)
    try:
        for pod in range(10):
            small.event(ObjectRef.pod("default", f"p{pod}"), NORMAL, "Allocated", "GPU 0")
        assert small.flush()
        assert len(small._told) == 4
        assert len(small._similar) == 4
        assert len(events(server)) == 10
    finally:
        small.close()


def test_a_node_named_without_uid_gets_its_name_as_uid(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    recorder.event(ObjectRef("Node", NODE), NORMAL, "GpuHealthy", "all 8 GPUs healthy")
    assert recorder.flush()
    (event,) = events(server, "default")
    assert event["involvedObject"]["uid"] == NODE
