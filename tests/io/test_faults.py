"""A scenario's GpuFault objects: read with the rest of the scenario, checked field by field,
and against the cluster's nodes."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.faults import check_faults, gpu_fault_from_object
from gpufleet.io.readers import read_scenario
from gpufleet.model.faults import GpuFault
from gpufleet.testing.builders import make_node
from tests.io.conftest import WriteFile


def fault_object(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": "xid"},
        "spec": {"at": "2m", "node": "n1", "gpu": 2, "xid": 79, **spec},
    }


def test_a_scenario_reads_its_faults_in_time_order(write_file: WriteFile) -> None:
    path = write_file(
        "scenario.yaml",
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: GpuFault
        metadata: {name: late}
        spec: {at: 1h, node: n1, gpu: 0, xid: 48}
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: GpuFault
        metadata: {name: early}
        spec: {at: 120, node: n1, gpu: 2, xid: 79, recoverAfter: 10m}
        """,
    )
    scenario = read_scenario(path)
    assert [(f.at, f.gpu, f.xid, f.recover_after) for f in scenario.faults] == [
        (120.0, 2, 79, 600.0),
        (3600.0, 0, 48, None),
    ]
    assert scenario.faults[0].name.endswith("GpuFault early")
    assert scenario.faults[0].reason == "XID 79: GPU has fallen off the bus"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"recover_after": 5}, "spec.recover_after: unknown field; it is recoverAfter"),
        ({"gpu": None}, "spec.gpu: required, but missing"),
        ({"gpu": -1}, "spec.gpu: expected a whole number >= 0, got -1"),
        ({"xid": "79x"}, "spec.xid: expected a whole number"),
        ({"at": "soon"}, "spec.at: expected seconds or a duration"),
        ({"recoverAfter": 0}, "spec.recoverAfter: expected more than 0 s"),
    ],
    ids=["snake-case", "missing-gpu", "negative-gpu", "bad-xid", "bad-time", "zero-recovery"],
)
def test_bad_faults_name_the_object_and_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as raised:
        gpu_fault_from_object(fault_object(**spec), "faults.yaml", "document 1 (line 1)")
    text = str(raised.value)
    assert "faults.yaml:document 1 (line 1), GpuFault xid" in text
    assert message in text


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (GpuFault(0, "n9", 0, 79, name="f.yaml, GpuFault a"), "spec.node: no node 'n9'"),
        (GpuFault(0, "n1", 4, 79, name="f.yaml, GpuFault a"), "spec.gpu: node 'n1' has no GPU 4"),
    ],
    ids=["unknown-node", "unknown-gpu"],
)
def test_faults_must_name_a_gpu_of_the_cluster(fault: GpuFault, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_faults([fault], [make_node("n1", gpus=4)])
    check_faults([GpuFault(0, "n1", 3, 79)], [make_node("n1", gpus=4)])
