"""``serve --scenario`` honours ``gpufleet.dev/submit-at`` (issue 29 item 21): a scenario's
workload arrives that long after the start, on the plane's clock, as ``simulate`` has it, and
not all at once at the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.service.plane_book import ServeOptions
from gpufleet.service.seeding import plan_seed, write_seed
from gpufleet.service.states import WorkloadState
from gpufleet.service.store import Store
from gpufleet.testing.service import ServiceHarness, as_yaml, gpu_nodes, pod_doc, queue_doc

OPTIONS = ServeOptions(speed=60.0)
MINUTE = 60.0


def seeded_plane(tmp_path: Path, submit_at: str | None) -> ServiceHarness:
    """A plane seeded from a scenario of one queue and one 1-GPU pod (``team-a/late``)."""
    pod = pod_doc("late", gpus=1, queue="team-a", namespace="team-a", runtime="2h")
    if submit_at is not None:
        pod["metadata"]["annotations"]["gpufleet.dev/submit-at"] = submit_at
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(as_yaml(queue_doc("team-a", 8), pod))
    db = tmp_path / "gpufleet.db"
    store = Store(db)
    write_seed(store, plan_seed(store, [scenario], OPTIONS, fresh=True))
    store.close()
    return ServiceHarness(db, gpu_nodes(), OPTIONS)


def state(harness: ServiceHarness) -> WorkloadState:
    (record,) = harness.plane.records.values()
    return record.state


@pytest.mark.parametrize(
    ("submit_at", "running_after_minutes"),
    [
        pytest.param(None, 0, id="no-submit-at-arrives-at-start"),
        pytest.param("0s", 0, id="submit-at-0"),
        pytest.param("30m", 30, id="submit-at-30m"),
    ],
)
def test_a_scenario_workload_arrives_at_its_submit_at(
    tmp_path: Path, submit_at: str | None, running_after_minutes: int
) -> None:
    harness = seeded_plane(tmp_path, submit_at)
    try:
        harness.advance(0.0)
        if running_after_minutes:
            assert state(harness) is WorkloadState.PENDING
            harness.advance((running_after_minutes - 1) * MINUTE)
            assert state(harness) is WorkloadState.PENDING, "not arrived yet"
            harness.advance(2 * MINUTE)
        assert state(harness) is WorkloadState.RUNNING
        (record,) = harness.plane.records.values()
        assert record.submitted == pytest.approx(running_after_minutes * MINUTE)
    finally:
        harness.close()


def test_the_submitted_event_says_when_it_arrives(tmp_path: Path) -> None:
    harness = seeded_plane(tmp_path, "30m")
    try:
        (record,) = harness.plane.records.values()
        (event,) = [e for e in record.events if e.reason == "Submitted"]
        assert event.message.endswith("arriving in 30m00s (submit-at)"), event.message
    finally:
        harness.close()
