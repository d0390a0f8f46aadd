"""GPU-hour budgets in the embedded control plane: the queue view's numbers, the Warning events
once per period, explain for a workload that waits on budget, and the table's columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.schemas import QueueView
from gpufleet.cli.remote_render import queues_table
from gpufleet.testing.service import ServiceHarness, as_yaml, job_doc, make_harness, queue_doc

YAML = {"Content-Type": "application/yaml"}
HOUR = 3600.0


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    budgeted = queue_doc("team-a", 8, namespaces=["team-a"])
    budgeted["spec"]["budget"] = {"gpuHours": 6, "period": "day", "warnAt": 0.5}
    return make_harness(tmp_path, queues=[budgeted, queue_doc("team-b", 8)])


def test_a_budget_counts_what_ran_warns_once_and_blocks_at_100_percent(
    harness: ServiceHarness,
) -> None:
    client = harness.client("team-a")
    post = client.post(
        "/api/v1/workloads", content=as_yaml(job_doc("a", 2, 2, runtime="1h")), headers=YAML
    )
    assert post.status_code == 201, post.text
    harness.advance(1)
    view = client.get("/api/v1/queues/team-a").json()["budget"]
    # 4 GPUs for the hour it is expected to run: committed at once.
    assert view["used_gpu_hours"] == pytest.approx(4.0)
    assert (view["state"], view["action"], view["period"]) == ("warn", "Block", "day")
    assert view["resets"] == 24 * HOUR
    assert client.get("/api/v1/queues/team-b").json()["budget"] is None
    harness.advance(HOUR)  # it ran its hour and ended
    client.post(
        "/api/v1/workloads", content=as_yaml(job_doc("b", 1, 2, runtime="2h")), headers=YAML
    )
    client.post(
        "/api/v1/workloads", content=as_yaml(job_doc("c", 1, 1, runtime="1h")), headers=YAML
    )
    harness.advance(1)
    view = client.get("/api/v1/queues/team-a").json()["budget"]
    assert view["state"] == "exhausted"
    assert view["remaining_gpu_hours"] == 0.0
    why = client.get("/api/v1/workloads/team-a/c/explain").json()
    assert why["waiting_for"] == "budget"
    assert why["message"] == (
        "waiting for admission check budget: queue team-a has used 8.0 of 6 GPU-hours today "
        "(budget Block); resets t=1d00h"  # the simulated cluster's clock: a day after it started
    )
    admin = harness.client("admin")
    reasons = [e["reason"] for e in admin.get("/api/v1/events").json() if e["workload"] is None]
    assert reasons == ["BudgetWarning", "BudgetExhausted"]
    harness.advance(24 * HOUR)  # a new day: the budget starts again and what waited starts
    assert client.get("/api/v1/workloads/team-a/c").json()["state"] in ("Running", "Succeeded")


def test_get_queues_shows_budget_and_remaining() -> None:
    budget = {
        "gpu_hours": 100.0, "period": "week", "warn_at": 0.8, "action": "Block",
        "used_gpu_hours": 100.0, "remaining_gpu_hours": 0.0, "state": "exhausted",
        "period_start": 0.0, "resets": 7 * 24 * HOUR,
    }  # fmt: skip
    views = [QueueView(name="research", budget=budget), QueueView(name="free")]
    table = queues_table(views)
    columns = [c.header for c in table.columns]
    assert columns[-2:] == ["BUDGET", "REMAINING"]
    cells = [list(c.cells) for c in table.columns[-2:]]
    assert cells == [["100.0/100 GPU-h/week (Block)", "-"], ["0.0", "-"]]
