"""The device plugin end to end: a real gRPC fake kubelet registers, watches and admits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.agent.allocation import (
    GPU_MILLI_ENV,
    MISMATCH_REASON,
    MPS_MEMORY_ENV,
    MPS_THREADS_ENV,
    VISIBLE_DEVICES_ENV,
    AllocationMismatchError,
)
from gpufleet.agent.bound_pods import InMemoryBoundPods
from gpufleet.agent.device_plugin import NodeDevicePlugins, PluginConfig, socket_name
from gpufleet.agent.events import RecordingEventSink
from gpufleet.agent.kubelet_api import API_VERSION, DevicePluginClient, rpc_error_text, unix_channel
from gpufleet.agent.pod_resources import PodResourcesReader
from gpufleet.agent.resources import replica_id, share_id
from gpufleet.io.kube.device_plugin_config import read_device_plugin_config
from gpufleet.model.gpu import (
    GPU_RESOURCE,
    SHARE_RESOURCE,
    SHARED_GPU_RESOURCE,
    GpuSharing,
    SharingStrategy,
)
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.telemetry import DeviceUser
from gpufleet.testing.agent_builders import (
    TEST_BINDING_KEY,
    TEST_NODE,
    bound_pod,
    gpu_inventory,
    gpu_uuid,
    mig_uuid,
)
from gpufleet.testing.fake_kubelet import FakeKubelet

MIG_1G = "nvidia.com/mig-1g.10gb"


@contextmanager
def running(
    kubelet: FakeKubelet,
    inventory: NodeInventory,
    pods: InMemoryBoundPods,
    events: RecordingEventSink,
    **config: object,
) -> Iterator[NodeDevicePlugins]:
    plugins = NodeDevicePlugins(
        replace(
            PluginConfig(
                TEST_NODE,
                kubelet.plugin_dir,
                kubelet_poll_s=0.05,
                shares_per_gpu=2,
                binding_key=TEST_BINDING_KEY,
            ),
            **config,  # type: ignore[arg-type]
        ),
        inventory,
        pods,
        events,
        PodResourcesReader(kubelet.pod_resources_socket),
    )
    plugins.start()
    try:
        yield plugins
    finally:
        plugins.stop()


def wait_registered(kubelet: FakeKubelet, *resources: str) -> None:
    kubelet.wait_for(lambda: all(kubelet.devices(r) for r in resources), what=f"{resources} listed")


def test_register_and_list(kubelet: FakeKubelet) -> None:
    inventory = gpu_inventory(3, mig={2: ["3g.40gb", "1g.10gb"]})
    with running(kubelet, inventory, InMemoryBoundPods(), RecordingEventSink()):
        wait_registered(kubelet, GPU_RESOURCE, SHARE_RESOURCE, MIG_1G, "nvidia.com/mig-3g.40gb")
        registration = next(r for r in kubelet.registrations if r.resource_name == GPU_RESOURCE)
        assert registration.version == API_VERSION
        assert registration.endpoint == socket_name(GPU_RESOURCE)
        assert registration.options.preferred_allocation_available
        assert kubelet.devices(GPU_RESOURCE) == {gpu_uuid(0): True, gpu_uuid(1): True}
        assert kubelet.devices(MIG_1G) == {mig_uuid(2, 1): True}
        assert len(kubelet.devices(SHARE_RESOURCE)) == 4


def test_health_change_withdraws_and_restores_a_gpu(kubelet: FakeKubelet) -> None:
    inventory = gpu_inventory(2, mig={1: ["1g.10gb"]})
    with running(kubelet, inventory, InMemoryBoundPods(), RecordingEventSink()) as plugins:
        wait_registered(kubelet, GPU_RESOURCE, MIG_1G)
        plugins.update(gpu_inventory(2, mig={1: ["1g.10gb"]}, unhealthy=[0, 1]))
        kubelet.wait_for(
            lambda: (
                kubelet.devices(GPU_RESOURCE) == {gpu_uuid(0): False}
                and kubelet.devices(MIG_1G) == {mig_uuid(1, 0): False}
                and not any(kubelet.devices(SHARE_RESOURCE).values())
            ),
            what="GPU 0 and the MIG instance on GPU 1 unhealthy",
        )
        result = kubelet.admit(bound_pod("blocked", gpu_index=[0]))
        assert not result.admitted
        assert result.error is not None
        assert "insufficient" in result.error.message
        plugins.update(inventory)
        kubelet.wait_for(
            lambda: kubelet.devices(GPU_RESOURCE) == {gpu_uuid(0): True}, what="GPU 0 back"
        )


def test_allocate_returns_the_bound_devices(kubelet: FakeKubelet) -> None:
    inventory = gpu_inventory(4, mig={3: ["3g.40gb", "1g.10gb", "1g.10gb"]})
    # Bound in this order; the kubelet admits them in another.
    whole = bound_pod("train", units=2, gpu_index=[2, 0])
    share = bound_pod("notebook", resource=SHARE_RESOURCE, gpu_index=[1], milli=250)
    mig = bound_pod("small", resource=MIG_1G, mig_slices=[(3, 2)])
    pods = InMemoryBoundPods([whole, share, mig])
    with running(kubelet, inventory, pods, RecordingEventSink(), mps=True):
        wait_registered(kubelet, GPU_RESOURCE, SHARE_RESOURCE, MIG_1G)
        for pod in (mig, share, whole):
            assert kubelet.admit(pod).admitted, kubelet.errors
        got = {a.pod: a for a in kubelet.allocations}
        assert set(got["ml/train"].device_ids) == {gpu_uuid(0), gpu_uuid(2)}
        assert got["ml/train"].grant.envs[VISIBLE_DEVICES_ENV] in (
            f"{gpu_uuid(2)},{gpu_uuid(0)}",
            f"{gpu_uuid(0)},{gpu_uuid(2)}",
        )
        assert got["ml/small"].grant.envs[VISIBLE_DEVICES_ENV] == mig_uuid(3, 2)
        share_envs = got["ml/notebook"].grant.envs
        assert share_envs[VISIBLE_DEVICES_ENV] == gpu_uuid(1)
        assert share_envs[GPU_MILLI_ENV] == "250"
        assert share_envs[MPS_THREADS_ENV] == "25"
        assert share_envs[MPS_MEMORY_ENV] == f"0={81559 // 4}M"
        assert got["ml/notebook"].device_ids[0].startswith(gpu_uuid(1))
        users = PodResourcesReader(kubelet.pod_resources_socket).device_users()
        assert set(users) == {
            DeviceUser(gpu_uuid(0), "train", "ml", "c0"),
            DeviceUser(gpu_uuid(2), "train", "ml", "c0"),
            DeviceUser(gpu_uuid(1), "notebook", "ml", "c0"),
            DeviceUser(mig_uuid(3, 2), "small", "ml", "c0"),
        }


def test_preferred_allocation_over_grpc(kubelet: FakeKubelet) -> None:
    pods = InMemoryBoundPods([bound_pod("train", units=2, gpu_index=[3, 1])])
    with running(kubelet, gpu_inventory(4), pods, RecordingEventSink()):
        wait_registered(kubelet, GPU_RESOURCE)
        result = kubelet.admit(pods.pods()[0])
        # The kubelet's own choice would be the first free IDs (GPUs 0 and 1).
        assert set(result.allocations[0].device_ids) == {gpu_uuid(3), gpu_uuid(1)}


def test_mismatch_is_refused_with_an_event(kubelet: FakeKubelet) -> None:
    events = RecordingEventSink()
    chosen = bound_pod("train", gpu_index=[1])
    pods = InMemoryBoundPods([chosen])
    with running(kubelet, gpu_inventory(2), pods, events) as plugins:
        wait_registered(kubelet, GPU_RESOURCE)
        # GPU 1 fails between the binding and the admission: the kubelet offers GPU 0.
        plugins.update(gpu_inventory(2, unhealthy=[1]))
        kubelet.wait_for(lambda: not kubelet.devices(GPU_RESOURCE)[gpu_uuid(1)], what="GPU 1 sick")
        result = kubelet.admit(chosen)
        assert not result.admitted
        assert result.error is not None
        assert "FAILED_PRECONDITION" in result.error.message
        assert "ml/train" in result.error.message
        assert gpu_uuid(0) in result.error.message
        (event,) = events.events
        assert event.reason == MISMATCH_REASON
        assert (event.kind, event.namespace, event.name) == ("Pod", "ml", "train")
        assert gpu_uuid(1) in event.message
        assert gpu_uuid(0) in event.message


def test_kubelet_restart_re_registers(kubelet: FakeKubelet) -> None:
    pods = InMemoryBoundPods([bound_pod("after", gpu_index=[1])])
    with running(kubelet, gpu_inventory(2), pods, RecordingEventSink()) as plugins:
        wait_registered(kubelet, GPU_RESOURCE, SHARE_RESOURCE)
        before = plugins.registrations
        kubelet.restart()
        assert not kubelet.resources()
        wait_registered(kubelet, GPU_RESOURCE, SHARE_RESOURCE)
        # The kubelet has the registrations once each Register call arrives; the agent counts
        # one when its call returns, a moment later.
        kubelet.wait_for(lambda: plugins.registrations >= before + 2, what="both counted")
        assert kubelet.admit(pods.pods()[0]).admitted


def test_time_slicing_replicas(kubelet: FakeKubelet) -> None:
    sharing = GpuSharing(SharingStrategy.TIME_SLICING, 2)
    pods = InMemoryBoundPods([bound_pod("replica", gpu_index=[1], milli=500)])
    with running(kubelet, gpu_inventory(2), pods, RecordingEventSink(), sharing=sharing):
        wait_registered(kubelet, GPU_RESOURCE)
        assert set(kubelet.devices(GPU_RESOURCE)) == {
            replica_id(gpu_uuid(g), n) for g in range(2) for n in range(2)
        }
        (allocation,) = kubelet.admit(pods.pods()[0]).allocations
        assert allocation.device_ids[0].startswith(gpu_uuid(1))
        assert allocation.grant.envs[VISIBLE_DEVICES_ENV] == gpu_uuid(1)


@pytest.mark.parametrize("pods_known_at_start", [True, False])
def test_restarted_agent_does_not_take_an_allocated_pod_for_a_waiting_one(
    kubelet: FakeKubelet, pods_known_at_start: bool
) -> None:
    first = bound_pod("first", resource=SHARE_RESOURCE, gpu_index=[0], milli=500)
    second = bound_pod("second", resource=SHARE_RESOURCE, gpu_index=[1], milli=500)
    pods = InMemoryBoundPods([first])
    with running(kubelet, gpu_inventory(2), pods, RecordingEventSink()):
        wait_registered(kubelet, SHARE_RESOURCE)
        assert kubelet.admit(first).admitted
    # The agent restarts; its bound-pods watch may catch up only after it started.
    pods = InMemoryBoundPods([first, second] if pods_known_at_start else [])
    with running(kubelet, gpu_inventory(2), pods, RecordingEventSink()) as plugins:
        wait_registered(kubelet, SHARE_RESOURCE)
        if not pods_known_at_start:
            pods.replace([first, second])
            plugins.sync_allocated()
        # Share slots are tokens: only the memory of what was allocated keeps the second
        # pod from being taken for the first (and getting the first's GPU).
        (allocation,) = kubelet.admit(second).allocations
        assert allocation.grant.envs[VISIBLE_DEVICES_ENV] == gpu_uuid(1)
        with pytest.raises(AllocationMismatchError, match="no pod bound"):
            plugins.allocator.allocate(SHARE_RESOURCE, pods.pods(), (share_id(gpu_uuid(0), 1),))


def test_unknown_device_is_invalid(kubelet: FakeKubelet) -> None:
    with running(kubelet, gpu_inventory(1), InMemoryBoundPods(), RecordingEventSink()):
        wait_registered(kubelet, GPU_RESOURCE)
        channel = unix_channel(kubelet.plugin_dir / socket_name(GPU_RESOURCE))
        try:
            client = DevicePluginClient(channel)
            assert client.options().preferred_allocation_available
            client.pre_start([gpu_uuid(0)])
            with pytest.raises(Exception, match="INVALID_ARGUMENT") as caught:
                client.allocate([["GPU-not-here"]])
            assert "unknown device(s) GPU-not-here" in rpc_error_text(caught.value)
        finally:
            channel.close()


TIME_SLICING_CONFIG_MAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: time-slicing-config
  namespace: gpu-operator
data:
  any: |-
    version: v1
    sharing:
      timeSlicing:
        renameByDefault: true
        failRequestsGreaterThanOne: true
        resources:
        - name: nvidia.com/gpu
          replicas: 4
"""


def test_time_slicing_from_the_device_plugins_config_map(
    kubelet: FakeKubelet, tmp_path: Path
) -> None:
    path = tmp_path / "time-slicing.yaml"
    path.write_text(TIME_SLICING_CONFIG_MAP)
    sharing = read_device_plugin_config(path).gpu_sharing()
    pods = InMemoryBoundPods(
        [
            bound_pod("one", resource=SHARED_GPU_RESOURCE, gpu_index=[1]),
            bound_pod("two", resource=SHARED_GPU_RESOURCE, units=2, gpu_index=[0, 1]),
        ]
    )
    with running(kubelet, gpu_inventory(2), pods, RecordingEventSink(), sharing=sharing):
        wait_registered(kubelet, SHARED_GPU_RESOURCE)
        assert GPU_RESOURCE not in kubelet.resources()
        assert len(kubelet.devices(SHARED_GPU_RESOURCE)) == 8
        (allocation,) = kubelet.admit(pods.pods()[0]).allocations
        assert allocation.grant.envs[VISIBLE_DEVICES_ENV] == gpu_uuid(1)
        assert allocation.grant.envs[GPU_MILLI_ENV] == "250"
        refused = kubelet.admit(pods.pods()[1])
        assert refused.error is not None
        assert "maximum request size for shared resources is 1" in refused.error.message


def test_one_allocate_call_for_two_containers_is_all_or_nothing(kubelet: FakeKubelet) -> None:
    pod = bound_pod("pair", units=[1, 1], gpu_index=[0, 1])
    with running(kubelet, gpu_inventory(3), InMemoryBoundPods([pod]), RecordingEventSink()):
        wait_registered(kubelet, GPU_RESOURCE)
        channel = unix_channel(kubelet.plugin_dir / socket_name(GPU_RESOURCE))
        try:
            client = DevicePluginClient(channel)
            with pytest.raises(Exception, match="FAILED_PRECONDITION"):
                client.allocate([[gpu_uuid(0)], [gpu_uuid(2)]])
            grants = client.allocate([[gpu_uuid(1)], [gpu_uuid(0)]])
            assert [g.envs[VISIBLE_DEVICES_ENV] for g in grants] == [gpu_uuid(1), gpu_uuid(0)]
        finally:
            channel.close()
