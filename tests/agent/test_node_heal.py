"""The agent heals its Node (issue 27, item 6), against the fake API server: an XID that
arrives while the API server fails or refuses connections is published once it answers, and
a Node deleted and re-created bare gets its labels, inventory and condition back on the next
periodic pass. Before, the one failed publish was never tried again, and a re-created Node
stayed bare until the agent restarted."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet.agent.device_plugin import PluginConfig
from gpufleet.agent.kube.node_agent import AGENT_LABELS_ANNOTATION, NodeAgentApi
from gpufleet.agent.node_sync import Backoff
from gpufleet.agent.runner import AgentSettings, NodeAgent
from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.io.kube.annotations import INVENTORY_ANNOTATION, inventory_from_json
from gpufleet.kube_client.api import KubeApi, RateLimiter
from gpufleet.model.gpu import GPU_RESOURCE
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.agent_builders import TEST_BINDING_KEY
from gpufleet.testing.fake_kubelet import FakeKubelet
from gpufleet.testing.waiting import wait_until
from tests.agent.test_node_agent import NODE, SPEC, condition, node_annotations
from tests.fakes.kube_api import FakeApiServer

#: Short waits between failed attempts, so that a test sees several.
RETRY = Backoff(initial_s=0.05, max_s=0.4, jitter=0.0)
#: Within how long of the API answering again the Node must show what the agent knows: well
#: under the default 60 s resync period, so only the retries can make it.
HEALED_WITHIN_S = 5.0


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        fake.create(ko.gpu_node(NODE, gpus=4))
        yield fake


@pytest.fixture
def nvml() -> FakeNvml:
    fake = FakeNvml(parse_fake_spec(yaml.safe_load(SPEC), "test.yaml"), clock=lambda: 0.0)
    fake.nvmlInit()
    return fake


AgentFactory = Callable[[float], NodeAgent]


@pytest.fixture(params=["light-client", "official-client"])
def start_agent(
    request: pytest.FixtureRequest,
    server: FakeApiServer,
    kubelet: FakeKubelet,
    nvml: FakeNvml,
    tmp_path: Path,
) -> Iterator[AgentFactory]:
    """Starts the agent with the given resync period, over either client."""
    started: list[NodeAgent] = []

    def start(resync_s: float) -> NodeAgent:
        if request.param == "light-client":
            kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
            api = NodeAgentApi.connect(NODE, str(kubeconfig))
        else:
            api = NodeAgentApi(KubeApi(server.api_client(), RateLimiter(10_000, 10_000)), NODE)
        settings = AgentSettings(
            PluginConfig(
                node_name=NODE,
                plugin_dir=kubelet.plugin_dir,
                kubelet_poll_s=0.05,
                binding_key=TEST_BINDING_KEY,
            ),
            pod_resources_socket=kubelet.pod_resources_socket,
            metrics_address=None,
            pods_sync_timeout_s=10,
            node_resync_s=resync_s,
            node_retry=RETRY,
        )
        agent = NodeAgent(NvmlDeviceSource(nvml), api, settings).start()
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


def unhealthy_in_inventory(server: FakeApiServer) -> tuple[int, ...]:
    return inventory_from_json(node_annotations(server)[INVENTORY_ANNOTATION]).unhealthy


def fail_with_500(server: FakeApiServer) -> Callable[[], None]:
    """Every call on the Node answers 500 until the returned function is called."""
    # The fake counts faults down; a count no test reaches stands for "until told".
    server.fail_next("*", rf"^/api/v1/nodes/{NODE}(/status)?$", 500, times=1_000_000)

    return server.clear_faults


def refuse_connections(server: FakeApiServer) -> Callable[[], None]:
    """The API server goes away (connections refused) until the returned function is called;
    it comes back at the same address with the same objects."""
    server.stop()

    def come_back() -> None:
        server.start()

    return come_back


@pytest.mark.parametrize(
    "outage",
    [
        pytest.param(fail_with_500, id="answers-500"),
        pytest.param(refuse_connections, id="refuses-connections"),
    ],
)
def test_an_xid_during_an_api_outage_is_published_once_the_api_answers(
    start_agent: AgentFactory,
    server: FakeApiServer,
    kubelet: FakeKubelet,
    nvml: FakeNvml,
    outage: Callable[[FakeApiServer], Callable[[], None]],
) -> None:
    agent = start_agent(60.0)
    kubelet.wait_for(lambda: len(kubelet.devices(GPU_RESOURCE)) == 4, what="the GPUs listed")
    assert condition(server)["status"] == "True"
    uuid_of_1 = agent.inventory().devices[1].uuid

    recover = outage(server)
    nvml.inject_xid(1, 79)
    # The agent knows at once (the kubelet is told without the API server) ...
    kubelet.wait_for(lambda: not kubelet.devices(GPU_RESOURCE)[uuid_of_1], what="withdrawal")
    time.sleep(1.0)  # an outage longer than several attempts
    # ... and the Node says so within seconds of the API server answering again.
    recover()
    wait_until(
        lambda: unhealthy_in_inventory(server) == (1,),
        "the inventory to name GPU 1 unhealthy",
        timeout_s=HEALED_WITHIN_S,
    )
    wait_until(
        lambda: condition(server)["status"] == "False",
        "the condition to turn False",
        timeout_s=HEALED_WITHIN_S,
    )
    assert "GPU 1" in condition(server)["message"]
    assert "79" in condition(server)["message"]
    wait_until(lambda: agent.node_sync.in_sync, "the agent to count itself in sync")


def test_a_node_recreated_bare_gets_labels_inventory_and_condition_back(
    start_agent: AgentFactory, server: FakeApiServer, kubelet: FakeKubelet, nvml: FakeNvml
) -> None:
    agent = start_agent(0.3)
    kubelet.wait_for(lambda: len(kubelet.devices(GPU_RESOURCE)) == 4, what="the GPUs listed")
    nvml.inject_xid(2, 79)
    wait_until(lambda: condition(server)["status"] == "False", "the condition to turn False")
    published = server.get("v1", "Node", NODE)
    assert published is not None

    # The kubelet registers the Node again: its own labels, none of the agent's.
    server.delete("v1", "Node", NODE)
    time.sleep(0.5)  # a pass or two finds no Node
    server.create(ko.gpu_node(NODE, gpus=0))
    bare = server.get("v1", "Node", NODE)
    assert bare is not None
    assert INVENTORY_ANNOTATION not in (bare["metadata"].get("annotations") or {})

    def healed() -> bool:
        node = server.get("v1", "Node", NODE)
        assert node is not None
        labels = node["metadata"].get("labels") or {}
        annotations = node["metadata"].get("annotations") or {}
        conditions = (node.get("status") or {}).get("conditions") or []
        return (
            labels.get("nvidia.com/gpu.count") == "4"
            and labels.get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3"
            and bool(labels.get("gpufleet.dev/nvlink-domain"))
            and AGENT_LABELS_ANNOTATION in annotations
            and INVENTORY_ANNOTATION in annotations
            and any(c["type"] == "GpuDevicesHealthy" for c in conditions)
        )

    wait_until(healed, "the labels, inventory and condition back", timeout_s=HEALED_WITHIN_S)
    assert unhealthy_in_inventory(server) == (2,)
    health = condition(server)
    assert health["status"] == "False"
    assert "GPU 2" in health["message"]
    assert agent.node_sync.passes > 2


def test_a_quiet_node_is_not_written_again(
    start_agent: AgentFactory, server: FakeApiServer, kubelet: FakeKubelet
) -> None:
    """The periodic pass reads the Node and writes only what differs: nothing, here."""
    agent = start_agent(0.1)
    kubelet.wait_for(lambda: len(kubelet.devices(GPU_RESOURCE)) == 4, what="the GPUs listed")
    passes = agent.node_sync.passes
    metadata_writes = server.requests.count(("PATCH", f"/api/v1/nodes/{NODE}"))
    wait_until(lambda: agent.node_sync.passes >= passes + 5, "five more passes")
    assert server.requests.count(("PATCH", f"/api/v1/nodes/{NODE}")) == metadata_writes


@pytest.mark.parametrize(
    ("failures", "expected_s"),
    [
        pytest.param(1, 0.5, id="first"),
        pytest.param(2, 1.0, id="doubled"),
        pytest.param(5, 8.0, id="fifth"),
        pytest.param(7, 30.0, id="capped"),
        pytest.param(10_000, 30.0, id="long-outage"),
    ],
)
def test_backoff(failures: int, expected_s: float) -> None:
    backoff = Backoff(initial_s=0.5, max_s=30.0, jitter=0.2)
    assert backoff.delay(failures, draw=lambda: 0.0) == pytest.approx(expected_s)
    assert backoff.delay(failures, draw=lambda: 1.0) == pytest.approx(expected_s * 0.8)


def test_an_api_server_failing_at_start_does_not_stop_the_agent(
    start_agent: AgentFactory, server: FakeApiServer, kubelet: FakeKubelet
) -> None:
    """503s at start: the agent serves the kubelet and publishes once the API answers (a Node
    that is not there, 404, still fails the start: tests/cli/test_agent_command.py)."""
    server.fail_next("*", rf"^/api/v1/nodes/{NODE}(/status)?$", 503, times=3)
    start_agent(60.0)
    kubelet.wait_for(lambda: len(kubelet.devices(GPU_RESOURCE)) == 4, what="the GPUs listed")
    wait_until(
        lambda: INVENTORY_ANNOTATION in node_annotations(server),
        "the inventory published",
        timeout_s=HEALED_WITHIN_S,
    )
    # The condition is a status patch after the metadata's.
    wait_until(
        lambda: condition_status(server) == "True",
        "GpuDevicesHealthy=True",
        timeout_s=HEALED_WITHIN_S,
    )


def condition_status(server: FakeApiServer) -> str | None:
    node = server.get("v1", "Node", NODE)
    assert node is not None
    for found in (node.get("status") or {}).get("conditions") or []:
        if found["type"] == "GpuDevicesHealthy":
            return str(found["status"])
    return None
