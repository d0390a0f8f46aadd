"""Fair sharing over time in the embedded control plane (``serve``): off by default; on, the
queue view shows each queue's decayed usage, share and fair-share factor, per tenant too, and a
restarted server keeps the usage it had counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.scheduling.profile import FairSharing, Profile
from gpufleet.scheduling.usage_history import accrued
from gpufleet.service.plane_book import ServeOptions
from gpufleet.service.usage_store import USAGE_META
from gpufleet.testing.service import ServiceHarness, as_yaml, job_doc, make_harness

YAML = {"Content-Type": "application/yaml"}
HOUR = 3600.0
GPU_HOUR = 1000 * HOUR


def fair_harness(tmp_path: Path) -> ServiceHarness:
    profile = Profile(fair_sharing=FairSharing(HOUR))
    return make_harness(tmp_path, options=ServeOptions(speed=60.0, profile=profile))


def run_an_hour(harness: ServiceHarness) -> None:
    """team-a runs 2 GPUs for an hour (one half-life)."""
    client = harness.client("team-a")
    post = client.post(
        "/api/v1/workloads", content=as_yaml(job_doc("a", 2, 1, runtime="1h")), headers=YAML
    )
    assert post.status_code == 201, post.text
    harness.advance(1)
    harness.advance(HOUR)


def fair_share_of(harness: ServiceHarness, queue: str) -> Any:
    return harness.client("admin").get(f"/api/v1/queues/{queue}").json()["fair_share"]


def test_fair_sharing_is_off_by_default_in_serve(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    run_an_hour(harness)
    assert harness.plane.core.state.usage_history is None
    assert fair_share_of(harness, "team-a") is None
    assert harness.store.meta(USAGE_META) is None


def test_the_queue_view_shows_decayed_usage_and_the_factor(tmp_path: Path) -> None:
    harness = fair_harness(tmp_path)
    run_an_hour(harness)
    a, b = fair_share_of(harness, "team-a"), fair_share_of(harness, "team-b")
    # About an hour of 2 GPUs, decayed as it ran (the job starts a second in).
    expected = accrued(0.0, 2000, HOUR, HOUR) / GPU_HOUR
    assert a["usage_gpu_hours"] == pytest.approx(expected, rel=0.01)
    assert a["users"] == {"team-a": pytest.approx(expected, rel=0.01)}
    assert a["usage_half_life"] == HOUR
    # team-a did all the using: its factor is below a half; team-b's is 1.
    assert a["factor"] < 0.5
    assert (b["usage_gpu_hours"], b["ratio"], b["factor"]) == (0.0, 0.0, 1.0)


def test_a_restarted_server_keeps_the_usage_it_counted(tmp_path: Path) -> None:
    harness = fair_harness(tmp_path)
    run_an_hour(harness)
    before = fair_share_of(harness, "team-a")["usage_gpu_hours"]
    harness.plane.stop()
    harness.restart()
    after = fair_share_of(harness, "team-a")
    assert after["usage_gpu_hours"] == pytest.approx(before, rel=0.01)
    assert after["users"]["team-a"] == pytest.approx(before, rel=0.01)
    # ... and keeps decaying: an hour later, half of it.
    harness.advance(HOUR)
    assert fair_share_of(harness, "team-a")["usage_gpu_hours"] == pytest.approx(
        before / 2, rel=0.01
    )


def test_new_queues_keep_the_usage_counted(tmp_path: Path) -> None:
    """A core built again (queues changed) takes the old one's usage."""
    harness = fair_harness(tmp_path)
    run_an_hour(harness)
    before = fair_share_of(harness, "team-a")["usage_gpu_hours"]
    assert before > 1.0
    with harness.plane.lock:
        harness.plane.restorer.rebuild_core()
    assert fair_share_of(harness, "team-a")["usage_gpu_hours"] == pytest.approx(before)
