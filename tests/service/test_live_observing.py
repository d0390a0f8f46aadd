"""``gpufleet serve`` (embedded) observes its simulated GPUs: a round every 15 s of its clock
records every device and pod into the series store, evaluates the alert rules, publishes their
transitions, serves them on ``/api/v1/alerts``, and keeps the series across a restart."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model.alerts import Aggregation, AlertMetric, AlertRule, Comparison, Severity
from gpufleet.service.live_observing import (
    CHUNK_PREFIX,
    SERIES_BLOB,
    USAGE_BLOB,
    store_shape,
)
from gpufleet.service.plane_book import Change, ServeOptions
from gpufleet.service.states import ChangeKind
from gpufleet.telemetry.pod_usage import joined, saved_form
from gpufleet.telemetry.profiles import USAGE_PROFILE_ANNOTATION
from gpufleet.testing.service import ServiceHarness, as_yaml, gpu_nodes, make_harness, pod_doc

YAML = {"Content-Type": "application/yaml"}
IDLE_FAST = AlertRule(
    name="workload-idle-fast",
    metric=AlertMetric.WORKLOAD_GPU_UTIL,
    comparison=Comparison.LT,
    threshold=40.0,
    aggregation=Aggregation.AVG,
    window_s=300.0,
    for_s=600.0,
    min_running_s=600.0,
    severity=Severity.WARNING,
    summary="idle for ten minutes",
)
HOT = AlertRule(
    name="any-gpu-in-use",
    metric=AlertMetric.GPU_UTIL,
    comparison=Comparison.GE,
    threshold=0.0,
    severity=Severity.INFO,
)


def harness_with(tmp_path: Path, *rules: AlertRule) -> ServiceHarness:
    options = ServeOptions(speed=60.0, alert_rules=rules)
    return make_harness(tmp_path, gpu_nodes(1, gpus=2), options=options)


def submit(harness: ServiceHarness, tenant: str, name: str, profile: str) -> None:
    doc = pod_doc(name, runtime="10h", namespace=tenant)
    doc["metadata"]["annotations"][USAGE_PROFILE_ANNOTATION] = profile
    response = harness.client(tenant).post("/api/v1/workloads", content=as_yaml(doc), headers=YAML)
    assert response.status_code == 201, response.text


def run_rounds(harness: ServiceHarness, seconds: float, step: float = 60.0) -> None:
    for _ in range(int(seconds // step)):
        harness.advance(step)
        harness.plane.observing.round()


def alerts_of(harness: ServiceHarness, who: str, **params: str) -> list[dict[str, Any]]:
    response = harness.client(who).get("/api/v1/alerts", params=params)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["alerts"]
    return found


def test_an_idle_pod_fires_the_idle_rule_and_a_busy_one_does_not(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, IDLE_FAST)
    seen: list[Sequence[Change]] = []
    harness.plane.subscribe(seen.append)
    submit(harness, "team-a", "notebook", "idle")
    submit(harness, "team-b", "trainer", "training")
    run_rounds(harness, 30 * 60)
    firing = alerts_of(harness, "admin", state="firing")
    assert [a["labels"]["pod"] for a in firing] == ["notebook"]
    (alert,) = firing
    assert alert["workload"] == "team-a/Pod/notebook"
    # Prometheus' labels (``avg by (namespace, pod)``), not the store's tags (queue...).
    assert set(alert["labels"]) == {"alertname", "severity", "namespace", "pod"}
    assert alert["value"] < 40.0
    assert alert["condition"] == (
        "avg(gpufleet_workload_gpu_util[5m]) < 40 for 10m after running 10m"
    )
    assert alert["fired_at"] - alert["active_at"] >= IDLE_FAST.for_s
    # The owner sees it, another tenant does not.
    assert len(alerts_of(harness, "team-a")) == 1
    assert alerts_of(harness, "team-b") == []
    # The event stream told pending, then firing.
    alert_changes = [c for batch in seen for c in batch if c.kind is ChangeKind.ALERT]
    assert [c.data["state"] for c in alert_changes] == ["pending", "firing"]
    assert alert_changes[0].key == "team-a/Pod/notebook"
    harness.close()


def test_device_alerts_carry_the_holder_and_unknown_states_are_refused(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, HOT)
    submit(harness, "team-a", "notebook", "training")
    run_rounds(harness, 120)
    alerts = alerts_of(harness, "admin")
    held = [a for a in alerts if a["labels"].get("pod") == "notebook"]
    assert len(held) == 1
    assert held[0]["labels"]["Hostname"] == "a100-0"
    assert len(alerts) == 2, "the GPU nobody holds has its alert too"
    assert [a["labels"].get("pod") for a in alerts_of(harness, "team-b")] == [None]
    bad = harness.client("admin").get("/api/v1/alerts", params={"state": "burning"})
    assert bad.status_code == 422
    harness.close()


def test_the_series_survive_a_restart(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, IDLE_FAST)
    submit(harness, "team-a", "trainer", "training")
    run_rounds(harness, 20 * 60)
    observatory = harness.plane.observatory
    assert observatory is not None
    now = harness.plane.now()
    before = observatory.series.query("DCGM_FI_DEV_GPU_UTIL", "avg", 1_200, now)
    assert before
    harness.plane.stop()  # a clean stop saves the series (a kill loses up to SAVE_EVERY_S)
    harness.restart()
    again = harness.plane.observatory
    assert again is not None
    after = again.series.query("DCGM_FI_DEV_GPU_UTIL", "avg", 1_200, now)
    by_uuid = {dict(k)["UUID"]: v for k, v in before.items()}
    assert {dict(k)["UUID"]: v for k, v in after.items()} == pytest.approx(by_uuid)
    assert max(by_uuid.values()) > 20.0, "the training pod's GPU was busy"
    assert harness.plane.observing.recorder.usage[("team-a", "trainer")].samples == 20
    harness.close()


def test_a_save_writes_only_the_chunks_not_yet_written(tmp_path: Path) -> None:
    harness = harness_with(tmp_path)
    submit(harness, "team-a", "trainer", "training")
    run_rounds(harness, 3 * 3_600, step=300.0)  # sealed fine chunks (an hour each)
    written: list[str] = []
    store = harness.plane.store
    set_blob = store.set_blob

    def spy(key: str, value: bytes) -> None:
        written.append(key)
        set_blob(key, value)

    store.set_blob = spy  # type: ignore[method-assign]
    harness.plane.observing.save()
    assert not any(key.startswith(CHUNK_PREFIX) for key in written), "all written before"
    assert SERIES_BLOB in written
    assert USAGE_BLOB not in written, "the summaries are rows now, written as they change"
    written.clear()
    run_rounds(harness, 3_600, step=300.0)
    harness.plane.observing.save()
    chunks = [key for key in written if key.startswith(CHUNK_PREFIX)]
    assert 1 <= len(chunks) <= 2, chunks  # the hour sealed since (and a day, at most)
    observatory = harness.plane.observatory
    assert observatory is not None
    now = harness.plane.now()
    before = observatory.series.query("DCGM_FI_DEV_GPU_UTIL", "avg", 4 * 3_600, now)
    harness.plane.stop()
    harness.restart()
    again = harness.plane.observatory
    assert again is not None
    after = again.series.query("DCGM_FI_DEV_GPU_UTIL", "avg", 4 * 3_600, now)
    by_uuid = {dict(k)["UUID"]: v for k, v in before.items()}
    assert {dict(k)["UUID"]: v for k, v in after.items()} == pytest.approx(by_uuid)
    harness.close()


def test_a_save_writes_only_the_usage_summaries_that_changed(tmp_path: Path) -> None:
    harness = harness_with(tmp_path)
    submit(harness, "team-a", "trainer", "training")
    run_rounds(harness, 600.0)
    store = harness.plane.store
    written: list[list[str]] = []
    set_pod_usage = store.set_pod_usage

    def spy(rows: Iterable[tuple[str, int, float, float, float]]) -> None:
        rows = list(rows)
        written.append([key for key, *_ in rows])
        set_pod_usage(rows)

    store.set_pod_usage = spy  # type: ignore[method-assign]
    observing = harness.plane.observing
    observing.save()
    observing.save()  # nothing sampled since
    run_rounds(harness, 120.0)
    observing.save()
    assert written == [["team-a/trainer"], [], ["team-a/trainer"]]
    kept = observing.recorder.usage[("team-a", "trainer")]
    harness.plane.stop()
    harness.restart()
    assert harness.plane.observing.recorder.usage[("team-a", "trainer")] == kept
    harness.close()


def test_an_older_usage_blob_is_read_then_replaced_by_rows(tmp_path: Path) -> None:
    harness = harness_with(tmp_path)
    submit(harness, "team-a", "trainer", "training")
    run_rounds(harness, 600.0)
    observing = harness.plane.observing
    observing.save()
    usage = observing.recorder.usage
    kept = dict(usage.items())
    store = harness.plane.store
    with store.transaction():  # as an older gpufleet left it: one blob, no rows
        store.set_blob(USAGE_BLOB, saved_form(*usage.rows()))
        store.delete_pod_usage([joined(pod) for pod in kept])
    harness.plane.stop()
    harness.restart()
    again = harness.plane.observing
    assert dict(again.recorder.usage.items()) == kept
    again.save()
    store = harness.plane.store
    assert store.blob(USAGE_BLOB) is None
    assert [key for key, *_ in store.pod_usage()] == ["team-a/trainer"]
    harness.close()


@pytest.mark.parametrize(
    ("clock", "rounds_at", "caught_up"),
    [
        ([15, 30, 45, 60, 75], [15, 30, 45, 60, 75], 0),
        # under load the thread ran at 15, 29, 59, 61, 89 of the plane's clock
        ([15, 29, 59, 61, 89], [15, 30, 45, 60, 75], 1),
        ([15, 44.9, 45.1], [15, 30, 45], 0),
        ([15, 15 + 15 * 50], [15, *range(15 + 15 * 11, 15 + 15 * 51, 15)], 39),
    ],
    ids=["on-time", "late-rounds-catch-up", "just-before-and-after", "too-late-skips"],
)
def test_rounds_run_at_fixed_instants_and_catch_up(
    clock: list[float], rounds_at: list[float], caught_up: int
) -> None:
    """Issue 29 item 4: late rounds ran at 15, 15, 30, 30 s apart and a ``for: 1m`` alert
    fired after 90 s; rounds are at the step's instants, missed ones evaluated late."""
    from gpufleet.service.observatory import Observatory
    from gpufleet.telemetry.series import SeriesStore

    observatory = Observatory(SeriesStore(), [], clock=lambda: 0.0)
    seen: list[float] = []
    observatory.subscribe(lambda observed: seen.append(observed.now))
    for now in clock:
        for at in observatory.catch_up(now):
            observatory.observe(at)
    assert seen == rounds_at
    assert observatory.rounds_caught_up == caught_up
    assert observatory.rounds_skipped == len(range(30, int(rounds_at[-1]) + 1, 15)) - len(seen) + 1


@pytest.mark.parametrize(
    ("step_s", "fine_step_s", "fine_points"),
    [(15.0, 15, 5_760), (1.0, 1, 86_400), (5.0, 5, 17_280)],
    ids=["default", "every-second", "every-5s"],
)
def test_the_store_keeps_a_point_per_round_for_a_day(
    step_s: float, fine_step_s: int, fine_points: int
) -> None:
    shape = store_shape(step_s)
    assert (shape.fine_step_s, shape.fine_points) == (fine_step_s, fine_points)


@pytest.mark.parametrize("step_s", [0.5, 7.0, 0.0], ids=["fraction", "not-dividing", "zero"])
def test_a_step_the_store_cannot_keep_is_refused(step_s: float) -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        store_shape(step_s)
