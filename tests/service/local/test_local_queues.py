"""The scheduler's queueing on the local machine, as on a cluster: a queue's quota holds a
tenant to its GPUs and says why one waits, and backfill runs a short job on GPUs reserved for a
gang owed them only when it is expected to end before the gang could start."""

from __future__ import annotations

from typing import Any

from gpufleet.io.kube.pods import EXPECTED_RUNTIME_ANNOTATION
from gpufleet.testing.local_service import TENANT, LocalHarness
from gpufleet.testing.service import queue_doc
from tests.service.local.test_local_plane import job, pod, printed, report, tenant_dir


def expecting(document: dict[str, Any], runtime: str) -> dict[str, Any]:
    """``document`` with its expected run time (the annotation the scheduler plans with)."""
    document["metadata"]["annotations"] = {EXPECTED_RUNTIME_ANNOTATION: runtime}
    return document


def waiting_reason(harness: LocalHarness, name: str) -> str:
    workload = harness.workload(name)
    return " ".join(str(workload.get(k) or "") for k in ("reason", "message", "why"))


def test_a_queue_holds_its_tenant_to_its_quota(harness: LocalHarness) -> None:
    admin = harness.client("admin")
    put = admin.put("/api/v1/queues", json=queue_doc(TENANT, 3, borrowing=0, namespaces=[TENANT]))
    assert put.status_code == 200, put.text
    release = tenant_dir(harness) / "release"
    harness.submit(pod("two", report(harness, "0", str(release)), gpus=2))
    harness.submit(pod("more", report(harness, "0", str(release)), gpus=2))
    harness.run_until(printed(harness, "two"))
    harness.run_until(lambda: "quota" in waiting_reason(harness, "more").lower())
    assert harness.workload("more")["state"] == "Pending"
    assert harness.log("more")["attempts"] == 0  # nothing started for it

    release.touch()
    harness.run_until(harness.state_is("two", "Succeeded"))
    harness.run_until(harness.state_is("more", "Succeeded"))


def test_backfill_runs_a_short_job_but_not_a_long_one_before_a_blocked_gang(
    harness: LocalHarness,
) -> None:
    # A quota larger than the machine: the gang is owed the GPUs the running job holds.
    admin = harness.client("admin")
    assert admin.put("/api/v1/queues", json=queue_doc(TENANT, 16, namespaces=[TENANT])).is_success
    release = tenant_dir(harness) / "release"
    waits = report(harness, "0", str(release))
    harness.submit(expecting(pod("running", waits, gpus=4), "1h"))
    harness.run_until(printed(harness, "running"))
    harness.submit(expecting(job("gang", 2, waits, gpus=4), "1h"))
    harness.run_until(lambda: harness.workload("gang")["state"] == "Pending")
    harness.submit(expecting(pod("long", waits, gpus=2), "3h"))
    harness.submit(expecting(pod("short", waits, gpus=2), "10m"))

    harness.run_until(printed(harness, "short"))
    for _ in range(20):  # turns enough for the long one to have started, had it been let
        harness.plane.turn()
    assert harness.workload("long")["state"] == "Pending"
    assert harness.workload("gang")["state"] == "Pending"

    release.touch()
    harness.run_until(harness.state_is("gang", "Succeeded"), 30)
    harness.run_until(harness.state_is("long", "Succeeded"), 30)
