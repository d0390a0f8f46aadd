"""The plane's changes become workload notices: an end or a failure once per workload (the
plane publishes a workload's state on every turn), a preemption once per batch, nothing for a
workload ended before the notifier started, a cancelled one or an unknown one; a deleted
workload's name is told again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from gpufleet.io.fleet.alert_routing import webhook_routing
from gpufleet.service.plane_book import Change
from gpufleet.service.states import ChangeKind
from gpufleet.service.workload_notifier import WorkloadIdentity, WorkloadNotifier

URL = "http://hooks.example/gpu"
TRAIN, OLD = "team-a/Job/train", "team-a/Job/old"  # as the plane keys them


class RecordingSender:
    """Keeps what would be sent: (receiver, url, payload)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Mapping[str, Any]]] = []

    def submit(self, receiver: str, url: str, payload: Mapping[str, Any]) -> bool:
        self.sent.append((receiver, url, payload))
        return True


def state(key: str, value: str, at: float = 1.0) -> Change:
    return Change(ChangeKind.WORKLOAD, key, at, {"state": value})


def event(key: str, reason: str, message: str = "why", kind: str = "Warning") -> Change:
    return Change(ChangeKind.EVENT, key, 1.0, {"reason": reason, "type": kind, "message": message})


def told(batches: Sequence[Sequence[Change]], ended: Sequence[str] = ()) -> list[str]:
    sender = RecordingSender()
    known = {  # as the plane keys them: namespace/Kind/name
        TRAIN: WorkloadIdentity("team-a", "train", "Job", "team-a"),
        OLD: WorkloadIdentity("team-a", "old", "Job", "team-a"),
    }
    notifier = WorkloadNotifier(webhook_routing(URL), sender, known.get, ended=ended)
    for batch in batches:
        notifier.on_changes(batch)
    assert all(url == URL for _, url, _ in sender.sent)
    return [
        f"{alert['labels']['alertname']} {alert['labels']['namespace']}/"
        f"{alert['labels']['workload']} {alert['labels']['tenant']}"
        + (f" ({alert['annotations']['description']})" if "description" in alert["annotations"]
           else "")
        for _, _, payload in sender.sent
        for alert in payload["alerts"]
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("batches", "ended", "expected"),
    [
        ([[state(TRAIN, "Running")], [state(TRAIN, "Succeeded")],
          [state(TRAIN, "Succeeded")]], (),
         ["WorkloadSucceeded team-a/train team-a"]),
        ([[state(TRAIN, "Failed"), event(TRAIN, "BackoffLimitExceeded", "6")]], (),
         ["WorkloadFailed team-a/train team-a (BackoffLimitExceeded: 6)"]),
        ([[event(TRAIN, "Preempted", "pod a evicted"),
           event(TRAIN, "Preempted", "pod b evicted")],
          [event(TRAIN, "Preempted", "pod a evicted")]], (),
         ["WorkloadPreempted team-a/train team-a (Preempted: pod a evicted)"] * 2),
        ([[state(OLD, "Succeeded")]], [OLD], []),
        ([[state(OLD, "Deleted")], [state(OLD, "Succeeded")]], [OLD],
         ["WorkloadSucceeded team-a/old team-a"]),
        ([[state(TRAIN, "Cancelled")], [state(TRAIN, "Failed")]], (), []),
        ([[state("team-b/Job/stranger", "Failed")]], (), []),
        ([[event(TRAIN, "Scheduled", kind="Normal")]], (), []),
    ],
    ids=["success-once", "failure-with-its-reason", "preemption-once-a-batch",
         "ended-before-start-not-told", "deleted-then-reused-told", "cancelled-not-told",
         "unknown-workload-not-told", "other-events-not-told"],
)  # fmt: skip
def test_changes_become_notices(
    batches: list[list[Change]], ended: list[str], expected: list[str]
) -> None:
    assert told(batches, ended) == expected
