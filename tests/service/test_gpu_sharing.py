"""Shared GPUs in ``gpufleet serve``: the control plane binds what the kubelet would admit (one
plain pod per time-sliced replica; shares asking ``nvidia.com/gpu: 1`` no more than the node
advertises), as the simulator, ``place`` and the Kubernetes backend do."""

from __future__ import annotations

from pathlib import Path

from gpufleet.model import GpuSharing, SharingStrategy
from gpufleet.testing.builders import GPU_TAINT, make_node
from gpufleet.testing.service import as_yaml, make_harness, pod_doc

YAML = {"Content-Type": "application/yaml"}


def test_a_time_sliced_gpu_runs_a_plain_pod_per_replica(tmp_path: Path) -> None:
    node = make_node(
        "t4-0",
        model="T4",
        gpus=1,
        taints=(GPU_TAINT,),
        sharing=GpuSharing(SharingStrategy.TIME_SLICING, 4),
    )
    harness = make_harness(tmp_path, nodes=[node])
    client = harness.client("team-a")
    docs = [pod_doc(f"p{i}", gpus=1) for i in range(5)]
    assert client.post("/api/v1/workloads", content=as_yaml(*docs), headers=YAML).status_code == 201
    harness.advance(60)
    listed = {w["name"]: w for w in client.get("/api/v1/workloads").json()}
    running = sorted(name for name, w in listed.items() if w["state"] == "Running")
    assert running == ["p0", "p1", "p2", "p3"]
    assert [w["gpus"] for w in listed.values() if w["state"] == "Running"] == [0.25] * 4
    # The GPU is all held (and so is the queue's share of the cluster: it is capped by it).
    assert listed["p4"]["state"] == "Pending"
    assert "nvidia.com/gpu" in (listed["p4"]["message"] or "")
    node_view = client.get("/api/v1/nodes/t4-0").json()
    assert node_view["devices"][0]["allocated"] == 1.0
    harness.close()


def test_shares_asking_a_unit_are_no_more_than_the_node_advertises(tmp_path: Path) -> None:
    harness = make_harness(tmp_path, nodes=[make_node("one", gpus=1, taints=(GPU_TAINT,))])
    client = harness.client("team-a")
    docs = []
    for i in range(4):
        doc = pod_doc(f"s{i}", gpus=1)
        doc["metadata"]["annotations"]["gpufleet.dev/gpu-milli"] = "250"
        docs.append(doc)
    assert client.post("/api/v1/workloads", content=as_yaml(*docs), headers=YAML).status_code == 201
    harness.advance(60)
    listed = client.get("/api/v1/workloads").json()
    assert [w["gpus"] for w in listed if w["state"] == "Running"] == [1.0]
    harness.close()
