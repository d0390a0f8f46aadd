"""Per-tenant limits through the API: a submission that would take a tenant over its unfinished
workloads or pods gets 403 'exceeded quota' naming the limit (and frees up as workloads
finish); writes over the tenant's rate get 429 with Retry-After, reads do not count, and
admins are not held unless told."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.service.limits import TenantLimits
from gpufleet.service.plane_book import ServeOptions
from gpufleet.testing.service import ServiceHarness, as_yaml, job_doc, make_harness, pod_doc

YAML = {"Content-Type": "application/yaml"}
FEW = TenantLimits(max_active_workloads=2, max_active_pods=4, write_rate=None)


def limited(tmp_path: Path, limits: TenantLimits) -> ServiceHarness:
    return make_harness(tmp_path, options=ServeOptions(speed=60.0, limits=limits))


def post(harness: ServiceHarness, who: str, *documents: dict[str, object]) -> tuple[int, str]:
    response = harness.client(who).post(
        "/api/v1/workloads", content=as_yaml(*documents), headers=YAML
    )
    return response.status_code, response.json().get("message", "")


@pytest.mark.parametrize(
    ("held", "submitted", "status", "message"),
    [
        ([pod_doc("a")], [pod_doc("b")], 201, ""),
        ([pod_doc("a"), pod_doc("b")], [pod_doc("c")], 403,
         "tenant 'team-a' has 2 unfinished workloads and this adds 1, over its limit of 2 "
         "(gpufleet serve --max-active-workloads)"),
        ([pod_doc("a")], [pod_doc("b"), pod_doc("c")], 403, "over its limit of 2"),
        ([job_doc("j", 3, runtime="1h")], [job_doc("k", 2)], 403,
         "has 3 unfinished pods and this adds 2, over its limit of 4 "
         "(gpufleet serve --max-active-pods)"),
    ],
    ids=["under", "workloads-full", "request-over", "pods"],
)  # fmt: skip
def test_a_submission_over_a_tenants_limits_is_refused(
    tmp_path: Path,
    held: list[dict[str, object]],
    submitted: list[dict[str, object]],
    status: int,
    message: str,
) -> None:
    harness = limited(tmp_path, FEW)
    assert post(harness, "team-a", *held)[0] == 201
    code, said = post(harness, "team-a", *submitted)
    assert code == status, said
    assert message in said
    if status == 403:
        assert said.startswith("exceeded quota")
        dry = harness.client("team-a").post(
            "/api/v1/workloads?dry_run=true", content=as_yaml(*submitted), headers=YAML
        )
        assert dry.status_code == 403
        assert post(harness, "team-b", *submitted)[0] == 201  # another tenant is not held
        assert post(harness, "admin", pod_doc("x", namespace="team-a"), pod_doc("y"))[0] == 201


def test_a_finished_or_cancelled_workload_frees_its_place(tmp_path: Path) -> None:
    harness = limited(tmp_path, FEW)
    assert post(harness, "team-a", pod_doc("short", runtime="5m"), pod_doc("long"))[0] == 201
    assert post(harness, "team-a", pod_doc("c"))[0] == 403
    harness.advance(1)
    harness.advance(301)  # short has finished: one place free
    assert post(harness, "team-a", pod_doc("c"))[0] == 201
    assert post(harness, "team-a", pod_doc("d"))[0] == 403
    cancelled = harness.client("team-a").delete("/api/v1/workloads/team-a/long")
    assert cancelled.json()["state"] == "Cancelled"
    assert post(harness, "team-a", pod_doc("d"))[0] == 201


def test_admins_are_held_when_told(tmp_path: Path) -> None:
    harness = limited(tmp_path, TenantLimits(max_active_workloads=1, limit_admins=True))
    assert post(harness, "admin", pod_doc("a"))[0] == 201
    assert post(harness, "admin", pod_doc("b"))[0] == 403


def test_writes_over_the_rate_get_429_with_retry_after(tmp_path: Path) -> None:
    harness = limited(tmp_path, TenantLimits(write_rate=0.5, write_burst=3))
    codes = [post(harness, "team-a", pod_doc(f"p{i}"))[0] for i in range(3)]
    assert codes == [201, 201, 201]
    client = harness.client("team-a")
    refused = client.delete("/api/v1/workloads/team-a/p0")  # any write counts
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"
    assert refused.json()["error"] == "too_many_requests"
    assert "may write 0.5 times a second (bursts of 3)" in refused.json()["message"]
    for _ in range(10):  # reads are not writes
        assert client.get("/api/v1/workloads").status_code == 200
    assert post(harness, "team-b", pod_doc("q"))[0] == 201  # each tenant its own bucket
    assert post(harness, "admin", pod_doc("r"))[0] == 201
    harness.wall.now += 2.0
    assert post(harness, "team-a", pod_doc("p3"))[0] == 201
    assert post(harness, "team-a", pod_doc("p4"))[0] == 429


def test_a_refused_token_is_not_counted_against_anyone(tmp_path: Path) -> None:
    harness = limited(tmp_path, TenantLimits(write_rate=1.0, write_burst=1))
    nobody = harness.client("nobody")
    for _ in range(5):
        response = nobody.post(
            "/api/v1/workloads",
            content=as_yaml(pod_doc("p")),
            headers={**YAML, "Authorization": "Bearer gf_wrong"},
        )
        assert response.status_code == 401
    assert post(harness, "team-a", pod_doc("p"))[0] == 201
