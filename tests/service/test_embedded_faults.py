"""``gpufleet serve`` (embedded) plays a scenario's GPU faults over its scaled clock: at its time
the device is withdrawn from scheduling, its XID shows on /metrics, and it comes back after
``recoverAfter``; a core rebuilt meanwhile (a queue changed) still withholds it. It plays its
spot interruptions too: the notice, the pod lost and the node gone are told as events."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.backends.sim.live import health_message
from gpufleet.model.events import DeviceHealthChanged
from gpufleet.model.faults import GpuFault
from gpufleet.model.node_faults import NodeFault, NodeFaultKind, NodeSelection
from gpufleet.service.plane_book import ServeOptions
from gpufleet.testing.service import (
    ServiceHarness,
    as_yaml,
    gpu_nodes,
    make_harness,
    pod_doc,
    queue_doc,
)

YAML = {"Content-Type": "application/yaml"}
NODE = "a100-0"


def harness_with(tmp_path: Path, *faults: GpuFault) -> ServiceHarness:
    options = ServeOptions(speed=60.0, faults=faults)
    return make_harness(tmp_path, gpu_nodes(1, gpus=2), options=options, tenants=("team-a",))


def xids(harness: ServiceHarness) -> dict[str, float]:
    """DCGM_FI_DEV_XID_ERRORS by GPU index (of whole GPUs)."""
    text = harness.client("metrics").get("/metrics").text
    return {
        sample.labels["gpu"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "DCGM_FI_DEV_XID_ERRORS"
        for sample in family.samples
    }


def submit(harness: ServiceHarness, name: str) -> None:
    response = harness.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(pod_doc(name, runtime="1h")), headers=YAML
    )
    assert response.status_code == 201, response.text


def gpus_of(harness: ServiceHarness, name: str) -> tuple[int, ...] | None:
    record = harness.plane.records[f"team-a/Pod/{name}"]
    placement = next(iter(record.pods.values())).placement
    return None if placement is None else placement.gpu_indices


def healthy(harness: ServiceHarness) -> list[bool]:
    """What GET /api/v1/nodes says of each GPU's health."""
    (node,) = harness.client("team-a").get("/api/v1/nodes").json()
    return [device["healthy"] for device in node["devices"]]


def withheld(harness: ServiceHarness) -> tuple[int, ...]:
    table = harness.plane.core.table
    return table.unhealthy_indices(table.row_of[NODE])


def test_a_fault_withdraws_its_gpu_shows_its_xid_and_recovers(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, GpuFault(at=120, node=NODE, gpu=0, xid=79, recover_after=600))
    harness.advance(60)
    assert withheld(harness) == ()
    assert xids(harness) == {"0": 0.0, "1": 0.0}
    harness.advance(61)  # t=121: GPU 0 has failed
    assert withheld(harness) == (0,)
    assert xids(harness) == {"0": 79.0, "1": 0.0}
    assert healthy(harness) == [False, True]  # the node map marks it
    submit(harness, "first")
    harness.advance(1)
    assert gpus_of(harness, "first") == (1,)  # not on the failed GPU
    submit(harness, "second")
    harness.advance(1)
    assert gpus_of(harness, "second") is None  # only the failed GPU is free: it waits
    harness.advance(600)  # t=723: GPU 0 is back
    assert withheld(harness) == ()
    assert gpus_of(harness, "second") == (0,)
    assert xids(harness)["0"] == 79.0  # the last XID seen, as dcgm-exporter keeps it
    assert healthy(harness) == [True, True]
    harness.close()


def test_a_rebuilt_core_still_withholds_a_failed_gpu(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, GpuFault(at=10, node=NODE, gpu=1, xid=48))
    harness.advance(20)
    assert withheld(harness) == (1,)
    put = harness.client("admin").put("/api/v1/queues", json=queue_doc("team-b", 2))
    assert put.status_code == 200, put.text  # the core is rebuilt for the new queue
    assert withheld(harness) == (1,)
    submit(harness, "a")
    submit(harness, "b")
    harness.advance(1)
    assert (gpus_of(harness, "a"), gpus_of(harness, "b")) == ((0,), None)
    harness.close()


def test_fault_times_count_from_the_planes_start(tmp_path: Path) -> None:
    """A plane restarted at simulated t=300 plays a fault at 120 at t=420."""
    harness = harness_with(tmp_path)
    harness.advance(300)
    harness.plane.stop()  # keeps the clock
    harness.close()
    harness.options = ServeOptions(speed=60.0, faults=(GpuFault(120, NODE, 0, 79),))
    harness.open()
    assert harness.plane.now() == pytest.approx(300.0)
    harness.advance(110)
    assert withheld(harness) == ()
    harness.advance(20)
    assert withheld(harness) == (0,)
    harness.close()


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (
            DeviceHealthChanged("n1", (2,), ((2, "XID 79: GPU has fallen off the bus"),)),
            "node n1: GPU 2 (XID 79: GPU has fallen off the bus) unhealthy",
        ),
        (DeviceHealthChanged("n1", (0, 3)), "node n1: GPU 0, 3 unhealthy"),
        (DeviceHealthChanged("n1", ()), "node n1: all GPUs healthy"),
    ],
    ids=["with-reason", "two-without", "recovered"],
)
def test_health_messages(event: DeviceHealthChanged, message: str) -> None:
    assert health_message(event) == message


# ---------------------------------------------------------------- nodes lost under serve
def interrupted(metrics_text: str) -> float:
    return next(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        if family.name == "gpufleet_interrupted_pods"
        for sample in family.samples
        if sample.name.endswith("_total")
    )


def test_a_spot_interruption_is_told_as_events_and_the_pod_runs_again_on_the_new_node(
    tmp_path: Path,
) -> None:
    reclaim = NodeFault(
        NodeFaultKind.SPOT_INTERRUPTION, "reclaim", NodeSelection(names=(NODE,)),
        times=(300.0,), notice=120.0, back_after=600.0,
    )  # fmt: skip
    options = ServeOptions(speed=60.0, node_faults=(reclaim,))
    harness = make_harness(tmp_path, gpu_nodes(1, gpus=2), options=options, tenants=("team-a",))
    submit(harness, "first")
    harness.advance(1)
    assert gpus_of(harness, "first") == (0,)
    harness.advance(300)  # t=301: told; the node is cordoned, the pod runs on
    reasons = [(e.workload, e.reason) for e in harness.store.events()]
    assert ("team-a/Pod/first", "NodeNotice") in reasons
    assert gpus_of(harness, "first") == (0,)
    harness.advance(120)  # t=421: the node is gone with its pod
    events = harness.store.events()
    lost = [e for e in events if e.reason == "Interrupted"]
    assert [e.message for e in lost] == [f"pod first lost with node {NODE} (spot interruption)"]
    assert any(e.workload is None and e.reason == "NodeLost" for e in events)
    assert gpus_of(harness, "first") is None
    assert harness.client("team-a").get("/api/v1/nodes").json() == []
    assert interrupted(harness.client("metrics").get("/metrics").text) == 1.0
    harness.advance(600)  # t=1021: a new node of its name; the pod runs again
    assert gpus_of(harness, "first") == (0,)
    assert [e.reason for e in harness.store.events() if e.workload is None][-1] == "NodeJoined"
