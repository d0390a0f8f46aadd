"""Every endpoint of the control plane's API, through the real app (httpx against ASGI):
answers, authorisation failures and malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.model.times import simulated_time
from gpufleet.service.auth import AdmissionRules, TenantRules
from gpufleet.service.plane_book import ServeOptions
from gpufleet.testing import job_objects as jo
from gpufleet.testing.builders import make_node
from gpufleet.testing.service import (
    ServiceHarness,
    as_yaml,
    gpu_nodes,
    job_doc,
    make_harness,
    pod_doc,
    priority_class_doc,
    queue_doc,
)

YAML = {"Content-Type": "application/yaml"}


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    return make_harness(
        tmp_path,
        queues=[queue_doc("team-a", 8, namespaces=["team-a"]), queue_doc("team-b", 8)],
        priority_classes=[priority_class_doc("high", 1000)],
    )


def submit(client: TestClient, *documents: dict[str, object]) -> list[dict[str, object]]:
    response = client.post("/api/v1/workloads", content=as_yaml(*documents), headers=YAML)
    assert response.status_code == 201, response.text
    accepted: list[dict[str, object]] = response.json()["accepted"]
    return accepted


# ---------------------------------------------------------------------------------- probes
def test_probes_need_no_token(harness: ServiceHarness) -> None:
    client = harness.client("nobody")
    assert client.get("/readyz").status_code == 503  # the loop is not started in this harness
    assert client.get("/openapi.json").json()["info"]["title"] == "gpufleet"
    harness.plane.start()
    try:
        assert client.get("/readyz").status_code == 200
        assert client.get("/healthz").text == "ok\n"
    finally:
        harness.plane.stop()
    metrics = harness.client("metrics").get("/metrics").text
    assert 'gpufleet_cluster_gpus{model="A100"} 16.0' in metrics
    assert 'gpufleet_queue_nominal_quota{queue="team-a",resource="nvidia.com/gpu"} 8.0' in metrics


@pytest.mark.parametrize(
    ("who", "status"),
    [
        ("nobody", 401),  # no token
        ("team-a", 403),  # a tenant's: the page names every tenant's pods
        ("admin", 200),
        ("metrics", 200),  # Prometheus' scrape token
    ],
    ids=["no-token", "tenant", "admin", "metrics-token"],
)
def test_metrics_are_served_to_the_admin_and_a_metrics_token_only(
    harness: ServiceHarness, who: str, status: int
) -> None:
    submit(harness.client("team-b"), pod_doc("secret-project", 1))
    harness.advance(1)
    response = harness.client(who).get("/metrics")
    assert response.status_code == status, response.text
    assert ("secret-project" in response.text) == (status == 200)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/whoami"),
        ("GET", "/api/v1/workloads"),
        ("GET", "/api/v1/nodes"),
        ("GET", "/api/v1/cluster"),
        ("GET", "/api/v1/stream"),
        ("POST", "/api/v1/workloads"),
        ("GET", "/api/v1/tokens"),
    ],
    ids=lambda value: value if value.startswith("/") else None,
)
def test_a_metrics_token_reads_nothing_but_metrics(
    harness: ServiceHarness, method: str, path: str
) -> None:
    response = harness.client("metrics").request(method, path)
    assert response.status_code == 403, response.text
    assert "metrics token reads /metrics only" in response.text


def test_metrics_count_workloads_and_requests(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, pod_doc("p", 2))
    harness.advance(1)
    metrics = harness.client("admin").get("/metrics").text
    assert 'gpufleet_workloads{state="Running"} 1.0' in metrics
    assert 'gpufleet_allocated_gpus{model="A100",queue="team-a"} 2.0' in metrics
    assert 'gpufleet_api_request_seconds_count{method="POST",route="/api/v1/workloads"' in metrics


# ---------------------------------------------------------------------------------- auth
@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        ({}, 401, "authentication required"),
        (
            {"Authorization": "Bearer gf_wrong"},
            401,
            "invalid token: this server's database holds no such token (tokens live in",
        ),
        ({"Authorization": "Basic abc"}, 401, "authentication required"),
    ],
    ids=["no-token", "unknown-token", "wrong-scheme"],
)
def test_unauthenticated_requests_are_refused(
    harness: ServiceHarness, headers: dict[str, str], status: int, message: str
) -> None:
    client = harness.client("nobody")
    for path in ("/api/v1/workloads", "/api/v1/queues", "/api/v1/nodes", "/api/v1/cluster"):
        response = client.get(path, headers=headers)
        assert response.status_code == status
        assert response.json()["error"] == "unauthorized"
        assert message in response.json()["message"]
        assert response.headers["www-authenticate"] == "Bearer"


def test_token_in_query_is_refused_outside_the_stream(harness: ServiceHarness) -> None:
    # only the event stream takes ?token= (tests/api/test_front_door.py)
    client = harness.client("nobody")
    token = harness.tokens["team-a"]
    assert client.get(f"/api/v1/whoami?token={token}").status_code == 401


def test_whoami(harness: ServiceHarness) -> None:
    assert harness.client("team-a").get("/api/v1/whoami").json() == {
        "tenant": "team-a",
        "role": "tenant",
        "queues": ["team-a"],
        "namespaces": ["team-a"],
    }
    admin = harness.client("admin").get("/api/v1/whoami").json()
    assert admin["role"] == "admin"
    assert admin["queues"] == []


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/v1/queues", queue_doc("x", 1)),
        ("DELETE", "/api/v1/queues/team-a", None),
        ("PUT", "/api/v1/priorityclasses", priority_class_doc("x", 5)),
        ("POST", "/api/v1/tokens?tenant=team-c", None),
    ],
    ids=["put-queue", "delete-queue", "put-priority-class", "create-token"],
)
def test_admin_endpoints_refuse_tenants(
    harness: ServiceHarness, method: str, path: str, body: dict[str, object] | None
) -> None:
    content = json.dumps(body) if body is not None else None
    response = harness.client("team-a").request(
        method, path, content=content, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert "not an admin" in response.json()["message"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (pod_doc("p", queue="team-b"), "may not submit to queue 'team-b'"),
        (pod_doc("p", namespace="team-b"), "may not use namespace 'team-b'"),
    ],
    ids=["other-queue", "other-namespace"],
)
def test_tenant_cannot_submit_outside_its_queues(
    harness: ServiceHarness, document: dict[str, object], message: str
) -> None:
    response = harness.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(document), headers=YAML
    )
    assert response.status_code == 403
    assert message in response.json()["message"]
    assert harness.client("admin").get("/api/v1/workloads").json() == []


def test_tenant_sees_only_its_own_workloads(harness: ServiceHarness) -> None:
    submit(harness.client("team-a"), pod_doc("mine"))
    submit(harness.client("team-b"), pod_doc("theirs"))
    harness.advance(1)
    team_a = harness.client("team-a")
    assert [w["key"] for w in team_a.get("/api/v1/workloads").json()] == ["team-a/Pod/mine"]
    for path in (
        "/api/v1/workloads/team-b/theirs",
        "/api/v1/workloads/team-b/theirs/explain",
        "/api/v1/events?workload=team-b/theirs",
    ):
        assert team_a.get(path).status_code == 404
    assert team_a.delete("/api/v1/workloads/team-b/theirs").status_code == 404
    admin = harness.client("admin").get("/api/v1/workloads").json()
    assert sorted(w["key"] for w in admin) == ["team-a/Pod/mine", "team-b/Pod/theirs"]
    devices = [d for n in team_a.get("/api/v1/nodes").json() for d in n["devices"]]
    holders = {p for d in devices for p in d["pods"]}
    assert holders == {"team-a/Pod/mine", "(other tenant)"}


# ---------------------------------------------------------------------------------- input
@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        ("kind: Pod\nmetadata: [", "application/yaml", 422, "request"),
        ("{", "application/json", 422, "invalid JSON"),
        ("", "application/yaml", 422, "empty"),
        ("kind: Pod", "application/xml", 415, "unsupported Content-Type"),
        (as_yaml(queue_doc("q", 1)), "application/yaml", 422, "manage queues"),
        (
            as_yaml(pod_doc("p", queue="team-a", priority_class="missing")),
            "application/yaml",
            422,
            "priority class 'missing' is not defined",
        ),
        (
            as_yaml(pod_doc("p", queue="nope")),
            "application/yaml",
            422,
            "queue 'nope' is not defined",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 3}",
            "application/yaml",
            422,
            "spec.containers",
        ),
    ],
    ids=[
        "broken-yaml",
        "broken-json",
        "empty",
        "xml",
        "queue-as-workload",
        "missing-priority-class",
        "missing-queue",
        "bad-field",
    ],
)
def test_malformed_submissions_are_refused_whole(
    harness: ServiceHarness, body: str, content_type: str, status: int, message: str
) -> None:
    admin = harness.client("admin")
    response = admin.post("/api/v1/workloads", content=body, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text
    assert message in response.json()["message"]
    assert admin.get("/api/v1/workloads").json() == []


def test_body_over_the_limit_is_refused(harness: ServiceHarness) -> None:
    big = as_yaml(pod_doc("p")) + "#" + "x" * (1 << 20)
    response = harness.client("team-a").post("/api/v1/workloads", content=big, headers=YAML)
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"


def test_one_bad_object_refuses_the_whole_request(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    response = client.post(
        "/api/v1/workloads",
        content=as_yaml(pod_doc("good"), pod_doc("bad", priority_class="missing")),
        headers=YAML,
    )
    assert response.status_code == 422
    assert client.get("/api/v1/workloads").json() == []


def test_duplicate_workload_is_a_conflict(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, pod_doc("p"))
    response = client.post("/api/v1/workloads", content=as_yaml(pod_doc("p")), headers=YAML)
    assert response.status_code == 409
    assert "exists already" in response.json()["message"]


def test_json_list_and_dry_run(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    body = json.dumps([pod_doc("a"), pod_doc("b")])
    response = client.post(
        "/api/v1/workloads?dry_run=true",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 201
    assert [w["key"] for w in response.json()["accepted"]] == ["team-a/Pod/a", "team-a/Pod/b"]
    assert client.get("/api/v1/workloads").json() == []


# ---------------------------------------------------------------------------------- rules
def test_admission_rules(tmp_path: Path) -> None:
    rules = AdmissionRules(
        require_gpu_toleration=True,
        max_gpus_per_workload={"team-a": 4},
        tenants={"team-a": TenantRules(gpu_models=frozenset({"A100"}))},
    )
    harness = make_harness(tmp_path, options=ServeOptions(rules=rules))
    client = harness.client("team-a")
    too_big = client.post("/api/v1/workloads", content=as_yaml(job_doc("j", 3, 2)), headers=YAML)
    assert too_big.status_code == 422
    assert "allows at most 4 per workload" in too_big.json()["message"]
    untolerated = client.post(
        "/api/v1/workloads", content=as_yaml(pod_doc("p", tolerate=False)), headers=YAML
    )
    assert untolerated.status_code == 422
    assert "does not tolerate the taint nvidia.com/gpu" in untolerated.json()["message"]
    other_model = pod_doc("h")
    other_model["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "H100"}
    forbidden = client.post("/api/v1/workloads", content=as_yaml(other_model), headers=YAML)
    assert forbidden.status_code == 403
    assert "may not use GPU model(s) H100" in forbidden.json()["message"]
    submit(client, pod_doc("ok", 4))


# ---------------------------------------------------------------------------------- reading
def test_workload_lifecycle_describe_explain_cancel(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    [accepted] = submit(client, job_doc("train", 2, 2, runtime="1h"))
    assert accepted["state"] == "Pending"
    assert accepted["kind"] == "Job"
    harness.advance(1)
    detail = client.get("/api/v1/workloads/team-a/train").json()
    assert detail["state"] == "Running"
    assert detail["pods_running"] == 2
    assert all(len(p["gpu_indices"]) == 2 and p["node"] for p in detail["pod_views"])
    assert [e["reason"] for e in detail["events"]] == ["Submitted", "Scheduled", "Scheduled"]
    held = {p for n in client.get("/api/v1/nodes").json() for d in n["devices"] for p in d["pods"]}
    assert held == {"team-a/Job/train"}
    running = client.get("/api/v1/workloads/team-a/train/explain").json()
    assert running["state"] == "Running"
    assert running["message"] == f"running since {simulated_time(detail['started'])}"
    assert running["message"].startswith("running since t=")
    submit(client, job_doc("wait", 4, 4))  # 16 GPUs: the quota (8 + borrowing) cannot hold it
    harness.advance(1)
    why = client.get("/api/v1/workloads/team-a/wait/explain").json()
    assert why["state"] == "Pending"
    assert why["position"] == 1
    assert why["waiting_for"] in ("quota", "capacity")
    assert why["message"]
    listed = {w["key"]: w for w in client.get("/api/v1/workloads?state=pending").json()}
    assert list(listed) == ["team-a/Job/wait"]
    assert listed["team-a/Job/wait"]["message"] == why["message"]
    cancelled = client.delete("/api/v1/workloads/team-a/train")
    assert cancelled.json()["state"] == "Cancelled"
    harness.advance(1)
    deleted = client.delete("/api/v1/workloads/team-a/train")  # a finished one: deleted
    assert deleted.json()["state"] == "Cancelled"
    assert client.get("/api/v1/workloads/team-a/train").status_code == 404
    harness.advance(1)
    nodes = client.get("/api/v1/nodes").json()
    assert all("team-a/Job/train" not in d["pods"] for n in nodes for d in n["devices"])
    assert client.get("/api/v1/workloads/team-a/missing").status_code == 404


def test_workloads_finish_after_their_run_time(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, pod_doc("short", runtime="5m"))
    harness.advance(1)
    harness.advance(301)
    detail = client.get("/api/v1/workloads/team-a/short").json()
    assert detail["state"] == "Succeeded"
    assert detail["events"][-1]["reason"] == "Completed"
    again = client.post("/api/v1/workloads", content=as_yaml(pod_doc("short")), headers=YAML)
    assert again.status_code == 409  # the name is taken until the finished one is deleted
    assert client.delete("/api/v1/workloads/team-a/short").json()["state"] == "Succeeded"
    assert client.get("/api/v1/workloads/team-a/short").status_code == 404
    submit(client, pod_doc("short"))
    harness.restart()
    assert harness.client("team-a").get("/api/v1/workloads/team-a/short").json()["state"] == (
        "Pending"
    )


def test_nodes_show_devices_and_shares(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, pod_doc("half-1", gpu_milli=500), pod_doc("half-2", gpu_milli=500))
    harness.advance(1)
    nodes = client.get("/api/v1/nodes").json()
    assert len(nodes) == 4
    shared = [d for n in nodes for d in n["devices"] if d["pods"]]
    assert len(shared) == 1  # both halves pack onto one device
    assert shared[0]["allocated"] == 1.0
    assert shared[0]["shared"] is True
    one = client.get(f"/api/v1/nodes/{nodes[0]['name']}").json()
    assert one["name"] == nodes[0]["name"]
    assert one["taints"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert client.get("/api/v1/nodes/nope").status_code == 404
    cluster = client.get("/api/v1/cluster").json()
    assert cluster["gpus"] == 16
    assert cluster["gpus_allocated"] == 1.0
    assert cluster["workloads_running"] == 2


def test_queues_show_usage_and_borrowing(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, job_doc("big", 5, 2))  # 10 GPUs: 2 borrowed beyond the nominal 8
    harness.advance(1)
    queues = {q["name"]: q for q in client.get("/api/v1/queues").json()}
    assert queues["team-a"]["usage"]["nvidia.com/gpu"] == 10.0
    assert queues["team-a"]["borrowed"]["nvidia.com/gpu"] == 2.0
    assert queues["team-a"]["running"] == 1
    assert queues["team-b"]["nominal"] == {"nvidia.com/gpu": 8.0}
    assert client.get("/api/v1/queues/team-b").json()["name"] == "team-b"
    assert client.get("/api/v1/queues/none").status_code == 404


def test_history_and_events(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    submit(client, pod_doc("p", 4))
    harness.advance(60)
    harness.advance(60)
    points = client.get("/api/v1/history").json()["points"]
    assert points[-1]["gpu_allocation"] == 0.25
    assert points[-1]["running"] == 1
    since = client.get(f"/api/v1/history?since={points[-1]['time']}").json()["points"]
    assert since == []
    reasons = [e["reason"] for e in client.get("/api/v1/events").json()]
    assert reasons == ["Submitted", "Scheduled"]


# ---------------------------------------------------------------------------------- admin
def test_admin_manages_queues_and_priority_classes(harness: ServiceHarness) -> None:
    admin = harness.client("admin")
    response = admin.put("/api/v1/queues", content=as_yaml(queue_doc("team-c", 4)), headers=YAML)
    assert response.status_code == 200, response.text
    assert response.json()["nominal"] == {"nvidia.com/gpu": 4.0}
    bad = queue_doc("child", 20, parent="team-c")
    refused = admin.put("/api/v1/queues", content=as_yaml(bad), headers=YAML)
    assert refused.status_code == 422
    assert "child" in refused.json()["message"]
    assert "child" not in {q["name"] for q in admin.get("/api/v1/queues").json()}
    cycle = admin.put(
        "/api/v1/queues", content=as_yaml(queue_doc("team-c", 4, parent="team-c")), headers=YAML
    )
    assert cycle.status_code == 422
    pc = admin.put(
        "/api/v1/priorityclasses", content=as_yaml(priority_class_doc("low", 1)), headers=YAML
    )
    assert pc.json() == {
        "name": "low",
        "value": 1,
        "preemption_policy": "PreemptLowerPriority",
        "global_default": False,
    }
    assert [c["name"] for c in admin.get("/api/v1/priorityclasses").json()] == ["high", "low"]
    assert admin.delete("/api/v1/queues/team-c").status_code == 204
    assert admin.delete("/api/v1/queues/team-c").status_code == 404


def test_a_queues_kueue_settings_go_in_and_come_back(harness: ServiceHarness) -> None:
    admin = harness.client("admin")
    doc = queue_doc("team-c", 4)
    doc["spec"] |= {
        "queueingStrategy": "StrictFIFO",
        "gpuModels": ["H100", "A100"],
        "preemption": {"reclaimWithinCohort": "LowerPriority", "withinQueue": "Never"},
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor"},
    }
    response = admin.put("/api/v1/queues", content=as_yaml(doc), headers=YAML)
    assert response.status_code == 200, response.text
    view = admin.get("/api/v1/queues/team-c").json()
    assert view["queueing_strategy"] == "StrictFIFO"
    assert view["gpu_models"] == ["H100", "A100"]
    assert view["preemption"] == {
        "withinQueue": "Never",
        "reclaimWithinCohort": "LowerPriority",
        "borrowWithinCohort": "Never",
    }
    assert view["flavor_fungibility"] == {
        "whenCanBorrow": "TryNextFlavor",
        "whenCanPreempt": "TryNextFlavor",
    }
    doc["spec"]["preemption"] = {"reclaimWithinCohort": "Sometimes"}
    refused = admin.put("/api/v1/queues", content=as_yaml(doc), headers=YAML)
    assert refused.status_code == 422
    assert "spec.preemption.reclaimWithinCohort" in refused.text


def test_queue_in_use_cannot_be_deleted(harness: ServiceHarness) -> None:
    submit(harness.client("team-a"), pod_doc("p"))
    response = harness.client("admin").delete("/api/v1/queues/team-a")
    assert response.status_code == 409
    assert "used by workload team-a/Pod/p" in response.json()["message"]


def test_admin_creates_tokens(harness: ServiceHarness) -> None:
    admin = harness.client("admin")
    made = admin.post("/api/v1/tokens?tenant=team-c&role=tenant&queue=team-b").json()
    assert made["token"].startswith("gf_")
    client = harness.client("nobody")
    client.headers["Authorization"] = f"Bearer {made['token']}"
    assert client.get("/api/v1/whoami").json()["queues"] == ["team-b"]
    assert admin.post("/api/v1/tokens?tenant=bad name").status_code == 422


def test_unknown_route_is_json(harness: ServiceHarness) -> None:
    response = harness.client("admin").get("/api/v1/nothing")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


# ------------------------------------------------------------- names are unique per kind
def test_a_job_and_a_pytorchjob_of_one_name_are_two_workloads(harness: ServiceHarness) -> None:
    """As in Kubernetes: both are accepted; the name alone is ambiguous (409 listing the
    kinds), the kind picks one, for describe, explain, events and delete alike."""
    client = harness.client("team-a")
    submit(client, job_doc("sweep", 1, 1))
    [second] = submit(client, jo.pytorch_job("sweep", 1))
    assert (second["key"], second["kind"]) == ("team-a/PyTorchJob/sweep", "PyTorchJob")
    harness.advance(1)
    keys = [w["key"] for w in client.get("/api/v1/workloads").json()]
    assert keys == ["team-a/Job/sweep", "team-a/PyTorchJob/sweep"]
    for method, path in (
        ("GET", "/api/v1/workloads/team-a/sweep"),
        ("GET", "/api/v1/workloads/team-a/sweep/explain"),
        ("GET", "/api/v1/events?workload=team-a/sweep"),
        ("DELETE", "/api/v1/workloads/team-a/sweep"),
    ):
        response = client.request(method, path)
        assert response.status_code == 409, (path, response.text)
        assert response.json()["message"] == (
            "workload team-a/sweep is ambiguous: it names a Job and a PyTorchJob; give the "
            "kind (?kind=Job, or on the command line job/sweep or --kind Job)"
        )
    job = client.get("/api/v1/workloads/team-a/sweep", params={"kind": "job"}).json()
    assert (job["kind"], len(job["pod_views"])) == ("Job", 1)
    events = client.get("/api/v1/events", params={"workload": "team-a/PyTorchJob/sweep"})
    assert events.json()[0]["reason"] == "Submitted"
    deleted = client.delete("/api/v1/workloads/team-a/sweep", params={"kind": "PyTorchJob"})
    assert deleted.json()["state"] == "Cancelled"
    assert client.get("/api/v1/workloads/team-a/sweep?kind=Job").json()["state"] == "Running"
    assert client.get("/api/v1/workloads/team-a/sweep?kind=RayJob").status_code == 404


def test_an_admin_workload_naming_no_queue_goes_to_the_namespace_default(
    harness: ServiceHarness,
) -> None:
    """As a tenant's go to its own queue: an admin's go to the namespace's default queue, or
    to the implicit default queue (no quota of its own: what the queues leave idle)."""
    admin = harness.client("admin")
    [in_team_a] = submit(admin, pod_doc("seeded", namespace="team-a"))
    [elsewhere] = submit(admin, pod_doc("anywhere", namespace="dev"))
    [unnamed] = submit(admin, pod_doc("plain"))
    assert [w["queue"] for w in (in_team_a, elsewhere, unnamed)] == ["team-a", "default", "default"]
    harness.advance(1)
    assert admin.get("/api/v1/workloads/dev/anywhere").json()["state"] == "Running"


def test_a_gpu_model_no_node_has_is_named_in_the_explanation(tmp_path: Path) -> None:
    """Issue 11 item 20: not '5 GPU model not allowed' counting CPU-only nodes."""
    nodes = [*gpu_nodes(2), make_node("cpu-0", gpus=0)]
    served = make_harness(tmp_path, nodes=nodes, queues=[queue_doc("team-a", 8)])
    client = served.client("team-a")
    doc = pod_doc("b200", 1, namespace="team-a")
    doc["metadata"]["annotations"]["gpufleet.dev/gpu-models"] = "B200"
    submit(client, doc)
    served.advance(1)
    why = client.get("/api/v1/workloads/team-a/b200/explain").json()
    assert why["state"] == "Pending"
    assert why["message"] == (
        "team-a/b200 can never fit on this cluster: no node has GPU model B200. 0/3 nodes are "
        "available: 2 GPU model not allowed, 1 Insufficient nvidia.com/gpu."
    )
