"""Inference services in simulated runs: replicas an autoscaler adds and removes as workloads
of their own (queued, placed, loading their model), against a static baseline; what the
requests met."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.backends.sim.inference import InferenceSettings, ServingReport
from gpufleet.backends.sim.results import TenancyRun
from gpufleet.backends.sim.run import run_workloads
from gpufleet.io.readers import read_scenario
from gpufleet.testing.builders import make_node

HOUR = 3600.0


def deployment(replicas: int = 1, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "chat",
            "namespace": "prod",
            "annotations": {
                f"gpufleet.dev/{k.replace('_', '-')}": v for k, v in annotations.items()
            },
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "chat"}},
            "template": {
                "metadata": {"labels": {"app": "chat"}},
                "spec": {
                    "containers": [
                        {"name": "s", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                    ]
                },
            },
        },
    }


def inference_load(requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "InferenceLoad",
        "metadata": {"name": "chat-traffic", "namespace": "prod"},
        "spec": {
            "target": {"kind": "Deployment", "name": "chat"},
            "requests": requests,
            "replica": {"throughput": 10, "serviceTime": "200ms", "loadTime": "60s"},
            "slo": {"p95": "1s"},
        },
    }


def serve(tmp_path: Path, *objects: dict[str, Any], gpus: int = 8) -> ServingReport:
    path = tmp_path / "scenario.yaml"
    path.write_text("---\n".join(yaml.safe_dump(o) for o in objects))
    scenario = read_scenario(path)
    settings = InferenceSettings(
        tuple(scenario.inference),
        {spec.target.key: spec for spec in scenario.autoscaling},
        scenario.replica_templates,
        scenario.replica_owner,
    )
    run: TenancyRun = run_workloads(
        [make_node("n", gpus=gpus)],
        scenario.workloads,
        "bestfit",
        3,
        queues=scenario.queues,
        inference=settings,
    )
    (report,) = run.serving
    return report


STEADY = {"trough": 40, "peak": 40, "duration": "2h"}
SCALED = {"max_replicas": "8", "target_queue_depth": "2", "model_load_time": "60s"}


def test_an_autoscaled_service_grows_to_its_load_and_meets_the_objective(tmp_path: Path) -> None:
    report = serve(tmp_path, deployment(1, **SCALED), inference_load(STEADY))
    assert report.scaled_by.startswith("annotations")
    assert report.replicas_min == 1
    assert report.replicas_max >= 5  # 40 rps over 10 rps a replica, and the queue's target
    assert report.scale_changes >= 1
    assert report.minutes_met_pct > 90
    assert report.changes[0].startswith("t=15s: 1 -> 5: queue depth")
    # It ran the run through: about 2 hours of its replicas' GPUs.
    assert report.gpu_hours == pytest.approx(report.replicas_mean * 2, rel=0.05)


def test_a_static_service_keeps_its_replicas_and_misses_under_load(tmp_path: Path) -> None:
    report = serve(tmp_path, deployment(1), inference_load(STEADY))
    assert report.scaled_by == "static"
    assert (report.replicas_min, report.replicas_max, report.scale_changes) == (1, 1, 0)
    assert report.minutes_met_pct < 5
    assert report.latency_p50_s is not None
    assert report.latency_p50_s > 1.0


def test_replicas_go_when_the_load_drops(tmp_path: Path) -> None:
    falling = {"file": "traffic.csv", "duration": "3h"}
    (tmp_path / "traffic.csv").write_text("0,40\n3600,40\n3660,4\n")
    report = serve(tmp_path, deployment(1, **SCALED), inference_load(falling))
    at_end = report.timeline[-1]
    assert at_end[1] < report.replicas_max
    assert at_end[1] >= 1


def test_scaled_to_zero_it_wakes_on_the_first_requests(tmp_path: Path) -> None:
    (tmp_path / "traffic.csv").write_text("0,0\n1800,0\n1801,20\n")
    quiet_then_busy = {"file": "traffic.csv", "duration": "1h"}
    scaled = {**SCALED, "min_replicas": "0", "scale_to_zero_after": "5m"}
    report = serve(tmp_path, deployment(1, **scaled), inference_load(quiet_then_busy))
    placed = {minute: row[1] for minute, row in enumerate(report.timeline)}
    assert placed[20] == 0, "idle, it went to zero"
    assert placed[59] >= 2, "woken, it serves the load"
    assert any(": 0 -> " in change for change in report.changes)
    # The minutes before its first replica served miss the objective (their requests wait).
    assert report.minutes_met_pct < 100


def test_replicas_wait_for_gpus_like_any_workload(tmp_path: Path) -> None:
    """On 2 GPUs the autoscaler may ask for more; only 2 replicas are ever placed."""
    report = serve(tmp_path, deployment(1, **SCALED), inference_load(STEADY), gpus=2)
    assert report.replicas_max == 2
    assert report.minutes_met_pct < 50


@pytest.mark.parametrize(
    ("window", "first_change", "minutes_held"),
    [
        pytest.param(None, "t=5m15s: 8 -> 1", 5, id="default-300s-window"),
        pytest.param("60s", "t=1m15s: 8 -> 1", 1, id="60s-window"),
    ],
)
def test_the_replicas_found_hold_for_the_scale_down_window(
    tmp_path: Path, window: str | None, first_change: str, minutes_held: int
) -> None:
    """As Kubernetes seeds an HPA's history with the count it finds: 8 replicas (serving at
    once: no model to load) under a light load stay 8 until the scale-down window has passed
    since the first sync (15 s), not 1 at the first sync."""
    light = inference_load({"trough": 4, "peak": 4, "duration": "30m"})
    light["spec"]["replica"]["loadTime"] = "0s"
    scaled = dict(SCALED, model_load_time="0s")
    if window is not None:
        scaled["scale_down_stabilization"] = window
    report = serve(tmp_path, deployment(8, **scaled), light)
    assert report.changes[0].startswith(first_change), report.changes[0]
    placed = [row[1] for row in report.timeline[: minutes_held + 1]]
    assert placed == [8] * minutes_held + [1]
