"""The pods bound to one node, as the device plugin looks them up, against the fake API
server: only that node's pods, a binding's annotations seen within the deadline, bind order,
container limits, deletions, and a watch that recovers from expired history."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpufleet.agent.kube.node_agent import NodeAgentApi
from gpufleet.agent.kube.node_pods import BoundPodsView, ContainerView, PodView, pod_view
from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION, VISIBLE_DEVICES_ANNOTATION
from gpufleet.kube_client.api import KubeApi, RateLimiter
from gpufleet.testing import kube_objects as ko
from tests.fakes.kube_api import FakeApiServer

NODE = "gpu-1"
DEADLINE_S = 5.0


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


@pytest.fixture
def api(server: FakeApiServer) -> KubeApi:
    return KubeApi(server.api_client(), RateLimiter(10_000, 10_000))


@pytest.fixture
def agent(api: KubeApi) -> Iterator[NodeAgentApi]:
    found = NodeAgentApi(api, NODE)
    yield found
    found.close()


@pytest.fixture
def view(agent: NodeAgentApi) -> BoundPodsView:
    found = agent.watch_pods(watch_timeout_s=5)
    assert found.wait_synced(DEADLINE_S)
    return found


def names(view: BoundPodsView) -> list[str]:
    return [pod.name for pod in view.pods()]


def test_listing_has_only_this_nodes_pods(server: FakeApiServer, agent: NodeAgentApi) -> None:
    server.create(ko.gpu_pod("mine", node=NODE))
    server.create(ko.gpu_pod("elsewhere", node="gpu-2"))
    server.create(ko.gpu_pod("pending"))
    view = agent.watch_pods(watch_timeout_s=5)
    assert view.wait_synced(DEADLINE_S)
    assert names(view) == ["mine"]
    (pod,) = view.pods()
    assert (pod.namespace, pod.phase) == ("default", "Pending")
    assert view.by_uid(pod.uid) == pod
    assert view.by_name("default", "mine") == pod
    assert view.by_name("default", "elsewhere") is None


def test_a_bound_pods_annotations_are_seen_within_the_deadline(
    server: FakeApiServer, api: KubeApi, view: BoundPodsView
) -> None:
    created = server.create(ko.gpu_pod("train", gpus=2, namespace="team-a"))
    assert view.pods() == []
    placement = {GPU_INDEX_ANNOTATION: "0,3", VISIBLE_DEVICES_ANNOTATION: "GPU-a,GPU-d"}
    api.bind("team-a", "train", NODE, placement)
    pod = view.wait_for_uid(created["metadata"]["uid"], DEADLINE_S)
    assert pod is not None, "the bound pod did not appear"
    assert pod.key == "team-a/train"
    assert pod.annotations[GPU_INDEX_ANNOTATION] == "0,3"
    assert pod.annotations[VISIBLE_DEVICES_ANNOTATION] == "GPU-a,GPU-d"
    assert pod.containers == (ContainerView("main", {"nvidia.com/gpu": "2"}),)
    assert pod.containers[0].count("nvidia.com/gpu") == 2
    assert pod.scheduled_at >= pod.created


def test_changes_and_deletions_follow(server: FakeApiServer, view: BoundPodsView) -> None:
    created = server.create(ko.gpu_pod("p", node=NODE))
    uid = created["metadata"]["uid"]
    assert view.wait_until(lambda pods: [p.uid for p in pods] == [uid], DEADLINE_S)
    pod = server.get("v1", "Pod", "p", "default")
    assert pod is not None
    pod["status"] = {"phase": "Running"}
    server.update(pod)
    assert view.wait_until(lambda pods: pods[0].phase == "Running", DEADLINE_S)
    first_seen = view.pods()[0].seen
    server.delete("v1", "Pod", "p", "default")
    assert view.wait_until(lambda pods: pods == [], DEADLINE_S)
    assert view.by_uid(uid) is None
    assert first_seen == 1


def test_pods_come_in_bind_order(server: FakeApiServer, api: KubeApi, view: BoundPodsView) -> None:
    for name in ("c", "a", "b"):
        server.create(ko.gpu_pod(name))
    for name in ("b", "c", "a"):
        api.bind("default", name, NODE, {})
    assert view.wait_until(lambda pods: len(pods) == 3, DEADLINE_S)
    # Same-second binding times: the order the view saw them bound breaks the tie.
    assert names(view) == ["b", "c", "a"]
    assert [pod.seen for pod in view.pods()] == [1, 2, 3]


def test_the_watch_recovers_from_expired_history(
    server: FakeApiServer, view: BoundPodsView
) -> None:
    server.create(ko.gpu_pod("before", node=NODE))
    assert view.wait_until(lambda pods: len(pods) == 1, DEADLINE_S)
    server.compact()
    server.close_watches()
    server.delete("v1", "Pod", "before", "default")
    server.create(ko.gpu_pod("after", node=NODE))
    assert view.wait_until(lambda pods: [p.name for p in pods] == ["after"], DEADLINE_S)


def test_init_containers_and_limits(server: FakeApiServer, view: BoundPodsView) -> None:
    pod = ko.gpu_pod("share", gpus=0, node=NODE, extra_limits={"gpufleet.dev/gpu-share": "1"})
    pod["spec"]["initContainers"] = [
        {"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    server.create(pod)
    assert view.wait_until(lambda pods: len(pods) == 1, DEADLINE_S)
    (found,) = view.pods()
    main, warmup = found.container("main"), found.container("warmup")
    assert main is not None
    assert warmup is not None
    assert main.count("gpufleet.dev/gpu-share") == 1
    assert main.count("nvidia.com/gpu") == 0
    assert warmup.count("nvidia.com/gpu") == 1
    assert found.container("nope") is None


def test_a_limit_that_is_not_a_count_names_the_container() -> None:
    container = ContainerView("main", {"nvidia.com/gpu": "500m"})
    with pytest.raises(ValueError, match=r"container main: limit nvidia.com/gpu='500m'"):
        container.count("nvidia.com/gpu")


def test_close_ends_the_watch(server: FakeApiServer, agent: NodeAgentApi) -> None:
    view = agent.watch_pods(watch_timeout_s=300)
    assert view.wait_synced(DEADLINE_S)
    server.wait_for(lambda: server.store.watches_open >= 1, DEADLINE_S, "the pod watch")
    view.close(DEADLINE_S)
    assert not view.informer.alive


def test_a_listener_keeps_an_exact_copy(server: FakeApiServer, agent: NodeAgentApi) -> None:
    server.create(ko.gpu_pod("old", node=NODE))
    copy: dict[str, str] = {}
    told: list[tuple[str, str]] = []

    def listen(kind: str, pod: PodView) -> None:
        told.append((kind, pod.name))
        if kind == "DELETED":
            copy.pop(pod.uid, None)
        else:
            copy[pod.uid] = pod.name

    view = agent.watch_pods(watch_timeout_s=5, on_change=listen)
    assert view.wait_synced(DEADLINE_S)
    server.create(ko.gpu_pod("new", node=NODE))
    server.compact()
    server.close_watches()
    server.delete("v1", "Pod", "old", "default")  # missed by the watch: the relist tells it
    assert view.wait_until(lambda pods: [p.name for p in pods] == ["new"], DEADLINE_S)
    assert sorted(copy.values()) == ["new"]
    assert ("DELETED", "old") in told
    assert told[0] == ("ADDED", "old")


def test_bind_time_is_the_scheduled_time() -> None:
    pod = pod_view(
        {
            "metadata": {"name": "p", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "True",
                        "lastTransitionTime": "2025-01-01T00:00:10Z",
                    }
                ]
            },
        },
        seen=1,
    )
    assert pod.bind_time == 1735689610.0
    assert pod_view({"metadata": {"name": "q"}}, seen=2).bind_time == 0.0
