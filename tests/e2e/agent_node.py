"""A GPU node of the ``kube`` end-to-end suite played in one process: a fake NVML, the real node
agent (device plugin, labels, health) speaking to the real API server, and a gRPC fake kubelet
that does what the kubelet's device manager does with it: keep the Node's capacity and
allocatable for each resource the agent serves (allocatable counts healthy devices only) and
admit each pod bound to the node by calling the agent's Allocate, then mark it Running."""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpufleet.agent.bound_pods import BoundPod
from gpufleet.agent.device_plugin import PluginConfig
from gpufleet.agent.kube.node_agent import NodeAgentApi
from gpufleet.agent.runner import AgentSettings, NodeAgent
from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.io.kube.binding_signature import BindingKey
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.fake_kubelet import AdmitResult, FakeKubelet, short_tmp_root
from gpufleet.testing.fake_nodes import register_fake_node
from tests.e2e.kube_cluster import RUN_LABEL, Cluster

SYNC_S = 0.05

log = logging.getLogger(__name__)


def fake_gpus(name: str, gpus: int, product: str = "NVIDIA H100 80GB HBM3") -> str:
    """The fake NVML's YAML for a node of ``gpus`` idle GPUs."""
    return yaml.safe_dump(
        {
            "node": name,
            "driver_version": "550.54.15",
            "cuda_driver_version": "12.4",
            "nvswitch": True,
            "devices": [{"product": product, "count": gpus}],
        }
    )


@dataclass
class AgentNode:
    """See the module docstring; :meth:`start` then :meth:`stop`."""

    cluster: Cluster
    name: str
    gpus: int = 4
    nvml: FakeNvml = field(init=False)
    agent: NodeAgent = field(init=False)
    kubelet: FakeKubelet = field(init=False)
    admitted: dict[str, AdmitResult] = field(default_factory=dict)

    def start(self) -> AgentNode:
        node = ko.gpu_node(self.name, gpus=0, labels={RUN_LABEL: self.cluster.run_id})
        self.cluster.nodes.append(register_fake_node(self.cluster.core, node))
        spec = parse_fake_spec(yaml.safe_load(fake_gpus(self.name, self.gpus)), self.name)
        self.nvml = FakeNvml(spec)
        self.nvml.nvmlInit()
        self._root = short_tmp_root()
        self.kubelet = FakeKubelet(self._root).start()
        settings = AgentSettings(
            PluginConfig(
                node_name=self.name,
                plugin_dir=self.kubelet.plugin_dir,
                binding_key=BindingKey.from_file(self.cluster.binding_key_file),
                scheduler_names=frozenset({self.cluster.scheduler_name}),
            ),
            pod_resources_socket=self.kubelet.pod_resources_socket,
            metrics_address="127.0.0.1:0",
        )
        api = NodeAgentApi.connect(self.name, self.cluster.kubeconfig)
        self.agent = NodeAgent(NvmlDeviceSource(self.nvml), api, settings).start()
        self._stop = threading.Event()
        self._status: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._play_kubelet, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.agent.stop()
        self.kubelet.stop()
        shutil.rmtree(self._root, ignore_errors=True)

    def uuid(self, index: int) -> str:
        device = self.agent.inventory().device(index)
        assert device is not None
        return device.uuid

    # ----------------------------------------------------------------------------- the kubelet
    def _play_kubelet(self) -> None:
        while not self._stop.wait(SYNC_S):
            try:
                self._sync_capacity()
                for pod in self.agent.bound_pods.pods():
                    if pod.key not in self.admitted:
                        self._admit(pod)
            except Exception as error:  # the API server restarted by a fault test: go on
                log.warning("fake kubelet of %s: %s; trying again", self.name, error)

    def _sync_capacity(self) -> None:
        resources = {r: self.kubelet.devices(r) for r in self.kubelet.resources()}
        capacity = {r: str(len(d)) for r, d in resources.items()}
        allocatable = {r: str(sum(d.values())) for r, d in resources.items()}
        status = {"capacity": capacity, "allocatable": allocatable}
        if status != self._status:
            self.cluster.core.patch_node_status(self.name, {"status": status})
            self._status = status

    def _admit(self, pod: BoundPod) -> None:
        result = self.kubelet.admit(pod)
        self.admitted[pod.key] = result
        if result.error is None:
            self.cluster.kubelet_runs(pod.name)
