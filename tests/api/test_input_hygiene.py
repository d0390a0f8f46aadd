"""What the API makes of real-world input: manifests mixing kinds (skipped, and said so), names
Kubernetes would refuse, and bodies that are big, binary or oddly shaped (short 4xx answers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.testing.service import (
    ServiceHarness,
    alias_bomb,
    as_yaml,
    make_harness,
    pod_doc,
    queue_doc,
)

YAML = {"Content-Type": "application/yaml"}
JSON = {"Content-Type": "application/json"}
CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {}}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}, "spec": {}}


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    return make_harness(tmp_path)


def post(client: TestClient, *documents: dict[str, Any]) -> Any:
    return client.post("/api/v1/workloads", content=as_yaml(*documents), headers=YAML)


def test_a_mix_is_accepted_and_says_what_was_skipped(harness: ServiceHarness) -> None:
    answer = post(harness.client("team-a"), CONFIG_MAP, pod_doc("p"), SERVICE, CONFIG_MAP)
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert [w["name"] for w in body["accepted"]] == ["p"]
    assert body["skipped"] == {"ConfigMap": 2, "Service": 1}


def test_nothing_but_skipped_kinds_is_a_422_naming_them(harness: ServiceHarness) -> None:
    answer = post(harness.client("team-a"), CONFIG_MAP, SERVICE)
    assert answer.status_code == 422
    assert answer.json()["message"] == (
        "request: no workloads in the request (one of Pod, Job, Deployment, StatefulSet, "
        "ReplicaSet, PyTorchJob, MPIJob, RayCluster, RayJob, PodGroup): skipped 2 objects of "
        "kinds with no scheduling meaning: ConfigMap (1), Service (1)"
    )


def test_a_kind_that_makes_pods_is_refused_not_skipped(harness: ServiceHarness) -> None:
    daemon = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    answer = post(harness.client("team-a"), pod_doc("p"), daemon)
    assert answer.status_code == 422
    assert "gpufleet does not read kind DaemonSet" in answer.json()["message"]
    assert answer.json()["field"] == "kind"


def test_a_statefulset_runs_its_replicas(harness: ServiceHarness) -> None:
    stateful = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "template": {"spec": pod_doc("x")["spec"]}},
    }
    answer = post(harness.client("team-a"), stateful)
    assert answer.status_code == 201, answer.text
    accepted = answer.json()["accepted"]
    assert [(w["name"], w["kind"]) for w in accepted] == [
        ("db-0", "StatefulSet"), ("db-1", "StatefulSet"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("train-🚀", "'🚀' is not allowed; got 'train-🚀'", id="emoji"),
        pytest.param("тренировка-1", "'т' is not allowed", id="unicode"),
        pytest.param("a" * 300, "at most 253 characters (it has 300)", id="too-long"),
    ],
)
def test_bad_workload_names_are_422(harness: ServiceHarness, name: str, message: str) -> None:
    answer = post(harness.client("team-a"), pod_doc(name))
    assert answer.status_code == 422
    assert answer.json()["field"] == "metadata.name"
    assert message in answer.json()["message"]
    assert len(answer.json()["message"]) < 700


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("Team-C", "'T' is not allowed; got 'Team-C'", id="uppercase"),
        pytest.param("t" * 64, "the value of the label gpufleet.dev/queue", id="label-value"),
    ],
)
def test_bad_queue_names_are_422(harness: ServiceHarness, name: str, message: str) -> None:
    answer = harness.client().put(
        "/api/v1/queues", content=as_yaml(queue_doc(name, 4)), headers=YAML
    )
    assert answer.status_code == 422
    assert answer.json()["field"] == "metadata.name"
    assert message in answer.json()["message"]


def test_bad_priority_class_names_are_422(harness: ServiceHarness) -> None:
    document = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "High"},
        "value": 10,
    }
    answer = harness.client().put(
        "/api/v1/priorityclasses", content=as_yaml(document), headers=YAML
    )
    assert answer.status_code == 422
    assert "'H' is not allowed" in answer.json()["message"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        pytest.param("tenant=тест", "'т' is not allowed", id="tenant-unicode"),
        pytest.param("tenant=a%20b", "' ' is not allowed", id="tenant-space"),
        pytest.param("tenant=ok&queue=Q", "'Q' is not allowed", id="queue"),
    ],
)
def test_token_names_are_checked(harness: ServiceHarness, query: str, message: str) -> None:
    answer = harness.client().post(f"/api/v1/tokens?{query}")
    assert answer.status_code == 422
    assert message in answer.json()["message"]


def test_a_huge_scalar_is_not_quoted_back(harness: ServiceHarness) -> None:
    body = "QUJD" * 200_000  # 800 KB of base64, under the 1 MiB body limit
    answer = harness.client("team-a").post("/api/v1/workloads", content=body, headers=YAML)
    assert answer.status_code == 422
    message = answer.json()["message"]
    assert len(message) < 500
    assert "... (800,000 characters)" in message


@pytest.mark.parametrize(
    ("body", "headers", "status", "message"),
    [
        pytest.param(bytes(range(256)), YAML, 422, "not UTF-8 text", id="binary"),
        pytest.param(b"- a\n- b\n", YAML, 422, "expected a Kubernetes object", id="list"),
        pytest.param(b"[" * 5000 + b"]" * 5000, JSON, 422, "invalid JSON", id="deep-json"),
        pytest.param(b'{"spec": ' + b"9" * 5000 + b"}", JSON, 422, "invalid JSON", id="huge-int"),
        pytest.param(b"metadata: {name: 2024-13-01}\n", YAML, 422, "month must be", id="date"),
        pytest.param(
            alias_bomb(), YAML, 422, "YAML aliases are not accepted in a request", id="alias-bomb"
        ),
        pytest.param(
            b"base: &b {name: p}\nmetadata: *b\n", YAML, 422, "YAML aliases are not accepted",
            id="one-alias",
        ),
        pytest.param(b"[" * 150 + b"]" * 150, JSON, 422, "nested deeper than 100", id="deep"),
        pytest.param(
            b"a: " + b"[" * 150 + b"]" * 150, YAML, 422, "nested deeper than 100", id="deep-yaml"
        ),
        pytest.param(
            b"[" + b"0," * 200_001 + b"0]", JSON, 422, "more than 200,000 values", id="wide"
        ),
    ],
)  # fmt: skip
def test_odd_bodies_get_short_answers(
    harness: ServiceHarness, body: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    answer = harness.client("team-a").post("/api/v1/workloads", content=body, headers=headers)
    assert answer.status_code == status, answer.text
    assert message in answer.json()["message"]
    assert len(answer.text) < 800


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        pytest.param(
            b"- a\n", 422, "expected one object (a mapping) in the body, got a list", id="list"
        ),
        pytest.param(b"when: 2024-13-01\n", 400, "cannot read the body", id="date"),
        pytest.param(json.dumps("x" * 5000).encode(), 422, "got 'xxxx", id="scalar"),
    ],
)
def test_odd_queue_bodies(harness: ServiceHarness, body: bytes, status: int, message: str) -> None:
    answer = harness.client().put("/api/v1/queues", content=body, headers=YAML)
    assert answer.status_code == status, answer.text
    assert message in answer.json()["message"]
    assert len(answer.text) < 600
