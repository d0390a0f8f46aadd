"""``gpufleet serve`` (embedded) exposes the simulated GPUs' telemetry: dcgm-exporter's names on
``/metrics`` for every simulated device and MIG instance, attributed to the simulated pods, the
scheduler's allocation beside them, an XID the world records, and the node API's real use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.metrics import families as f
from gpufleet.model.node import Taint, TaintEffect
from gpufleet.telemetry.profiles import USAGE_PROFILE_ANNOTATION
from gpufleet.testing.builders import make_node
from gpufleet.testing.service import ServiceHarness, as_yaml, make_harness, pod_doc, queue_doc

YAML = {"Content-Type": "application/yaml"}
GPU_TAINT = Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE)


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    nodes = [
        make_node("h100-0", gpus=4, model="H100", gpu_memory=80 * 1024, taints=(GPU_TAINT,),
                  mig={3: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}),
        make_node("t4-0", gpus=2, model="T4", gpu_memory=15 * 1024, taints=(GPU_TAINT,)),
        make_node("cpu-0", gpus=0),
    ]  # fmt: skip
    return make_harness(tmp_path, nodes, queues=[queue_doc("team-a", 16, namespaces=["team-a"])])


def scrape(harness: ServiceHarness) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = harness.client("metrics").get("/metrics").text
    return {
        family.name: [(s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def mig_pod(name: str) -> dict[str, Any]:
    doc = pod_doc(name, gpus=0, runtime="10h")
    doc["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": 1}
    return doc


def test_every_simulated_gpu_has_dcgm_series_attributed_to_its_pods(
    harness: ServiceHarness,
) -> None:
    train = pod_doc("train", gpus=2, namespace="team-a", runtime="10h")
    notebook = pod_doc("nb", gpu_milli=500, namespace="team-a", runtime="10h")
    notebook["metadata"]["annotations"][USAGE_PROFILE_ANNOTATION] = "training"
    response = harness.client("team-a").post(
        "/api/v1/workloads",
        content=as_yaml(train, notebook, mig_pod("serve")),
        headers=YAML,
    )
    assert response.status_code == 201, response.text
    harness.advance(1)
    harness.advance(900)
    got = scrape(harness)
    for family in f.DEVICES:
        assert family.name in got
    util = got["DCGM_FI_DEV_GPU_UTIL"]
    devices = {(labels["Hostname"], labels["gpu"]) for labels, _ in util}
    assert devices == {("h100-0", str(i)) for i in range(4)} | {("t4-0", "0"), ("t4-0", "1")}
    by_pod = {labels.get("pod"): (labels, value) for labels, value in util}
    labels, value = by_pod["train"]
    assert labels["namespace"] == "team-a"
    assert labels["container"] == "main"
    assert labels["modelName"] in ("H100", "T4")
    assert labels["device"] == f"nvidia{labels['gpu']}"
    assert value > 20.0  # a training pod past its warm-up works its GPU
    # The MIG pod's instance: its own framebuffer series with the instance's labels.
    fb = {labels.get("pod"): labels for labels, _ in got["DCGM_FI_DEV_FB_USED"]}
    assert fb["serve"]["GPU_I_PROFILE"] == "1g.10gb"
    assert fb["serve"]["gpu"] == "3"
    # Allocation beside use: the training GPUs whole, the notebook's half.
    allocated = {
        (labels["Hostname"], labels["gpu"], labels.get("GPU_I_ID")): value
        for labels, value in got["gpufleet_gpu_allocated"]
    }
    assert sorted(v for k, v in allocated.items() if k[2] is None and v) == [0.25, 0.5, 1.0, 1.0]


def test_an_xid_the_world_records_shows_on_its_device(harness: ServiceHarness) -> None:
    harness.plane.world.xids.record("t4-0", 1, 79)
    xids = {
        (labels["Hostname"], labels["gpu"]): (value, labels["err_msg"])
        for labels, value in scrape(harness)["DCGM_FI_DEV_XID_ERRORS"]
    }
    assert xids[("t4-0", "1")] == (79.0, "GPU has fallen off the bus")
    assert xids[("t4-0", "0")] == (0.0, "No Error")


def test_the_node_api_shows_real_use_beside_allocation(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    response = client.post(
        "/api/v1/workloads", content=as_yaml(pod_doc("train", gpus=1, runtime="10h")), headers=YAML
    )
    assert response.status_code == 201
    harness.advance(1)
    harness.advance(900)
    nodes = {n["name"]: n for n in client.get("/api/v1/nodes").json()}
    devices = [d for n in nodes.values() for d in n["devices"]]
    busy = [d for d in devices if d["pods"]]
    assert len(busy) == 1
    assert busy[0]["allocated"] == 1.0
    assert 0.2 < busy[0]["utilization"] <= 1.0
    assert busy[0]["memory_used_mib"] > 0
    assert all(d["utilization"] == 0.0 for d in devices if not d["pods"] and not d["mig"])


def test_each_running_pod_has_kube_state_metrics_start_time_in_wall_time(
    harness: ServiceHarness,
) -> None:
    # Two pods placed at different instants of the cluster's clock, one that cannot be placed.
    client = harness.client("team-a")
    first = pod_doc("first", gpus=1, namespace="team-a", runtime="10h")
    response = client.post("/api/v1/workloads", content=as_yaml(first), headers=YAML)
    assert response.status_code == 201, response.text
    harness.advance(1)
    harness.advance(600)
    later = pod_doc("later", gpus=1, namespace="team-a", runtime="10h")
    never = pod_doc("never", gpus=64, namespace="team-a", runtime="10h")
    response = client.post("/api/v1/workloads", content=as_yaml(later, never), headers=YAML)
    assert response.status_code == 201, response.text
    harness.advance(1)
    starts = {
        (labels["namespace"], labels["pod"]): (labels, value)
        for labels, value in scrape(harness)[f.KUBE_POD_START_TIME.name]
    }
    assert set(starts) == {("team-a", "first"), ("team-a", "later")}
    for labels, _ in starts.values():
        assert set(labels) == {"namespace", "pod"}  # kube-state-metrics' labels
    observatory = harness.plane.observatory
    assert observatory is not None
    wall = observatory.wall_time
    # Unix seconds: the wall time of each start, apart by the cluster's seconds over the speed.
    assert starts[("team-a", "first")][1] == pytest.approx(wall(0.0) + 1 / harness.options.speed)
    apart = starts[("team-a", "later")][1] - starts[("team-a", "first")][1]
    assert apart == pytest.approx(601 / harness.options.speed)
    assert starts[("team-a", "first")][1] > 1.7e9
