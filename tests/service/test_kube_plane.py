"""``gpufleet serve --kubeconfig``: the control plane's API over a Kubernetes cluster (the fake
API server speaking HTTP, so the real client and the real scheduler run)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.backends.kube.scheduler import SchedulerOptions
from gpufleet.kube_client.api import KubeApi, RateLimiter
from gpufleet.service.auth import AdmissionRules, TenantRules
from gpufleet.service.kube_plane import KubeControlPlane
from gpufleet.service.plane_book import ServeOptions, create_token
from gpufleet.service.store import Store
from gpufleet.service.tenant_identity import TenantIdentity
from gpufleet.testing import job_objects as jo
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.service import as_yaml, pod_doc
from tests.backends.kube.harness import Harness
from tests.fakes.kube_api import FakeApiServer
from tests.fakes.kube_api.authz import Caller

YAML = {"Content-Type": "application/yaml"}
TENANTS = ("team-a", "team-b")


class Cluster:
    """The plane over the fake API server, its scheduler turned by the test (no loop thread):
    waits are on the scheduler's events (:class:`~tests.backends.kube.harness.Harness`)."""

    def __init__(self, server: FakeApiServer, plane: KubeControlPlane, tokens: dict[str, str]):
        self.server = server
        self.plane = plane
        self.tokens = tokens
        self.app = create_app(plane)
        self.scheduler = Harness(server, plane.scheduler)

    def client(self, who: str) -> TestClient:
        client = TestClient(self.app)
        client.headers["Authorization"] = f"Bearer {self.tokens[who]}"
        return client

    def until(self, check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
        """Turn the scheduler until ``check`` holds of the plane's book, rebuilt each time."""

        def refreshed() -> bool:
            self.plane.refresh()
            return check()

        self.scheduler.until(refreshed, timeout, what)

    def settle(self) -> None:
        """Turn the scheduler until a turn changes nothing; the book rebuilt from that."""
        self.scheduler.settle()
        self.plane.refresh()

    def workload(self, who: str, key: str) -> dict[str, Any]:
        found: dict[str, Any] = self.client(who).get(f"/api/v1/workloads/{key}").json()
        return found


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The plane with ``ServeOptions(policy="bestfit")``, or the options a test gives
    (``indirect`` parametrization)."""
    serve_options: ServeOptions = getattr(request, "param", ServeOptions(policy="bestfit"))
    with FakeApiServer() as server:
        for crd in [*ko.crds(), *jo.operator_crds()]:
            server.create(crd)
        for i in range(2):
            server.create(ko.gpu_node(f"gpu-{i}", gpus=4))
        server.create(ko.queue("team-a", {"nvidia.com/gpu": 6}, namespaces=["team-a"]))
        server.create(ko.queue("team-b", {"nvidia.com/gpu": 2}, namespaces=["team-b"]))
        store = Store(tmp_path / "gpufleet.db")
        tokens = {
            "admin": create_token(store, "admin", "admin"),
            "team-a": create_token(store, "team-a", "tenant"),
            "team-b": create_token(store, "team-b", "tenant"),
        }
        api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
        options = SchedulerOptions(policy="bestfit", leader_elect=False, status_every_s=0.0)
        # The admin's map of whose each namespace is (for pods gpufleet did not create).
        rules = AdmissionRules(tenants={t: TenantRules(namespaces=(t,)) for t in TENANTS})
        serve = dataclasses.replace(serve_options, rules=rules)
        plane = KubeControlPlane(api, store, serve, options)
        plane.scheduler.backend.start()
        assert plane.scheduler.backend.wait_synced(10)
        cluster = Cluster(server, plane, tokens)
        # Submissions are checked against the queues of the scheduler's core, which its first
        # turn builds from the synced caches: a test must not submit before that.
        cluster.settle()
        assert plane.scheduler.core is not None
        try:
            yield cluster
        finally:
            plane.stop()
            cluster.scheduler.close()
            store.close()


def test_submitted_pod_is_written_scheduled_and_described(cluster: Cluster) -> None:
    client = cluster.client("team-a")
    response = client.post("/api/v1/workloads", content=as_yaml(pod_doc("p", 2)), headers=YAML)
    assert response.status_code == 201, response.text
    assert response.json()["accepted"][0]["key"] == "team-a/Pod/p"
    written = cluster.server.get("v1", "Pod", "p", "team-a")
    assert written is not None
    assert written["spec"]["schedulerName"] == "gpufleet"
    assert written["metadata"]["labels"]["gpufleet.dev/tenant"] == "team-a"
    assert written["metadata"]["labels"]["gpufleet.dev/queue"] == "team-a"
    cluster.until(lambda: cluster.workload("team-a", "team-a/p")["state"] == "Running", "a bind")
    detail = cluster.workload("team-a", "team-a/p")
    [pod] = detail["pod_views"]
    assert pod["node"] in ("gpu-0", "gpu-1")
    assert len(pod["gpu_indices"]) == 2
    assert [e["reason"] for e in detail["events"]][:2] == ["Submitted", "Scheduled"]
    why = client.get("/api/v1/workloads/team-a/p/explain").json()["message"]
    assert re.fullmatch(r"running since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", why), why
    summary = client.get("/api/v1/cluster").json()
    assert summary["backend"] == "kubernetes"
    assert summary["gpus"] == 8
    assert summary["gpus_allocated"] == 2.0
    queues = {q["name"]: q for q in client.get("/api/v1/queues").json()}
    assert queues["team-a"]["usage"]["nvidia.com/gpu"] == 2.0


def test_gang_of_pods_with_a_pod_group_runs_whole(cluster: Cluster) -> None:
    members = []
    for i in range(2):
        doc = pod_doc(f"w{i}", 2)
        doc["metadata"]["labels"]["gpufleet.dev/pod-group"] = "train"
        members.append(doc)
    group = {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train"},
        "spec": {"minMember": 2},
    }
    response = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(group, *members), headers=YAML
    )
    assert response.status_code == 201, response.text
    assert [w["key"] for w in response.json()["accepted"]] == ["team-a/PodGroup/train"]
    cluster.until(
        lambda: cluster.workload("team-a", "team-a/train").get("pods_running") == 2, "the gang"
    )
    assert cluster.server.get("gpufleet.dev/v1alpha1", "PodGroup", "train", "team-a")


def test_refused_write_leaves_nothing_behind(cluster: Cluster) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"spec": pod_doc("x", 1)["spec"]},
        },
    }
    # This API server serves no batch/v1 Jobs: the PodGroup made for the gang goes again.
    response = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(job), headers=YAML
    )
    assert response.status_code == 422
    assert "the API server refused it" in response.json()["message"]
    assert cluster.server.get("gpufleet.dev/v1alpha1", "PodGroup", "job-j", "team-a") is None


def test_tenants_are_kept_apart(cluster: Cluster) -> None:
    refused = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(pod_doc("x", queue="team-b")), headers=YAML
    )
    assert refused.status_code == 403
    assert cluster.server.get("v1", "Pod", "x", "team-a") is None
    cluster.client("team-b").post("/api/v1/workloads", content=as_yaml(pod_doc("b")), headers=YAML)
    cluster.until(lambda: "team-b/Pod/b" in cluster.plane.records, "the pod in the book")
    assert cluster.client("team-a").get("/api/v1/workloads/team-b/b").status_code == 404
    assert [w["key"] for w in cluster.client("admin").get("/api/v1/workloads").json()] == [
        "team-b/Pod/b"
    ]


# ----------------------------------------------------------------------------- impersonation
TEAM_A_USER = "gpufleet:tenant:team-a"
TEAM_A_GROUPS = ("gpufleet:tenants", "gpufleet:tenant:team-a")


def writes(cluster: Cluster, pattern: str) -> list[Caller]:
    """The writes (not reads) the fake API server received whose path matches ``pattern``."""
    return [c for c in cluster.server.callers if c.method != "GET" and re.search(pattern, c.path)]


def test_a_tenants_objects_are_written_and_cancelled_as_the_tenant(cluster: Cluster) -> None:
    """Every write of team-a's gang (its PodGroup, its PyTorchJob) and of its cancel
    impersonates team-a; the API server then judges them by team-a's RBAC, not the plane's."""
    client = cluster.client("team-a")
    response = client.post(
        "/api/v1/workloads", content=as_yaml(jo.pytorch_job("pt", 1)), headers=YAML
    )
    assert response.status_code == 201, response.text
    assert client.delete("/api/v1/workloads/team-a/pt").status_code == 200
    written = writes(cluster, "/namespaces/team-a/")
    assert [(c.method, c.path.rsplit("/", 2)[-2:]) for c in written] == [
        ("POST", ["team-a", "podgroups"]),
        ("POST", ["team-a", "pytorchjobs"]),
        ("DELETE", ["pytorchjobs", "pt"]),
        ("DELETE", ["podgroups", "pytorchjob-pt"]),
    ]
    assert {(c.user, c.groups) for c in written} == {(TEAM_A_USER, TEAM_A_GROUPS)}


def test_an_admins_cancel_deletes_as_the_workloads_tenant(cluster: Cluster) -> None:
    cluster.client("team-a").post("/api/v1/workloads", content=as_yaml(pod_doc("p")), headers=YAML)
    cluster.until(lambda: "team-a/Pod/p" in cluster.plane.records, "the pod in the book")
    assert cluster.client("admin").delete("/api/v1/workloads/team-a/p").status_code == 200
    [delete] = [c for c in writes(cluster, "/pods/p$") if c.method == "DELETE"]
    assert (delete.user, delete.groups) == (TEAM_A_USER, TEAM_A_GROUPS)


def test_only_tenants_are_impersonated_the_admins_queues_are_the_planes(cluster: Cluster) -> None:
    cluster.client("team-a").post("/api/v1/workloads", content=as_yaml(pod_doc("p")), headers=YAML)
    queue = ko.queue("team-c", {"nvidia.com/gpu": 1})
    put = cluster.client("admin").put("/api/v1/queues", content=as_yaml(queue), headers=YAML)
    assert put.status_code == 200, put.text
    assert [c.user for c in writes(cluster, "/namespaces/team-a/pods$")] == [TEAM_A_USER]
    queue_writes = writes(cluster, "/queues")
    assert queue_writes
    assert {(c.user, c.groups) for c in queue_writes} == {(None, ())}


def test_a_tenant_without_rights_in_the_namespace_gets_the_api_servers_403(
    cluster: Cluster,
) -> None:
    """team-a may use namespace team-a in gpufleet, but the cluster's RBAC grants its
    identity nothing there: the API server refuses, gpufleet answers 403 naming the namespace
    and the identity, and nothing is written."""
    cluster.server.grant_writes(TEAM_A_USER, "team-a-sandbox")
    response = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(jo.pytorch_job("pt", 1)), headers=YAML
    )
    assert response.status_code == 403, response.text
    message = response.json()["message"]
    assert "in namespace 'team-a'" in message
    assert f"as user '{TEAM_A_USER}'" in message
    assert f'User "{TEAM_A_USER}" cannot create resource "podgroups"' in message
    assert cluster.server.list("gpufleet.dev/v1alpha1", "PodGroup", "team-a") == []
    assert cluster.server.list("kubeflow.org/v1", "PyTorchJob", "team-a") == []


def test_a_refusal_half_way_is_rolled_back_as_the_tenant(cluster: Cluster) -> None:
    """The gang's PodGroup is written, its PyTorchJob refused (Pod Security, say): the
    PodGroup is deleted again, as team-a."""
    cluster.server.fail_next("POST", "/pytorchjobs$", 403)
    response = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(jo.pytorch_job("pt", 1)), headers=YAML
    )
    assert response.status_code == 403, response.text
    assert "PyTorchJob team-a/pt" in response.json()["message"]
    assert (
        cluster.server.get("gpufleet.dev/v1alpha1", "PodGroup", "pytorchjob-pt", "team-a") is None
    )
    [rollback] = [c for c in writes(cluster, "/podgroups/") if c.method == "DELETE"]
    assert rollback.user == TEAM_A_USER


def test_a_cancel_the_tenants_rights_refuse_is_a_403(cluster: Cluster) -> None:
    cluster.client("team-a").post("/api/v1/workloads", content=as_yaml(pod_doc("p")), headers=YAML)
    cluster.until(lambda: "team-a/Pod/p" in cluster.plane.records, "the pod in the book")
    cluster.server.grant_writes(TEAM_A_USER, "team-a-sandbox")
    response = cluster.client("team-a").delete("/api/v1/workloads/team-a/p")
    assert response.status_code == 403, response.text
    assert 'in the namespace "team-a"' in response.json()["message"]
    assert cluster.server.get("v1", "Pod", "p", "team-a") is not None


@pytest.mark.parametrize(
    "cluster",
    [
        pytest.param(
            ServeOptions(
                policy="bestfit", tenant_identity=TenantIdentity("oidc:{tenant}", ("staff",))
            ),
            id="templates",
        ),
        pytest.param(ServeOptions(policy="bestfit", tenant_identity=None), id="turned-off"),
    ],
    indirect=True,
)
def test_the_impersonated_identity_is_configurable_or_off(cluster: Cluster) -> None:
    response = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(pod_doc("p")), headers=YAML
    )
    assert response.status_code == 201, response.text
    [write] = writes(cluster, "/namespaces/team-a/pods$")
    identity = cluster.plane.options.tenant_identity
    if identity is None:
        assert (write.user, write.groups) == (None, ())
    else:
        assert (write.user, write.groups) == ("oidc:team-a", ("staff",))


def _job_placed(**spec: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {**pod_doc("x", 1)["spec"], **spec}}},
    }


def _pytorch_worker_placed(**spec: str) -> dict[str, Any]:
    job = jo.pytorch_job("pt", 1)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(spec)
    return job


def _pod_placed(**spec: str) -> dict[str, Any]:
    pod = pod_doc("p", 1)
    pod["spec"].update(spec)
    return pod


Placed = Callable[..., dict[str, Any]]


@pytest.mark.parametrize(
    ("make", "spec", "field", "why"),
    [
        pytest.param(
            _pod_placed, {"nodeName": "gpu-0"}, "spec.nodeName", "bypasses gpufleet's scheduler",
            id="pod-node-name",
        ),
        pytest.param(
            _job_placed, {"nodeName": "gpu-0"}, "spec.template.spec.nodeName", "every quota",
            id="job-template-node-name",
        ),
        pytest.param(
            _pytorch_worker_placed, {"nodeName": "gpu-1"},
            "spec.pytorchReplicaSpecs.Worker.template.spec.nodeName", "may not name its node",
            id="operator-template-node-name",
        ),
        pytest.param(
            _pod_placed, {"schedulerName": "default-scheduler"}, "spec.schedulerName",
            "outside gpufleet's quotas", id="pod-default-scheduler",
        ),
        pytest.param(
            _job_placed, {"schedulerName": "volcano"}, "spec.template.spec.schedulerName",
            "'volcano'", id="job-other-scheduler",
        ),
    ],
)  # fmt: skip
def test_a_pod_that_places_itself_is_refused(
    cluster: Cluster, make: Placed, spec: dict[str, str], field: str, why: str
) -> None:
    """Refused with a 422 naming the field, nothing written; the same object that leaves its
    placement to gpufleet (naming it as its scheduler, or no scheduler) is accepted."""
    client = cluster.client("team-a")
    response = client.post("/api/v1/workloads", content=as_yaml(make(**spec)), headers=YAML)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert why in response.json()["message"]
    assert writes(cluster, "/namespaces/") == []
    ours = make(schedulerName="gpufleet")
    # A dry run: the fake API server serves no Jobs to write, and the check is gpufleet's.
    accepted = client.post(
        "/api/v1/workloads", params={"dry_run": True}, content=as_yaml(ours), headers=YAML
    )
    assert accepted.status_code == 201, accepted.text


def test_pending_pod_is_explained_and_cancel_deletes_it(cluster: Cluster) -> None:
    client = cluster.client("team-a")
    client.post("/api/v1/workloads", content=as_yaml(pod_doc("huge", 6)), headers=YAML)
    cluster.until(
        lambda: cluster.workload("team-a", "team-a/huge").get("message") is not None,
        "an explanation",
    )
    why = client.get("/api/v1/workloads/team-a/huge/explain").json()
    assert why["state"] == "Pending"
    assert why["waiting_for"] == "capacity"
    assert "nodes are available" in why["message"]
    assert client.delete("/api/v1/workloads/team-a/huge").json()["state"] == "Cancelled"
    assert cluster.server.get("v1", "Pod", "huge", "team-a") is None


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("ungate", "the pods' owner removes their scheduling gates (kubectl patch"),
        ("resume", """kubectl patch job NAME -p '{"spec":{"suspend":false}}'"""),
        ("suspend", """kubectl patch job NAME -p '{"spec":{"suspend":true}}'"""),
    ],
    ids=["ungate", "resume", "suspend"],
)
def test_the_owners_changes_are_the_clusters_own_updates(
    cluster: Cluster, action: str, message: str
) -> None:
    client = cluster.client("team-a")
    submitted = client.post("/api/v1/workloads", content=as_yaml(pod_doc("huge", 6)), headers=YAML)
    assert submitted.status_code == 201, submitted.text
    answer = client.post(f"/api/v1/workloads/team-a/huge/{action}")
    assert answer.status_code == 409
    assert message in answer.json()["message"]
    other = cluster.client("team-b").post(f"/api/v1/workloads/team-a/huge/{action}")
    assert other.status_code == 404


def test_admin_writes_queues_to_the_cluster(cluster: Cluster) -> None:
    admin = cluster.client("admin")
    queue = ko.queue("team-c", {"nvidia.com/gpu": 1})
    put = admin.put("/api/v1/queues", content=as_yaml(queue), headers=YAML)
    assert put.status_code == 200, put.text
    stored = cluster.server.get("gpufleet.dev/v1alpha1", "Queue", "team-c")
    assert stored is not None
    assert stored["spec"]["quota"] == {"nvidia.com/gpu": 1}
    # The answer, and the next read, show the write: the plane waited for its informers.
    assert put.json()["nominal"] == {"nvidia.com/gpu": 1.0}
    assert admin.get("/api/v1/queues/team-c").status_code == 200
    cycle = ko.queue("team-c", {"nvidia.com/gpu": 1}, parent="team-c")
    assert admin.put("/api/v1/queues", content=as_yaml(cycle), headers=YAML).status_code == 422
    assert (
        cluster.client("team-a")
        .put("/api/v1/queues", content=as_yaml(queue), headers=YAML)
        .status_code
        == 403
    )
    assert admin.delete("/api/v1/queues/team-c").status_code == 204
    assert admin.get("/api/v1/queues/team-c").status_code == 404


def test_queues_are_checked_as_files_are_and_a_bad_one_in_the_cluster_stops_nothing(
    cluster: Cluster,
) -> None:
    """PUT answers what ``place`` would say of the same tree; a bad Queue that reached the API
    server (an old CRD kept its unknown field) is set aside, and submissions go on."""
    admin = cluster.client("admin")
    orphan = ko.queue("team-c", {"nvidia.com/gpu": 1}, parent="nowhere")
    put = admin.put("/api/v1/queues", content=as_yaml(orphan), headers=YAML)
    assert put.status_code == 422
    assert "Queue team-c: spec.parent: parent 'nowhere' is not defined" in put.json()["message"]
    cluster.server.create(ko.queue("typo", {"nvidia.com/gpu": 1}, wieght=2))
    cluster.until(
        lambda: any(r.key == "typo" for r in cluster.plane.scheduler.backend.catalog.rejected),
        what="the bad queue set aside",
    )
    submitted = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(pod_doc("p", 1)), headers=YAML
    )
    assert submitted.status_code == 201, submitted.text
    other = admin.put("/api/v1/queues", content=as_yaml(ko.queue("team-d", {})), headers=YAML)
    assert other.status_code == 200, other.text


def test_finished_pod_is_listed_succeeded_and_deleted_on_request(cluster: Cluster) -> None:
    client = cluster.client("team-a")
    client.post("/api/v1/workloads", content=as_yaml(pod_doc("done", 1)), headers=YAML)
    cluster.until(lambda: cluster.workload("team-a", "team-a/done")["state"] == "Running", "a bind")
    pod = cluster.server.get("v1", "Pod", "done", "team-a")
    assert pod is not None
    pod["status"] = {**pod.get("status", {}), "phase": "Succeeded"}  # the kubelet's part
    cluster.server.update(pod)
    cluster.until(
        lambda: cluster.workload("team-a", "team-a/done")["state"] == "Succeeded", "the finish"
    )
    assert client.delete("/api/v1/workloads/team-a/done").json()["state"] == "Succeeded"
    assert cluster.server.get("v1", "Pod", "done", "team-a") is None
    cluster.until(
        lambda: client.get("/api/v1/workloads/team-a/done").status_code == 404, "it to go"
    )


# ----------------------------------------------------------------------------- operators' jobs
def _templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    if obj["kind"] == "MPIJob":
        return [r["template"] for r in spec["mpiReplicaSpecs"].values()]
    if obj["kind"] == "PyTorchJob":
        return [r["template"] for r in spec["pytorchReplicaSpecs"].values()]
    cluster = spec["rayClusterSpec"] if obj["kind"] == "RayJob" else spec
    return [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]
    ]


@pytest.mark.parametrize(
    ("obj", "api", "min_member"),
    [
        pytest.param(jo.mpi_job("mpi", 2), "kubeflow.org/v2beta1", 3, id="mpijob-launcher-counts"),
        pytest.param(jo.pytorch_job("pt", 2), "kubeflow.org/v1", 3, id="pytorchjob"),
        pytest.param(jo.ray_cluster("rc", {"g": 2}), "ray.io/v1", 3, id="raycluster"),
        pytest.param(jo.ray_job("rj", {"g": 2}), "ray.io/v1", 3, id="rayjob-submitter-later"),
    ],
)
def test_operator_jobs_are_written_as_gangs(
    cluster: Cluster, obj: dict[str, Any], api: str, min_member: int
) -> None:
    name = obj["metadata"]["name"]
    group_name = f"{obj['kind'].lower()}-{name}"  # a gang per kind and name
    response = cluster.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(obj), headers=YAML
    )
    assert response.status_code == 201, response.text
    written = cluster.server.get(api, obj["kind"], name, "team-a")
    assert written is not None
    for template in _templates(written):
        assert template["spec"]["schedulerName"] == "gpufleet"
        assert template["metadata"]["labels"]["gpufleet.dev/pod-group"] == group_name
        assert template["metadata"]["labels"]["gpufleet.dev/tenant"] == "team-a"
    group = cluster.server.get("gpufleet.dev/v1alpha1", "PodGroup", group_name, "team-a")
    assert group is not None
    assert group["spec"]["minMember"] == min_member
    assert cluster.client("team-a").delete(f"/api/v1/workloads/team-a/{name}").status_code == 200
    assert cluster.server.get(api, obj["kind"], name, "team-a") is None


def test_two_kinds_of_one_name_are_two_gangs(cluster: Cluster) -> None:
    """Names are unique per kind: a PyTorchJob and an MPIJob "sweep" are two objects, each
    with its own PodGroup (pytorchjob-sweep, mpijob-sweep), and the name alone is ambiguous."""
    client = cluster.client("team-a")
    for obj in (jo.pytorch_job("sweep", 1), jo.mpi_job("sweep", 1)):
        response = client.post("/api/v1/workloads", content=as_yaml(obj), headers=YAML)
        assert response.status_code == 201, response.text
    for group in ("pytorchjob-sweep", "mpijob-sweep"):
        assert cluster.server.get("gpufleet.dev/v1alpha1", "PodGroup", group, "team-a")
    assert client.get("/api/v1/workloads/team-a/sweep").status_code == 409
    found = client.get("/api/v1/workloads/team-a/sweep", params={"kind": "MPIJob"})
    assert found.json()["key"] == "team-a/MPIJob/sweep"


def test_pods_an_operator_makes_run_as_one_gang_with_their_progress(cluster: Cluster) -> None:
    job = jo.mpi_job("mpi", 2, gpus=2)
    client = cluster.client("team-a")
    assert client.post("/api/v1/workloads", content=as_yaml(job), headers=YAML).status_code == 201
    written = cluster.server.get("kubeflow.org/v2beta1", "MPIJob", "mpi", "team-a")
    assert written is not None
    launcher, worker = _templates(written)
    # Play the MPI operator: the workers first, then the launcher (the gang needs all three).
    for i in range(2):
        cluster.server.create(_pod_from(worker, f"mpi-worker-{i}", written))
    cluster.until(lambda: "team-a/MPIJob/mpi" in cluster.plane.records, "the workers in the book")
    cluster.settle()
    assert cluster.workload("team-a", "team-a/mpi")["pods_running"] == 0
    cluster.server.create(_pod_from(launcher, "mpi-launcher", written))
    cluster.until(
        lambda: cluster.workload("team-a", "team-a/mpi")["pods_running"] == 3, "the whole gang"
    )
    pod = cluster.server.get("v1", "Pod", "mpi-launcher", "team-a")
    assert pod is not None
    pod["status"] = {
        **pod.get("status", {}),
        "phase": "Running",
        "containerStatuses": [{"name": "main", "restartCount": 2}],
    }
    cluster.server.update(pod)
    cluster.until(
        lambda: cluster.workload("team-a", "team-a/mpi")["jobs"][0]["restarts"] == 2,
        "the launcher's restarts",
    )
    detail = cluster.workload("team-a", "team-a/mpi")
    assert detail["kind"] == "MPIJob"
    assert sorted(p["restarts"] for p in detail["pod_views"]) == [0, 0, 2]


def _pod_from(template: dict[str, Any], name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A pod of ``template`` as ``owner``'s controller makes it (its controller reference)."""
    metadata = template.get("metadata") or {}
    reference = {
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "controller": True,
    }  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": dict(metadata.get("labels") or {}),
            "annotations": dict(metadata.get("annotations") or {}),
            "ownerReferences": [reference],
        },
        "spec": template["spec"],
    }


def test_a_statefulset_is_written_and_its_config_map_is_not(cluster: Cluster) -> None:
    template = {"spec": pod_doc("x")["spec"]}
    stateful = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {"replicas": 1, "template": template},
    }
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {}}
    client = cluster.client("team-a")
    response = client.post("/api/v1/workloads", content=as_yaml(config, stateful), headers=YAML)
    assert response.status_code == 201, response.text
    assert response.json()["skipped"] == {"ConfigMap": 1}
    assert cluster.server.get("v1", "ConfigMap", "cfg", "team-a") is None  # never written
    written = cluster.server.get("apps/v1", "StatefulSet", "db", "team-a")
    assert written is not None
    pod_template = written["spec"]["template"]
    assert pod_template["metadata"]["annotations"]["gpufleet.dev/owner"] == "StatefulSet/db"
    cluster.server.create(_pod_from(pod_template, "db-0", written))  # the StatefulSet controller

    def seen() -> bool:  # the live pod, not only the record of the submission
        record = cluster.plane.records.get("team-a/StatefulSet/db-0")
        return record is not None and any(
            "gpufleet.dev/owner" in p.pod.annotations for p in record.pods.values()
        )

    cluster.until(seen, "the replica in the book")
    assert client.delete("/api/v1/workloads/team-a/db-0").status_code == 200
    assert cluster.server.get("apps/v1", "StatefulSet", "db", "team-a") is None
