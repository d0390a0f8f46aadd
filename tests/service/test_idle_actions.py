"""Idle policies in ``gpufleet serve`` (embedded): after each observatory round the reclaimer
takes the steps due, each an event with its numbers; busy and exempt workloads are left alone;
a dry run only reports."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpufleet.model.idle import (
    EXEMPT_LABEL,
    EXEMPT_VALUE,
    IdleAction,
    IdleCandidate,
    IdlePolicy,
    IdleScope,
    IdleStep,
)
from gpufleet.service.idle_actions import IdleReclaimer, idle_candidates, reclaimer_for
from gpufleet.service.plane_book import Change, ServeOptions
from gpufleet.service.states import ChangeKind
from gpufleet.service.store import StoredEvent
from gpufleet.telemetry.profiles import USAGE_PROFILE_ANNOTATION
from gpufleet.testing.service import ServiceHarness, as_yaml, gpu_nodes, make_harness, pod_doc

YAML = {"Content-Type": "application/yaml"}
#: Judged after 10 minutes of running, on its last 5 minutes: told at once, stopped 20 minutes
#: later. Pods are in its scope (training ones too: the busy trainer is left alone for being
#: busy, not for being training).
POLICY = IdlePolicy(
    name="notebooks",
    steps=(IdleStep(IdleAction.NOTIFY), IdleStep(IdleAction.STOP, after_s=1200.0)),
    scope=IdleScope(workload_kinds=frozenset({"Pod"})),
    threshold_pct=10.0,
    window_s=300.0,
    grace_s=600.0,
)


def harness_with(tmp_path: Path) -> ServiceHarness:
    options = ServeOptions(speed=60.0, alert_rules=())
    return make_harness(tmp_path, gpu_nodes(1, gpus=4), options=options)


def submit(
    harness: ServiceHarness, name: str, profile: str, exempt: bool = False, gpus: int = 1
) -> None:
    doc = pod_doc(name, gpus=gpus, runtime="10h", namespace="team-a")
    doc["metadata"]["annotations"][USAGE_PROFILE_ANNOTATION] = profile
    if exempt:
        doc["metadata"]["labels"][EXEMPT_LABEL] = EXEMPT_VALUE
    response = harness.client("team-a").post(
        "/api/v1/workloads", content=as_yaml(doc), headers=YAML
    )
    assert response.status_code == 201, response.text


def run_rounds(harness: ServiceHarness, seconds: float, step: float = 60.0) -> None:
    for _ in range(int(seconds // step)):
        harness.advance(step)
        harness.plane.observing.round()


def idle_events(harness: ServiceHarness, key: str) -> list[StoredEvent]:
    return [e for e in harness.store.events(key) if e.reason.startswith("IdleReclaim")]


def started(harness: ServiceHarness, key: str) -> float:
    record = harness.plane.records[key]
    assert record.started is not None
    return record.started


NUMBERS = re.compile(
    r"mean GPU utilisation (?P<util>[\d.]+)% over 5m00s \(threshold 10%\), idle for (?P<idle>\S+), "
    r"holding 1 GPU\(s\); IdlePolicy notebooks, step (?P<step>\d) of 2"
)


def test_an_idle_notebook_is_told_then_stopped_and_busy_or_exempt_work_is_not(
    tmp_path: Path,
) -> None:
    harness = harness_with(tmp_path)
    reclaimer = reclaimer_for(harness.plane, [POLICY])
    assert reclaimer is not None
    seen: list[Sequence[Change]] = []
    harness.plane.subscribe(seen.append)
    submit(harness, "notebook", "idle")
    submit(harness, "trainer", "training")
    submit(harness, "kept", "idle", exempt=True)
    harness.advance(0)
    run_rounds(harness, 60 * 60)
    notebook = "team-a/Pod/notebook"
    notify, stop = idle_events(harness, notebook)
    assert (notify.type, notify.reason, stop.type, stop.reason) == (
        "Warning", "IdleReclaimNotify", "Warning", "IdleReclaimStop",
    )  # fmt: skip
    # Told at the first round after its grace, stopped the policy's 20 minutes later.
    began = started(harness, notebook)
    assert began + POLICY.grace_s <= notify.time < began + POLICY.grace_s + 60
    assert stop.time - notify.time == pytest.approx(1200.0, abs=60)
    for event, step, idle_for in ((notify, "1", "0s"), (stop, "2", "20m00s")):
        found = NUMBERS.search(event.message)
        assert found is not None, event.message
        assert float(found["util"]) < 10.0
        assert (found["step"], found["idle"]) == (step, idle_for)
    assert notify.message.startswith("notify the owner of team-a/Pod/notebook: ")
    assert stop.message.startswith("stop team-a/Pod/notebook: ")
    # Stopped as a cancel is, its GPU given back; the event stream and the API show it.
    record = harness.plane.records[notebook]
    assert record.state.value == "Cancelled"
    assert record.gpus == 0
    cancelled = [e for e in harness.store.events(notebook) if e.reason == "Cancelled"]
    assert [e.message for e in cancelled] == ["by IdlePolicy notebooks (idle GPUs)"]
    detail = harness.client("team-a").get("/api/v1/workloads/team-a/notebook").json()
    assert "IdleReclaimStop" in [e["reason"] for e in detail["events"]]
    streamed = [c.data["reason"] for batch in seen for c in batch if c.kind is ChangeKind.EVENT]
    assert streamed.count("IdleReclaimNotify") == streamed.count("IdleReclaimStop") == 1
    # The busy trainer and the exempt notebook are untouched.
    for key in ("team-a/Pod/trainer", "team-a/Pod/kept"):
        assert idle_events(harness, key) == []
        assert harness.plane.records[key].state.value == "Running"
    assert [d.action for d in reclaimer.decisions] == [IdleAction.NOTIFY, IdleAction.STOP]
    harness.close()


def test_a_dry_run_reports_what_it_would_do_and_changes_nothing(tmp_path: Path) -> None:
    harness = harness_with(tmp_path)
    assert reclaimer_for(harness.plane, [POLICY], dry_run=True) is not None
    submit(harness, "notebook", "idle")
    harness.advance(0)
    run_rounds(harness, 60 * 60)
    notebook = "team-a/Pod/notebook"
    events = idle_events(harness, notebook)
    assert [(e.type, e.reason) for e in events] == [
        ("Normal", "IdleReclaimNotify"),
        ("Normal", "IdleReclaimStop"),
    ]
    assert events[1].message.startswith("dry run: would stop team-a/Pod/notebook: mean GPU")
    assert harness.plane.records[notebook].state.value == "Running"
    assert not [e for e in harness.store.events(notebook) if e.reason == "Cancelled"]
    harness.close()


def test_a_preemptible_step_lowers_it_and_waiting_work_takes_its_gpus(tmp_path: Path) -> None:
    """Checkpoint is asked, then the idle notebook (holding every GPU) is lowered to the
    lowest priority: the trainer of its own priority, which could not preempt it before, does
    now; the notebook waits again, lowered."""
    policy = IdlePolicy(
        name="lower",
        steps=(IdleStep(IdleAction.CHECKPOINT), IdleStep(IdleAction.PREEMPTIBLE, 300.0)),
        scope=IdleScope(workload_kinds=frozenset({"Pod"})),
        threshold_pct=10.0,
        window_s=300.0,
        grace_s=600.0,
    )
    harness = harness_with(tmp_path)
    reclaimer_for(harness.plane, [policy])
    submit(harness, "notebook", "idle", gpus=4)
    harness.advance(0)
    submit(harness, "train", "training", gpus=4)
    harness.advance(0)
    notebook, train = "team-a/Pod/notebook", "team-a/Pod/train"
    run_rounds(harness, 10 * 60)
    assert harness.plane.records[train].state.value == "Pending", "equal priority: it waits"
    run_rounds(harness, 20 * 60)
    events = idle_events(harness, notebook)
    assert [e.reason for e in events] == ["IdleReclaimCheckpoint", "IdleReclaimPreemptible"]
    assert "lowered to preemptible at priority -2147483648" in events[1].message
    assert harness.plane.records[train].state.value == "Running"
    assert harness.plane.records[notebook].state.value == "Pending"
    assert [e.reason for e in harness.store.events(notebook) if e.reason == "Preempted"]
    harness.close()


def test_candidates_are_running_workloads_holding_gpus(tmp_path: Path) -> None:
    harness = harness_with(tmp_path)
    submit(harness, "notebook", "idle")
    submit(harness, "big", "idle")
    harness.client("team-a").post(
        "/api/v1/workloads",
        content=as_yaml(pod_doc("waits", gpus=8, namespace="team-a")),
        headers=YAML,
    )
    harness.advance(0)
    found = {c.key: c for c in idle_candidates(harness.plane.records)}
    assert sorted(found) == ["team-a/Pod/big", "team-a/Pod/notebook"]
    notebook: IdleCandidate = found["team-a/Pod/notebook"]
    assert (notebook.namespace, notebook.pods, notebook.gpus, notebook.kind) == (
        "team-a", ("notebook",), 1.0, "Pod",
    )  # fmt: skip
    assert notebook.queue == "team-a"
    assert not notebook.training
    harness.close()


def test_no_policies_or_no_observatory_means_no_reclaimer(tmp_path: Path) -> None:
    harness = harness_with(tmp_path)
    assert reclaimer_for(harness.plane, []) is None
    reclaimer = IdleReclaimer(harness.plane, [])
    assert reclaimer.judge(harness.plane.now()) == []
    harness.close()
