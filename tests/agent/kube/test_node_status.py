"""The node agent's labels, annotations and conditions on its Node, against the fake API
server: owned labels no longer set are removed and others kept, an unchanged publish writes
nothing, bad labels write nothing, and condition times move as the kubelet's do."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.agent.kube.node_agent import NodeAgentApi, gpu_health_message
from gpufleet.agent.kube.node_status import (
    AGENT_LABELS_ANNOTATION,
    DEFAULT_OWNED_LABEL_PREFIXES,
    GPU_HEALTH_CONDITION,
    NodeConditions,
    label_patch,
)
from gpufleet.io.kube.annotations import INVENTORY_ANNOTATION
from gpufleet.kube_client.api import KubeApi, RateLimiter
from gpufleet.testing import kube_objects as ko
from tests.fakes.kube_api import FakeApiServer

NODE = "gpu-1"
GFD = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/mig.capable": "true",
    "gpufleet.dev/nvlink-domain": "gpu-1-nvl0",
}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        fake.create(ko.gpu_node(NODE, labels={"team": "a", "nvidia.com/gpu.present": "true"}))
        yield fake


@pytest.fixture
def agent(server: FakeApiServer) -> Iterator[NodeAgentApi]:
    api = NodeAgentApi(KubeApi(server.api_client(), RateLimiter(10_000, 10_000)), NODE)
    yield api
    api.close()


def labels_of(server: FakeApiServer) -> dict[str, str]:
    node = server.get("v1", "Node", NODE)
    assert node is not None
    return dict(node["metadata"].get("labels") or {})


def annotations_of(server: FakeApiServer) -> dict[str, str]:
    node = server.get("v1", "Node", NODE)
    assert node is not None
    return dict(node["metadata"].get("annotations") or {})


def node_patches(server: FakeApiServer) -> int:
    return server.requests.count(("PATCH", f"/api/v1/nodes/{NODE}"))


# ----------------------------------------------------------------------------- publish
def test_publish_sets_labels_and_inventory_and_keeps_the_rest(
    server: FakeApiServer, agent: NodeAgentApi
) -> None:
    assert agent.publish(NODE, GFD, {INVENTORY_ANNOTATION: '{"devices":[]}'})
    labels = labels_of(server)
    assert {key: labels[key] for key in GFD} == GFD
    assert labels["team"] == "a"
    assert labels["nvidia.com/gpu.present"] == "true"
    annotations = annotations_of(server)
    assert annotations[INVENTORY_ANNOTATION] == '{"devices":[]}'
    assert annotations[AGENT_LABELS_ANNOTATION] == ",".join(sorted(GFD))
    assert node_patches(server) == 1


def test_labels_owned_before_and_no_longer_set_are_removed(
    server: FakeApiServer, agent: NodeAgentApi
) -> None:
    agent.publish(NODE, GFD, {})
    fewer = {k: v for k, v in GFD.items() if k != "nvidia.com/mig.capable"}
    fewer["nvidia.com/gpu.count"] = "7"
    assert agent.publish(NODE, fewer, {})
    labels = labels_of(server)
    assert "nvidia.com/mig.capable" not in labels
    assert labels["nvidia.com/gpu.count"] == "7"
    # Not the agent's, though under its prefix (the GPU operator's), and not under it at all.
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["team"] == "a"
    assert annotations_of(server)[AGENT_LABELS_ANNOTATION] == ",".join(sorted(fewer))


def test_unchanged_publish_writes_nothing(server: FakeApiServer, agent: NodeAgentApi) -> None:
    assert agent.publish(NODE, GFD, {INVENTORY_ANNOTATION: "{}"})
    assert not agent.publish(NODE, dict(GFD), {INVENTORY_ANNOTATION: "{}"})
    assert node_patches(server) == 1


def test_a_label_someone_removed_is_put_back(server: FakeApiServer, agent: NodeAgentApi) -> None:
    agent.publish(NODE, GFD, {})
    node = server.get("v1", "Node", NODE)
    assert node is not None
    del node["metadata"]["labels"]["nvidia.com/gpu.count"]
    server.update(node)
    assert agent.publish(NODE, GFD, {})
    assert labels_of(server)["nvidia.com/gpu.count"] == "8"


BAD_LABELS = [
    ("outside-prefixes", {"team": "b"}, "outside the agent's label prefixes"),
    ("bad-value", {"nvidia.com/gpu.product": "NVIDIA H100"}, "'nvidia.com/gpu.product'"),
    ("value-too-long", {"gpufleet.dev/nvlink-domain": "x" * 64}, "at most 63"),
    ("bad-name", {"nvidia.com/gpu.x-": "1"}, "name must be"),
]


@pytest.mark.parametrize(
    ("labels", "says"), [c[1:] for c in BAD_LABELS], ids=[c[0] for c in BAD_LABELS]
)
def test_bad_labels_write_nothing(
    server: FakeApiServer, agent: NodeAgentApi, labels: dict[str, str], says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        agent.publish(NODE, {**GFD, **labels}, {INVENTORY_ANNOTATION: "{}"})
    assert node_patches(server) == 0


label_keys = st.sampled_from(
    ["nvidia.com/gpu.a", "nvidia.com/gpu.b", "gpufleet.dev/c", "other.io/d", "plain"]
)
label_maps = st.dictionaries(label_keys, st.sampled_from(["1", "2"]), max_size=5)


def _apply(labels: dict[str, str], patch: dict[str, Any] | None) -> dict[str, str]:
    changes = ((patch or {}).get("metadata") or {}).get("labels") or {}
    out = dict(labels)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@given(current=label_maps, before=label_maps, now=label_maps)
def test_patch_sets_ours_removes_only_ours_and_is_idempotent(
    current: dict[str, str], before: dict[str, str], now: dict[str, str]
) -> None:
    prefixes = ("nvidia.com/gpu.", "gpufleet.dev/")
    before = {k: v for k, v in before.items() if k.startswith(prefixes)}
    now = {k: v for k, v in now.items() if k.startswith(prefixes)}
    node = {
        "metadata": {
            "labels": {**current, **before},
            "annotations": {AGENT_LABELS_ANNOTATION: ",".join(sorted(before))},
        }
    }
    patch = label_patch(node, now, {}, prefixes)
    after = _apply({**current, **before}, patch)
    for key, value in now.items():
        assert after[key] == value
    for key in set(current) | set(before):
        if key not in now and not (key in before and key.startswith(prefixes)):
            assert after.get(key) == {**current, **before}[key]
    for key in set(before) - set(now):
        assert key not in after
    annotations = {AGENT_LABELS_ANNOTATION: ",".join(sorted(now))}
    assert (
        label_patch({"metadata": {"labels": after, "annotations": annotations}}, now, {}, prefixes)
        is None
    )


def test_default_prefixes_leave_operator_labels_alone() -> None:
    node = {
        "metadata": {
            "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.dcgm": "true"},
            "annotations": {},
        }
    }
    patch = label_patch(node, {}, {}, DEFAULT_OWNED_LABEL_PREFIXES)
    assert patch == {"metadata": {"annotations": {AGENT_LABELS_ANNOTATION: ""}}}


# ----------------------------------------------------------------------------- conditions
class Clocks:
    def __init__(self) -> None:
        self.now = 1_000.0
        self.wall_now = 1_700_000_000.0

    def clock(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall_now += seconds


def condition_of(server: FakeApiServer, kind: str = GPU_HEALTH_CONDITION) -> dict[str, Any]:
    node = server.get("v1", "Node", NODE)
    assert node is not None
    (found,) = [c for c in node["status"]["conditions"] if c["type"] == kind]
    return dict(found)


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def conditions(server: FakeApiServer, clocks: Clocks) -> NodeConditions:
    api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
    return NodeConditions(api, heartbeat_s=60.0, clock=clocks.clock, wall=clocks.wall)


def test_condition_transition_and_heartbeat_times(
    server: FakeApiServer, conditions: NodeConditions, clocks: Clocks
) -> None:
    assert conditions.set_condition(NODE, GPU_HEALTH_CONDITION, "True", "AllHealthy", "8 GPUs")
    first = condition_of(server)
    assert first["lastTransitionTime"] == first["lastHeartbeatTime"] == "2023-11-14T22:13:20Z"
    assert condition_of(server, "Ready")["status"] == "True", "other conditions are kept"

    clocks.advance(10)
    assert not conditions.set_condition(NODE, GPU_HEALTH_CONDITION, "True", "AllHealthy", "8 GPUs")
    clocks.advance(60)
    assert conditions.set_condition(NODE, GPU_HEALTH_CONDITION, "True", "AllHealthy", "8 GPUs")
    beat = condition_of(server)
    assert beat["lastTransitionTime"] == first["lastTransitionTime"]
    assert beat["lastHeartbeatTime"] == "2023-11-14T22:14:30Z"

    clocks.advance(5)
    message = gpu_health_message(3, "GPU-3f", 79, "GPU has fallen off the bus")
    assert conditions.set_condition(NODE, GPU_HEALTH_CONDITION, "False", "XidError", message)
    down = condition_of(server)
    assert down["status"] == "False"
    assert down["message"] == "GPU 3 (GPU-3f) unhealthy: XID 79 (GPU has fallen off the bus)"
    assert down["lastTransitionTime"] == down["lastHeartbeatTime"] == "2023-11-14T22:14:35Z"

    clocks.advance(1)
    other = gpu_health_message(3, "GPU-3f", 48, "double-bit ECC error")
    assert conditions.set_condition(NODE, GPU_HEALTH_CONDITION, "False", "XidError", other)
    again = condition_of(server)
    assert again["message"] == other, "a new message is written at once"
    assert again["lastTransitionTime"] == down["lastTransitionTime"]
    assert conditions.writes == 4


def test_a_restarted_agent_keeps_the_transition_time(
    server: FakeApiServer, conditions: NodeConditions, clocks: Clocks
) -> None:
    conditions.set_condition(NODE, GPU_HEALTH_CONDITION, "True", "AllHealthy", "8 GPUs")
    transition = condition_of(server)["lastTransitionTime"]
    clocks.advance(120)
    api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
    restarted = NodeConditions(api, clock=clocks.clock, wall=clocks.wall)
    assert restarted.set_condition(NODE, GPU_HEALTH_CONDITION, "True", "AllHealthy", "8 GPUs")
    after = condition_of(server)
    assert after["lastTransitionTime"] == transition
    assert after["lastHeartbeatTime"] != transition


def _drop_conditions(server: FakeApiServer) -> None:
    """The Node re-created bare: a kubelet registering again shows none of the agent's."""
    node = server.get("v1", "Node", NODE)
    assert node is not None
    server.delete("v1", "Node", NODE)
    server.create(ko.gpu_node(NODE, labels=node["metadata"].get("labels")))


def _overwrite_message(server: FakeApiServer) -> None:
    node = server.get("v1", "Node", NODE)
    assert node is not None
    for found in node["status"]["conditions"]:
        if found["type"] == GPU_HEALTH_CONDITION:
            found["message"] = "someone else's"
    server.update(node)


def _leave_alone(server: FakeApiServer) -> None:
    pass


@pytest.mark.parametrize(
    ("change", "rewritten"),
    [
        pytest.param(_drop_conditions, True, id="node-recreated-bare"),
        pytest.param(_overwrite_message, True, id="changed-by-someone-else"),
        pytest.param(_leave_alone, False, id="as-written"),
    ],
)
def test_a_condition_is_compared_with_the_node_as_read(
    server: FakeApiServer,
    conditions: NodeConditions,
    clocks: Clocks,
    change: Callable[[FakeApiServer], None],
    rewritten: bool,
) -> None:
    """Given the Node as just read, what it shows decides, not the last write (which alone
    left a re-created Node without the condition until the heartbeat, or for ever)."""
    conditions.set_condition(NODE, GPU_HEALTH_CONDITION, "False", "GpuUnhealthy", "GPU 2")
    change(server)
    clocks.advance(5)
    current = server.get("v1", "Node", NODE)
    assert current is not None
    wrote = conditions.set_condition(
        NODE, GPU_HEALTH_CONDITION, "False", "GpuUnhealthy", "GPU 2", current=current
    )
    assert wrote == rewritten
    shown = condition_of(server)
    assert (shown["status"], shown["reason"], shown["message"]) == (
        "False",
        "GpuUnhealthy",
        "GPU 2",
    )


@pytest.mark.parametrize(
    ("status", "reason"), [("Healthy", "X"), ("True", "")], ids=["bad-status", "no-reason"]
)
def test_bad_conditions_are_refused(
    server: FakeApiServer, conditions: NodeConditions, status: str, reason: str
) -> None:
    with pytest.raises(ValueError, match=GPU_HEALTH_CONDITION):
        conditions.set_condition(NODE, GPU_HEALTH_CONDITION, status, reason, "m")
    assert ("PATCH", f"/api/v1/nodes/{NODE}/status") not in server.requests


@pytest.mark.parametrize(
    ("xid", "reason", "expected"),
    [
        (79, "fallen off the bus", "GPU 1 (GPU-a) unhealthy: XID 79 (fallen off the bus)"),
        (79, "", "GPU 1 (GPU-a) unhealthy: XID 79"),
        (None, "lost", "GPU 1 (GPU-a) unhealthy: lost"),
        (None, "", "GPU 1 (GPU-a) unhealthy: unhealthy"),
    ],
    ids=["xid-reason", "xid", "reason", "nothing"],
)
def test_health_message(xid: int | None, reason: str, expected: str) -> None:
    assert gpu_health_message(1, "GPU-a", xid, reason) == expected
