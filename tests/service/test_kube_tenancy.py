"""Whose a pod is on Kubernetes (``serve --kubeconfig`` over the fake API server): never what a
label or an annotation anyone may write says. A pod naming another namespace's workload is not
filed under it and cannot delete it; gpufleet's own marks on a submission are refused; cancel
deletes only what gpufleet created, while its UID is the one it created; a request's YAML may
not hold aliases (a sub-kilobyte body that expands to a billion nodes)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpufleet.kube_client.api import PODS
from gpufleet.testing import job_objects as jo
from gpufleet.testing.service import alias_bomb, as_yaml, pod_doc
from tests.service import test_kube_plane
from tests.service.test_kube_plane import YAML, Cluster

cluster = test_kube_plane.cluster  # the plane over the fake API server (a fixture)
PYTORCH = "kubeflow.org/v1"


def foreign_pod(
    name: str,
    namespace: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod someone made with kubectl in ``namespace`` for gpufleet's scheduler, writing
    gpufleet's marks themselves."""
    doc = pod_doc(name, 1, namespace=namespace)
    doc["metadata"]["labels"].update(labels or {})
    doc["metadata"]["annotations"].update(annotations or {})
    doc["metadata"]["labels"].setdefault("gpufleet.dev/queue", "team-b")
    doc["spec"]["schedulerName"] = "gpufleet"
    return doc


def path(key: str) -> str:
    """The API path of a workload ``namespace/Kind/name``."""
    namespace, kind, name = key.split("/")
    return f"/api/v1/workloads/{namespace}/{name}?kind={kind}"


def keys(on: Cluster, who: str) -> list[str]:
    return [w["key"] for w in on.client(who).get("/api/v1/workloads").json()]


def submit_pytorch_job(on: Cluster) -> None:
    answer = on.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(jo.pytorch_job("pt", 1)), headers=YAML
    )
    assert answer.status_code == 201, answer.text
    assert on.server.get(PYTORCH, "PyTorchJob", "pt", "team-a") is not None


def test_a_pod_naming_another_namespaces_workload_is_not_filed_under_it(cluster: Cluster) -> None:
    submit_pytorch_job(cluster)
    cluster.server.create(
        foreign_pod(
            "evil", "team-b",
            labels={"gpufleet.dev/tenant": "team-b"},
            annotations={"gpufleet.dev/workload": "team-a/PyTorchJob/pt",
                         "gpufleet.dev/kind": "PyTorchJob"},
        )
    )  # fmt: skip
    cluster.until(lambda: "team-b/Pod/evil" in cluster.plane.records, "the pod in the book")
    assert keys(cluster, "team-b") == ["team-b/Pod/evil"]
    assert cluster.plane.records["team-a/PyTorchJob/pt"].tenant == "team-a"
    assert [p.pod.name for p in cluster.plane.records["team-a/PyTorchJob/pt"].pods.values()] != [
        "evil"
    ]
    attacker = cluster.client("team-b")
    assert cluster.client("team-a").get(path("team-a/PyTorchJob/pt")).status_code == 200
    assert attacker.get(path("team-a/PyTorchJob/pt")).status_code == 404
    assert attacker.delete(path("team-a/PyTorchJob/pt")).status_code == 404
    # Its own pod is not gpufleet's to delete either: it did not create it.
    refused = attacker.delete(path("team-b/Pod/evil"))
    assert refused.status_code == 403
    assert "not created through gpufleet" in refused.json()["message"]
    assert cluster.server.get(PYTORCH, "PyTorchJob", "pt", "team-a") is not None
    assert cluster.server.get("v1", "Pod", "evil", "team-b") is not None


def test_an_owner_annotation_cannot_delete_what_gpufleet_never_made(cluster: Cluster) -> None:
    coredns = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "coredns", "namespace": "kube-system"},
        "spec": {"replicas": 1, "template": {"spec": pod_doc("dns", 0)["spec"]}},
    }
    cluster.server.create(coredns)
    cluster.server.create(
        foreign_pod(
            "dns-1", "team-b",
            labels={"gpufleet.dev/tenant": "team-b"},
            annotations={"gpufleet.dev/owner": "Deployment/coredns",
                         "gpufleet.dev/kind": "Deployment",
                         "gpufleet.dev/workload": "kube-system/Deployment/coredns"},
        )
    )  # fmt: skip
    cluster.until(lambda: "team-b/Pod/dns-1" in cluster.plane.records, "the pod in the book")
    assert not any(key.startswith("kube-system/") for key in cluster.plane.records)
    for who in ("team-b", "admin"):
        client = cluster.client(who)
        assert client.delete(path("kube-system/Deployment/coredns")).status_code == 404
        assert client.delete(path("team-b/Pod/dns-1")).status_code == 403
    assert cluster.server.get("apps/v1", "Deployment", "coredns", "kube-system") is not None


def test_a_tenant_label_does_not_give_that_tenant_the_pod(cluster: Cluster) -> None:
    cluster.server.create(
        foreign_pod("borrowed", "team-c", labels={"gpufleet.dev/tenant": "team-a"})
    )
    cluster.server.create(foreign_pod("mapped", "team-b", labels={"gpufleet.dev/tenant": "team-a"}))
    cluster.until(
        lambda: {"team-c/Pod/borrowed", "team-b/Pod/mapped"} <= cluster.plane.records.keys(),
        "the pods in the book",
    )
    assert keys(cluster, "team-a") == []
    # A namespace the admin's map names is its tenant's; any other is the cluster's.
    assert keys(cluster, "team-b") == ["team-b/Pod/mapped"]
    assert cluster.plane.records["team-c/Pod/borrowed"].tenant == "cluster"
    assert cluster.client("team-a").get(path("team-c/Pod/borrowed")).status_code == 404


def _pod_with(field: str, key: str, value: str = "x") -> dict[str, Any]:
    doc = pod_doc("p", 1)
    doc["metadata"][field][key] = value
    return doc


def _deployment_with(field: str, key: str) -> dict[str, Any]:
    template = {"metadata": {field: {key: "x"}}, "spec": pod_doc("x")["spec"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "template": template},
    }


def _pytorch_job_with_label(key: str) -> dict[str, Any]:
    job = jo.pytorch_job("pt", 1)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"].setdefault("metadata", {})[
        "labels"
    ] = {key: "team-a"}
    return job


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        pytest.param(
            _pod_with("annotations", "gpufleet.dev/workload", "team-a/PyTorchJob/pt"),
            "metadata.annotations[gpufleet.dev/workload]", id="pod-workload-annotation",
        ),
        pytest.param(
            _pod_with("labels", "gpufleet.dev/tenant", "team-b"),
            "metadata.labels[gpufleet.dev/tenant]", id="pod-tenant-label",
        ),
        pytest.param(
            _pod_with("annotations", "gpufleet.dev/gpu-index", "3"),
            "metadata.annotations[gpufleet.dev/gpu-index]", id="pod-binding-annotation",
        ),
        pytest.param(
            _pod_with("annotations", "gpufleet.dev/owner-of-it"),
            "metadata.annotations[gpufleet.dev/owner-of-it]", id="pod-unknown-mark",
        ),
        pytest.param(
            _deployment_with("annotations", "gpufleet.dev/owner"),
            "spec.template.metadata.annotations[gpufleet.dev/owner]", id="deployment-template",
        ),
        pytest.param(
            _pytorch_job_with_label("gpufleet.dev/tenant"),
            "spec.pytorchReplicaSpecs.Worker.template.metadata.labels[gpufleet.dev/tenant]",
            id="pytorchjob-template",
        ),
    ],
)  # fmt: skip
def test_gpufleets_own_marks_on_a_submission_are_refused(
    cluster: Cluster, doc: dict[str, Any], field: str
) -> None:
    answer = cluster.client("team-a").post("/api/v1/workloads", content=as_yaml(doc), headers=YAML)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field
    assert "is set by gpufleet, not by a submission" in answer.json()["message"]
    name = doc["metadata"]["name"]
    api = {"Pod": "v1", "Deployment": "apps/v1", "PyTorchJob": PYTORCH}[doc["kind"]]
    assert cluster.server.get(api, doc["kind"], name, "team-a") is None


def test_user_marks_are_kept_and_the_queue_written_is_the_one_checked(cluster: Cluster) -> None:
    """The documented inputs pass; a template's queue label that differs from its object's
    (the object's is the one read and checked) does not reach the pods."""
    deployment = _deployment_with("labels", "gpufleet.dev/queue")
    deployment["metadata"]["labels"] = {"gpufleet.dev/queue": "team-a"}
    template = deployment["spec"]["template"]
    template["metadata"]["labels"] = {
        "gpufleet.dev/queue": "team-b",
        "gpufleet.dev/idle-exempt": "1",
    }
    template["metadata"]["annotations"] = {"gpufleet.dev/expected-runtime": "1h"}
    answer = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(deployment), headers=YAML
    )
    assert answer.status_code == 201, answer.text
    written = cluster.server.get("apps/v1", "Deployment", "web", "team-a")
    assert written is not None
    labels = written["spec"]["template"]["metadata"]["labels"]
    assert labels["gpufleet.dev/queue"] == "team-a"
    assert labels["gpufleet.dev/idle-exempt"] == "1"
    annotations = written["spec"]["template"]["metadata"]["annotations"]
    assert annotations["gpufleet.dev/expected-runtime"] == "1h"


def test_cancel_deletes_nothing_once_the_uid_changed(cluster: Cluster) -> None:
    client = cluster.client("team-a")
    assert client.post(
        "/api/v1/workloads", content=as_yaml(pod_doc("p", 1)), headers=YAML
    ).status_code == 201  # fmt: skip
    cluster.until(lambda: "team-a/Pod/p" in cluster.plane.records, "the pod in the book")
    first = cluster.server.get("v1", "Pod", "p", "team-a")
    assert first is not None
    # Deleted outside gpufleet, and another pod of that name made in its place.
    cluster.server.delete("v1", "Pod", "p", "team-a")
    again = copy.deepcopy(first)
    for gone in ("uid", "resourceVersion", "creationTimestamp"):
        again["metadata"].pop(gone, None)
    again["spec"].pop("nodeName", None)
    cluster.server.create(again)
    second = cluster.server.get("v1", "Pod", "p", "team-a")
    assert second is not None
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    cached = cluster.plane.scheduler.backend.objects[PODS]
    cluster.until(
        lambda: (
            (cached.get("team-a/p") or {}).get("metadata", {}).get("uid")
            == second["metadata"]["uid"]
            and "team-a/Pod/p" in cluster.plane.records
        ),
        "the new pod in the book",
    )
    answer = client.delete(path("team-a/Pod/p"))
    assert answer.status_code == 409, answer.text
    assert "its UID changed" in answer.json()["message"]
    found = cluster.server.get("v1", "Pod", "p", "team-a")
    assert found is not None
    assert found["metadata"]["uid"] == second["metadata"]["uid"]


def test_a_yaml_alias_bomb_is_refused_before_it_is_built(cluster: Cluster) -> None:
    body = alias_bomb()
    assert len(body) < 1024
    answer = cluster.client("team-a").post("/api/v1/workloads", content=body, headers=YAML)
    assert answer.status_code == 422
    assert "YAML aliases are not accepted in a request" in answer.json()["message"]
    assert cluster.server.get("v1", "Pod", "bomb", "team-a") is None
