"""Issue 11 item 9: a placed pod shows and is charged the same GPU amount in every view of the
control plane (API list and describe, ``get workloads``, ``describe``, ``top nodes``, queue
usage, the cluster summary and history, Prometheus metrics): what it holds on its device. A
pod that waits holds nothing and shows what it asks for, as written (``0.25+10Gi``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.cli.remote import use_http
from gpufleet.testing.builders import GPU_TAINT, make_node
from gpufleet.testing.service import ServiceHarness, as_yaml, make_harness
from tests.cli.test_remote import as_

HELD = 0.667  # 10 GiB of a 15 GiB T4: more than the 250 milli-GPU it also asks for


def share_doc(name: str) -> dict[str, Any]:
    """A quarter of a GPU and 10 GiB of its memory (gpufleet's own share: no nvidia.com/gpu
    the kubelet counts, so it is a share on any node; see tests of item 8 for the others)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {
                "gpufleet.dev/gpu-milli": "250",
                "gpufleet.dev/gpu-memory": "10Gi",
                "gpufleet.dev/expected-runtime": "1h",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }


@pytest.fixture
def t4(env: Path, tmp_path: Path) -> Iterator[ServiceHarness]:
    """One T4 (15 GiB); ``infer`` runs on it, holding 0.667 of it, and ``infer-2``, the same,
    waits (two do not fit in one device)."""
    node = make_node("t4-0", model="T4", gpus=1, gpu_memory=15 * 1024, taints=(GPU_TAINT,))
    harness = make_harness(tmp_path, nodes=[node])
    client = TestClient(harness.app)
    with use_http(lambda _: client):
        submitted = as_(harness, "team-a", "submit", "-f", "-", input=as_yaml(share_doc("infer")))
        assert submitted.code == 0, submitted.err
        harness.advance(60)
        later = as_(harness, "team-a", "submit", "-f", "-", input=as_yaml(share_doc("infer-2")))
        assert later.code == 0, later.err
        harness.advance(60)
        yield harness
    client.close()
    harness.close()


def test_a_placed_share_shows_and_is_charged_what_it_holds_everywhere(t4: ServiceHarness) -> None:
    api = t4.client("admin")
    listed = {w["name"]: w for w in api.get("/api/v1/workloads").json()}
    assert (listed["infer"]["state"], listed["infer"]["gpus"]) == ("Running", HELD)
    detail = api.get("/api/v1/workloads/team-a/infer").json()
    assert detail["gpus"] == HELD
    assert (detail["pod_views"][0]["gpus"], detail["pod_views"][0]["gpu_share"]) == (HELD, HELD)
    node = api.get("/api/v1/nodes/t4-0").json()
    assert (node["gpus_allocated"], node["devices"][0]["allocated"]) == (HELD, HELD)
    queue = api.get("/api/v1/queues/team-a").json()
    assert queue["usage"]["nvidia.com/gpu"] == HELD
    assert api.get("/api/v1/cluster").json()["gpus_allocated"] == HELD
    t4.plane.book.sample(t4.plane.now())
    assert api.get("/api/v1/history").json()["points"][-1]["gpu_allocation"] == HELD
    metrics = api.get("/metrics").text
    assert f'gpufleet_allocated_gpus{{model="T4",queue="team-a"}} {HELD}' in metrics
    usage = f'gpufleet_queue_resource_usage{{queue="team-a",resource="nvidia.com/gpu"}} {HELD}'
    assert usage in metrics

    # The CLI prints the same numbers.
    mine = as_(t4, "team-a", "get", "workloads")
    assert mine.rows("infer ")[0].startswith(f"infer Pod team-a Running 1/1 {HELD} 0.25+10Gi ")
    described = as_(t4, "team-a", "describe", "workload", "infer")
    assert described.rows("GPUs:") == [f"GPUs: {HELD} held (asks 0.25+10Gi)"]
    assert described.rows("Scheduled")[0].endswith(f"bound to t4-0 GPU 0 ({HELD} each)")
    (pod_row,) = (r.split() for r in described.rows("t4-0") if r.startswith("infer Running"))
    assert pod_row[4:8] == [f"{HELD}", "-", f"{HELD}", "0.25+10Gi"]  # share, MIG, held, asks
    top = as_(t4, "admin", "top", "nodes")
    assert f"{HELD}/1" in top.rows("t4-0")[0]
    queues = as_(t4, "admin", "get", "queues")
    assert queues.rows("team-a")[0].split()[4] == f"{HELD}"


def test_a_waiting_share_shows_its_request_not_a_charge(t4: ServiceHarness) -> None:
    api = t4.client("admin")
    waiting = api.get("/api/v1/workloads/team-a/infer-2").json()
    assert (waiting["state"], waiting["gpus"], waiting["gpu_request"]) == (
        "Pending",
        0.0,
        "0.25+10Gi",
    )
    assert waiting["pod_views"][0]["gpu_request"] == "0.25+10Gi"
    row = as_(t4, "team-a", "get", "workloads").rows("infer-2")[0]
    assert row.startswith("infer-2 Pod team-a Pending 0/1 0 0.25+10Gi ")
