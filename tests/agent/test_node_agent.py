"""The whole node agent in one process: fake NVML, a real gRPC fake kubelet and the fake API
server. Labels and the inventory reach the Node, the kubelet is served, a bound pod's Allocate
gets the UUID of the device it was bound to, /metrics carries dcgm-exporter's names with the
pod attributed, and an XID withdraws one device everywhere (kubelet, annotation, condition,
Event) until it recovers. Each runs with the agent's own client and with the official one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from gpufleet.agent.device_plugin import PluginConfig
from gpufleet.agent.kube.node_agent import GPU_HEALTH_CONDITION, NodeAgentApi
from gpufleet.agent.kube.node_pods import pod_view
from gpufleet.agent.kube_bridge import bound_pod
from gpufleet.agent.runner import AgentSettings, NodeAgent, split_address
from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import load_fake_spec, parse_fake_spec
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.io.kube.annotations import (
    GPU_INDEX_ANNOTATION,
    INVENTORY_ANNOTATION,
    VISIBLE_DEVICES_ANNOTATION,
    inventory_from_json,
)
from gpufleet.io.kube.binding_signature import (
    BINDING_SIGNATURE_ANNOTATION,
    BindingKey,
    signed_binding,
)
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.kube_client.api import KubeApi, RateLimiter
from gpufleet.kube_client.api_types import Obj
from gpufleet.model.gpu import GPU_RESOURCE, SHARE_RESOURCE
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.agent_builders import TEST_BINDING_KEY
from gpufleet.testing.fake_kubelet import FakeKubelet
from gpufleet.testing.waiting import wait_until
from tests.fakes.kube_api import FakeApiServer

NODE = "gpu-1"
#: The agent's requests are recorded under this identity (tests/deploy/rbac_evidence.py).
AGENT_CLIENT = "gpufleet-agent"
SPEC = """
node: gpu-1
driver_version: "550.54.15"
cuda_driver_version: "12.4"
nvswitch: true
devices:
  - product: NVIDIA H100 80GB HBM3
    count: 4
    utilization: {gpu_util: 87, fb_used_mib: 40000, temperature_c: 61, power_w: 500}
"""


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


@pytest.fixture(params=["light-client", "official-client"])
def agent(
    request: pytest.FixtureRequest,
    server: FakeApiServer,
    kubelet: FakeKubelet,
    nvml: FakeNvml,
    tmp_path: Path,
) -> Iterator[NodeAgent]:
    """The agent as ``gpufleet agent`` connects it (LightKubeApi, from a kubeconfig), and over
    the scheduler's official client (the same calls through the other client)."""
    if request.param == "light-client":
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", AGENT_CLIENT)
        api = NodeAgentApi.connect(NODE, str(kubeconfig))
    else:
        client = server.api_client(AGENT_CLIENT)
        api = NodeAgentApi(KubeApi(client, RateLimiter(10_000, 10_000)), NODE)
    settings = AgentSettings(
        PluginConfig(
            node_name=NODE,
            plugin_dir=kubelet.plugin_dir,
            kubelet_poll_s=0.05,
            binding_key=TEST_BINDING_KEY,
        ),
        pod_resources_socket=kubelet.pod_resources_socket,
        metrics_address="127.0.0.1:0",
        pods_sync_timeout_s=10,
    )
    node_agent = NodeAgent(NvmlDeviceSource(nvml), api, settings).start()
    try:
        yield node_agent
    finally:
        node_agent.stop()


def bind_as_the_scheduler(
    server: FakeApiServer, pod: Obj, gpu_index: str, key: BindingKey = TEST_BINDING_KEY
) -> Obj:
    """``pod`` created pending, then bound to the node through the Binding subresource with
    its devices signed, as gpufleet's scheduler binds it; the pod as the API server has it."""
    created = server.create(pod)
    metadata = created["metadata"]
    binding = {GPU_INDEX_ANNOTATION: gpu_index, VISIBLE_DEVICES_ANNOTATION: gpu_index}
    signed = signed_binding(key, metadata["uid"], NODE, binding)
    KubeApi(server.api_client()).bind(metadata["namespace"], metadata["name"], NODE, signed)
    bound = server.get("v1", "Pod", metadata["name"], metadata["namespace"])
    assert bound is not None
    return bound


def node_of(server: FakeApiServer) -> dict[str, object]:
    node = server.get("v1", "Node", NODE)
    assert node is not None
    return node


def node_annotations(server: FakeApiServer) -> dict[str, str]:
    return dict(node_of(server)["metadata"].get("annotations") or {})  # type: ignore[attr-defined]


def condition(server: FakeApiServer) -> dict[str, str]:
    status: dict[str, list[dict[str, str]]] = node_of(server)["status"]  # type: ignore[assignment]
    return next(c for c in status.get("conditions", []) if c["type"] == GPU_HEALTH_CONDITION)


def test_labels_inventory_and_served_resources(
    agent: NodeAgent, server: FakeApiServer, kubelet: FakeKubelet
) -> None:
    labels = node_of(server)["metadata"]["labels"]  # type: ignore[index]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["gpufleet.dev/nvlink-domain"]
    inventory = inventory_from_json(node_annotations(server)[INVENTORY_ANNOTATION])
    assert [d.index for d in inventory.devices] == [0, 1, 2, 3]
    assert condition(server)["status"] == "True"
    kubelet.wait_for(lambda: {GPU_RESOURCE, SHARE_RESOURCE} <= kubelet.resources(), what="both")
    kubelet.wait_for(lambda: len(kubelet.devices(SHARE_RESOURCE)) == 4 * 10, what="share slots")
    kubelet.wait_for(lambda: len(kubelet.devices(GPU_RESOURCE)) == 4, what="the GPUs listed")


def test_bound_pod_gets_its_device_and_is_attributed_in_metrics(
    agent: NodeAgent, server: FakeApiServer, kubelet: FakeKubelet
) -> None:
    kubelet.wait_for(lambda: len(kubelet.devices(GPU_RESOURCE)) == 4, what="the GPUs listed")
    created = bind_as_the_scheduler(server, ko.gpu_pod("train-0", "ml"), gpu_index="2")
    wait_until(lambda: len(agent.bound_pods.pods()) == 1, "the agent to see the bound pod")
    result = kubelet.admit(bound_pod(pod_view(created, 1)))
    assert result.error is None
    uuid_of_2 = agent.inventory().devices[2].uuid
    assert result.allocations[0].grant.envs["NVIDIA_VISIBLE_DEVICES"] == uuid_of_2
    assert agent.metrics_port is not None
    text = httpx.get(f"http://127.0.0.1:{agent.metrics_port}/metrics").text
    util = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(util) == 4
    held = [line for line in util if 'pod="train-0"' in line]
    assert len(held) == 1
    assert f'UUID="{uuid_of_2}"' in held[0]
    assert 'namespace="ml"' in held[0]
    assert 'Hostname="gpu-1"' in held[0]
    allocated = [line for line in text.splitlines() if line.startswith("gpufleet_gpu_allocated{")]
    assert any(uuid_of_2 in line and line.endswith(" 1.0") for line in allocated)
    base = f"http://127.0.0.1:{agent.metrics_port}"
    assert httpx.get(f"{base}/healthz").text == "ok\n"
    assert httpx.get(f"{base}/nothing").status_code == 404


def test_xid_withdraws_one_device_until_it_recovers(
    agent: NodeAgent, server: FakeApiServer, kubelet: FakeKubelet, nvml: FakeNvml
) -> None:
    kubelet.wait_for(lambda: len(kubelet.devices(GPU_RESOURCE)) == 4, what="the GPUs listed")
    uuid_of_1 = agent.inventory().devices[1].uuid
    nvml.inject_xid(1, 79)
    kubelet.wait_for(lambda: not kubelet.devices(GPU_RESOURCE)[uuid_of_1], what="withdrawal")
    assert sum(kubelet.devices(GPU_RESOURCE).values()) == 3
    wait_until(
        lambda: (
            inventory_from_json(node_annotations(server)[INVENTORY_ANNOTATION]).unhealthy == (1,)
        ),
        "the inventory to name GPU 1 unhealthy",
    )
    # The condition is written apart from the inventory (a status patch after the node's).
    wait_until(lambda: condition(server)["status"] == "False", "the condition to turn False")
    assert "GPU 1" in condition(server)["message"]
    assert "79" in condition(server)["message"]
    wait_until(
        lambda: any(
            e.get("reason") == "GpuUnhealthy" and "XID 79" in e.get("message", "")
            for e in server.list("v1", "Event")
        ),
        "a GpuUnhealthy Event naming the XID",
    )
    nvml.recover(1)
    kubelet.wait_for(lambda: kubelet.devices(GPU_RESOURCE)[uuid_of_1], what="the device back")
    wait_until(
        lambda: not inventory_from_json(node_annotations(server)[INVENTORY_ANNOTATION]).unhealthy,
        "the inventory to be healthy again",
    )
    wait_until(lambda: condition(server)["status"] == "True", "the condition to turn True")


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        pytest.param("0.0.0.0:9400", ("0.0.0.0", 9400), id="all"),
        pytest.param(":9400", ("0.0.0.0", 9400), id="no-host"),
        pytest.param("[::1]:9400", ("[::1]", 9400), id="ipv6"),
    ],
)
def test_metrics_address(address: str, expected: tuple[str, int]) -> None:
    assert split_address(address) == expected


@pytest.mark.parametrize("address", ["9400", "host:port", "host:70000"])
def test_metrics_address_errors(address: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        split_address(address)


def test_the_example_node_with_a_mig_gpu_starts_and_serves_its_slices(
    server: FakeApiServer, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    """examples/agent/fake-gpus.yaml (GPU 7 in MIG mode): GFD's per-profile labels are the
    agent's to write, each profile is served as its own resource, and the scheduler reads the
    node back with its slices (a start with MIG once failed on the per-profile labels)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "agent" / "fake-gpus.yaml"
    nvml = FakeNvml(load_fake_spec(example), clock=lambda: 0.0)
    nvml.nvmlInit()
    api = NodeAgentApi.connect(NODE, str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    settings = AgentSettings(
        PluginConfig(node_name=NODE, plugin_dir=kubelet.plugin_dir, binding_key=TEST_BINDING_KEY),
        pod_resources_socket=kubelet.pod_resources_socket,
        metrics_address=None,
    )
    with NodeAgent(NvmlDeviceSource(nvml), api, settings):
        labels = node_of(server)["metadata"]["labels"]  # type: ignore[index]
        assert labels["nvidia.com/mig-1g.10gb.count"] == "2"
        assert labels["nvidia.com/mig.strategy"] == "mixed"
        kubelet.wait_for(
            lambda: {"nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"} <= kubelet.resources(),
            what="the MIG resources",
        )
        # Registered first, its devices listed after (ListAndWatch's first answer).
        kubelet.wait_for(
            lambda: len(kubelet.devices("nvidia.com/mig-1g.10gb")) == 2, what="the MIG slices"
        )
        node = node_from_object(node_of(server), "test")
        assert [s.profile for s in node.gpus[7].mig_slices] == [
            "2g.20gb",
            "1g.10gb",
            "1g.10gb",
            "3g.40gb",
        ]


def _forged_share_pod(scheduler: str, copied_signature: str = "") -> Obj:
    """Mallory's pod: one gpu-share slot, placed on the node by ``spec.nodeName`` (no scheduler
    sees it), its annotations naming GPU 3 as if gpufleet had bound it there."""
    annotations = {GPU_INDEX_ANNOTATION: "3", VISIBLE_DEVICES_ANNOTATION: "3"}
    if copied_signature:
        annotations[BINDING_SIGNATURE_ANNOTATION] = copied_signature
    return ko.gpu_pod(
        "thief",
        "mallory",
        gpus=0,
        scheduler=scheduler,
        node=NODE,
        annotations=annotations,
        extra_limits={SHARE_RESOURCE: "1"},
    )


@pytest.mark.parametrize(
    ("scheduler", "copy_signature", "why"),
    [
        pytest.param(
            "default-scheduler", False, "not placed by gpufleet's scheduler", id="other-scheduler"
        ),
        pytest.param(
            "gpufleet", False, f"carries no {BINDING_SIGNATURE_ANNOTATION}", id="unsigned"
        ),
        pytest.param("gpufleet", True, "does not verify", id="signature-copied-from-team-a"),
    ],
)
def test_a_forged_binding_gets_no_gpu_but_an_allocate_error_and_an_event(
    agent: NodeAgent,
    server: FakeApiServer,
    kubelet: FakeKubelet,
    scheduler: str,
    copy_signature: bool,
    why: str,
) -> None:
    """The review's attack: team-a holds GPU 3 whole; a pod placed without gpufleet asks one
    gpu-share slot and writes gpufleet.dev/gpu-index: "3". Allocate refuses it (the kubelet
    fails the pod) and the agent raises an UntrustedGpuBinding Event on it."""
    kubelet.wait_for(lambda: len(kubelet.devices(SHARE_RESOURCE)) == 40, what="share slots")
    holder = bind_as_the_scheduler(server, ko.gpu_pod("trainer", "team-a"), gpu_index="3")
    wait_until(lambda: len(agent.bound_pods.pods()) == 1, "the agent to see team-a's pod")
    held = kubelet.admit(bound_pod(pod_view(holder, 1)))
    assert held.error is None
    uuid_of_3 = agent.inventory().devices[3].uuid
    assert held.allocations[0].grant.envs["NVIDIA_VISIBLE_DEVICES"] == uuid_of_3

    signature = holder["metadata"]["annotations"][BINDING_SIGNATURE_ANNOTATION]
    thief = server.create(_forged_share_pod(scheduler, signature if copy_signature else ""))
    wait_until(lambda: len(agent.bound_pods.pods()) == 2, "the agent to see the forged pod")
    result = kubelet.admit(bound_pod(pod_view(thief, 2)))

    assert result.error is not None, "a forged binding was honoured"
    assert result.allocations == ()
    assert "FAILED_PRECONDITION" in result.error.message
    assert why in result.error.message
    assert not [a for a in kubelet.allocations if a.pod == "mallory/thief"]
    wait_until(
        lambda: any(
            e.get("reason") == "UntrustedGpuBinding"
            and e["involvedObject"].get("name") == "thief"
            and e["involvedObject"].get("namespace") == "mallory"
            and why in e.get("message", "")
            for e in server.list("v1", "Event")
        ),
        "an UntrustedGpuBinding Event on the forged pod",
    )
