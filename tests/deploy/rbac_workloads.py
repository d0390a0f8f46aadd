"""Workloads that make each component use every API call it has, against the fake API server:
the evidence tests/deploy/test_rbac_evidence.py checks the shipped roles with.

Each runs the component in process with its own client identity (the fake records who asked
what) and seeds the cluster through the fake's store, so that only the component's requests
are recorded. They drive the component's code paths, not assertions about its behaviour (the
component's own tests do that); each asserts only that the path it meant to take was taken.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from gpufleet.agent.device_plugin import PluginConfig
from gpufleet.agent.kube.node_agent import GPU_HEALTH_CONDITION, NodeAgentApi
from gpufleet.agent.runner import AgentSettings, NodeAgent
from gpufleet.backends.kube.leader import LeaderElector
from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.fake_kubelet import FakeKubelet, short_tmp_root
from gpufleet.testing.job_objects import crd
from gpufleet.testing.waiting import wait_until
from tests.backends.kube.harness import CLIENT as SCHEDULER_CLIENT
from tests.backends.kube.harness import Harness, make_scheduler
from tests.fakes.kube_api import FakeApiServer

AGENT_CLIENT = "gpufleet-agent"
Workload = Callable[[FakeApiServer, Path], None]


def scheduler_workload(server: FakeApiServer, _: Path) -> None:
    """Leader election, binding (a gang through its PodGroup, in a Queue), a pod that cannot
    fit (its condition and a repeated Event), preemption through the Eviction API, and the
    status of Queues and PodGroups."""
    low, high = ko.priority_class("batch", 1_000), ko.priority_class("urgent", 100_000)
    others = (
        crd("scheduling.x-k8s.io", "PodGroup", "podgroups", ("v1alpha1",)),
        crd("scheduling.volcano.sh", "PodGroup", "podgroups", ("v1beta1",)),
    )
    for obj in (*ko.crds(), *others, ko.gpu_node("n1", gpus=8), low, high):
        server.create(obj)
    server.create(ko.queue("team-a", {"nvidia.com/gpu": 8}, namespaces=["default"]))
    server.create(ko.pod_group("gang", min_member=2))
    scheduler = make_scheduler(server, min_runtime=0.0)
    scheduler.reporter.repeat_s = 0.0  # a repeat is told at once, not 60 s later
    scheduler.backend.start()
    assert scheduler.backend.wait_synced(10), "informers did not sync"
    h = Harness(server, scheduler)
    try:
        elector = LeaderElector(scheduler.api, "gpufleet-system", "gpufleet-scheduler", "a")
        assert elector.try_acquire_or_renew(), "the lease created"
        assert elector.try_acquire_or_renew(), "the lease renewed"
        gang = {"gpufleet.dev/pod-group": "gang", "gpufleet.dev/queue": "team-a"}
        for i in range(2):
            server.create(ko.gpu_pod(f"gang-{i}", gpus=2, labels=gang, priority_class="batch"))
        h.until(lambda: len(h.bound()) == 2, what="the gang bound")
        for i in range(2):
            h.kubelet_runs(f"gang-{i}")
        server.create(ko.gpu_pod("huge", gpus=16))
        h.settle()
        # The core reports a pending pod's reason when it changes; the same report again
        # (after repeat_s in real time) is counted on the first Event: told directly here.
        told = next(e for e in h.events("FailedScheduling") if _about(e, "huge"))
        scheduler.reporter.unschedulable(h.pod("huge"), told["message"])
        assert scheduler.reporter.flush(10)
        assert any(e.get("count") == 2 for e in h.events("FailedScheduling") if _about(e, "huge"))
        server.delete("v1", "Pod", "huge", "default")
        server.create(ko.gpu_pod("first", gpus=8, priority_class="urgent"))
        h.until(
            lambda: h.pod("gang-0")["metadata"].get("deletionTimestamp") is not None,
            what="the gang evicted for the urgent pod",
        )
        h.settle()
        elector.stop()
    finally:
        h.close()


def _about(event: dict[str, Any], pod: str) -> bool:
    return bool(event["involvedObject"]["name"] == pod)


AGENT_NODE = "gpu-1"
AGENT_GPUS = """
node: gpu-1
driver_version: "550.54.15"
cuda_driver_version: "12.4"
devices:
  - product: NVIDIA H100 80GB HBM3
    count: 2
"""


def agent_workload(server: FakeApiServer, tmp_path: Path) -> None:
    """The agent as ``gpufleet agent`` runs it (its own client, from a kubeconfig): labels,
    inventory and condition on its Node, the pods bound to it, and an XID that fails a GPU
    twice (an Event, then the same Event counted)."""
    server.create(ko.gpu_node(AGENT_NODE, gpus=2))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", AGENT_CLIENT)
    nvml = FakeNvml(parse_fake_spec(yaml.safe_load(AGENT_GPUS), "gpus.yaml"), clock=lambda: 0.0)
    nvml.nvmlInit()
    root = short_tmp_root()  # unix socket paths are short
    kubelet = FakeKubelet(root).start()
    try:
        settings = AgentSettings(
            PluginConfig(node_name=AGENT_NODE, plugin_dir=kubelet.plugin_dir, kubelet_poll_s=0.05),
            pod_resources_socket=kubelet.pod_resources_socket,
            metrics_address=None,
            pods_sync_timeout_s=10,
        )
        api = NodeAgentApi.connect(AGENT_NODE, str(kubeconfig))
        with NodeAgent(NvmlDeviceSource(nvml), api, settings):
            server.create(ko.gpu_pod("train", node=AGENT_NODE))
            for told in (1, 2):
                nvml.inject_xid(1, 79)
                wait_until(partial(_told_at_least, server, told), "the XID's Event")
                nvml.recover(1)
                wait_until(lambda: _condition(server) == "True", "the GPUs healthy again")
    finally:
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def _told_at_least(server: FakeApiServer, times: int) -> bool:
    """GpuUnhealthy told ``times`` times, as Events or counted on them."""
    events = server.list("v1", "Event")
    return sum(int(e.get("count", 1)) for e in events if e["reason"] == "GpuUnhealthy") >= times


def _condition(server: FakeApiServer) -> str:
    node = server.get("v1", "Node", AGENT_NODE) or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == GPU_HEALTH_CONDITION), "")


#: Each component's client identity → its workload.
WORKLOADS: dict[str, Workload] = {
    SCHEDULER_CLIENT: scheduler_workload,
    AGENT_CLIENT: agent_workload,
}
