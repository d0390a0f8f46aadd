"""The same snapshot through the simulator and through the Kubernetes backend (against the
fake API server) gives the same placements, down to the GPU indices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.control.factory import build_core, target_of
from gpufleet.control.loop import run as run_loop
from gpufleet.io.kube.annotations import placement_from_annotations
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.io.readers import read_scenario
from gpufleet.model.times import simulated_time
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import harness

Obj = dict[str, Any]


def _snapshot() -> tuple[list[Obj], list[Obj]]:
    """Nodes, and everything else: queues, classes, a gang, whole, shared and model-bound pods."""
    nodes = [ko.gpu_node(f"h100-{i}", gpus=8) for i in range(3)]
    nodes += [ko.gpu_node(f"a100-{i}", gpus=4, model=ko.A100) for i in range(3)]
    objects: list[Obj] = [
        ko.queue("research", {"nvidia.com/gpu": 20}, namespaces=["default"]),
        ko.queue("prod", {"nvidia.com/gpu": 16}, namespaces=["prod"]),
        ko.priority_class("high", 1000),
        ko.pod_group("ddp", 4),
    ]
    shapes = [1, 2, 4, 1, 8, 2, 1, 3]
    for i, gpus in enumerate(shapes):
        objects.append(ko.gpu_pod(f"job-{i:02d}", gpus=gpus))
    for i in range(6):
        objects.append(
            ko.gpu_pod(
                f"infer-{i:02d}",
                namespace="prod",
                gpus=0,
                priority_class="high",
                annotations={"gpufleet.dev/gpu-milli": str(250 * (1 + i % 3))},
            )
        )
    for i in range(4):
        objects.append(ko.gpu_pod(f"ddp-{i}", gpus=2, labels={"gpufleet.dev/pod-group": "ddp"}))
    objects.append(
        ko.gpu_pod(
            "needs-a100",
            gpus=2,
            annotations={"gpufleet.dev/gpu-models": "NVIDIA-A100-SXM4-40GB"},
        )
    )
    return nodes, objects


def _simulated(
    nodes: list[Obj], objects: list[Obj], tmp: Path, policy: str
) -> dict[str, tuple[str, tuple[int, ...], int]]:
    scenario_file = tmp / "snapshot.yaml"
    pods_first = sorted(
        objects,
        key=lambda o: (
            o["kind"] != "Pod",
            o["metadata"].get("namespace", ""),
            o["metadata"]["name"],
        ),
    )
    scenario_file.write_text(yaml.safe_dump_all(pods_first))
    scenario = read_scenario(scenario_file)
    model_nodes = [
        node_from_object(n, "test") for n in sorted(nodes, key=lambda n: n["metadata"]["name"])
    ]
    pods = [p for t in scenario.workloads for p in t.workload.pods]
    core = build_core(
        model_nodes,
        policy,
        0,
        scenario.queues,
        scenario.resource_quotas,
        AdmissionConfig(),
        target_of(pods),
        time_format=simulated_time,  # a simulated cluster's clock
    )
    ordered = sorted(scenario.workloads, key=lambda t: t.workload.pods[0].key)
    sim = SimulatedCluster(model_nodes, (), Mode.REPLAY, target_of(pods), workloads=ordered)
    run_loop(sim, core, stop=lambda: sim.clock.now() > 1.0)
    out = {}
    for pod in pods:
        placement = core.placement_of(pod.key)
        if placement is not None:
            out[pod.key] = (placement.node, placement.gpu_indices, placement.gpu_milli_per_device)
    return out


def _on_kubernetes(
    nodes: list[Obj], objects: list[Obj], policy: str, expected: int
) -> dict[str, tuple[str, tuple[int, ...], int]]:
    with harness(*nodes, *objects) as h:
        h.scheduler.options.policy = policy
        # Wait for the binds the simulator made (a loaded machine answers slowly), then until
        # a turn changes nothing, so that a bind the simulator did not make would show up too.
        h.until(lambda: len(h.bound()) >= expected, timeout=30, what=f"{expected} pods bound")
        h.settle()
        out = {}
        for pod in h.server.list("v1", "Pod"):
            node = pod["spec"].get("nodeName")
            if not node:
                continue
            metadata = pod["metadata"]
            placement = placement_from_annotations(node, metadata.get("annotations") or {})
            indices = placement.gpu_indices if placement else ()
            milli = placement.gpu_milli_per_device if placement else 0
            out[f"{metadata['namespace']}/{metadata['name']}"] = (node, indices, milli)
        return out


@pytest.mark.parametrize("policy", ["default", "bestfit", "fgd"])
def test_simulator_and_kubernetes_backend_place_the_same_snapshot_identically(
    policy: str, tmp_path: Path
) -> None:
    nodes, objects = _snapshot()
    simulated = _simulated(nodes, objects, tmp_path, policy)
    on_kubernetes = _on_kubernetes(nodes, objects, policy, len(simulated))
    assert len(simulated) >= 15, "the snapshot should place most of its pods"
    assert on_kubernetes == simulated
