"""A workload's end, failure or preemption as an Alertmanager webhook payload (version 4), to
each route its labels match: the labels and annotations each outcome gets, and the routing."""

from __future__ import annotations

import pytest

from gpufleet.model.alerts import label_set
from gpufleet.telemetry.alert_dispatch import ZERO_TIME, Route, fingerprint
from gpufleet.telemetry.workload_notices import (
    WorkloadNotice,
    WorkloadOutcome,
    workload_notifications,
)

T = 1_767_225_600.0  # 2026-01-01T00:00:00Z
OPS = Route("ops", fallback=True, target="http://ops/hook")
PAGER = Route(
    "pager", matchers=label_set({"severity": "warning"}), key='{}/{severity="warning"}',
    target="http://pager/hook",
)  # fmt: skip


def notice(outcome: WorkloadOutcome, detail: str = "") -> WorkloadNotice:
    return WorkloadNotice(outcome, "team-a", "train", "Job", "team-a", T, detail)


@pytest.mark.parametrize(
    ("outcome", "severity", "summary"),
    [
        (WorkloadOutcome.SUCCEEDED, "info", "workload team-a/train succeeded"),
        (WorkloadOutcome.FAILED, "warning", "workload team-a/train failed"),
        (WorkloadOutcome.PREEMPTED, "warning", "workload team-a/train was preempted"),
    ],
    ids=["succeeded", "failed", "preempted"],
)
def test_each_outcome_is_an_alert_in_alertmanagers_payload(
    outcome: WorkloadOutcome, severity: str, summary: str
) -> None:
    [due] = workload_notifications([OPS], notice(outcome), external_url="http://gf.example/")
    labels = {
        "alertname": outcome.value, "severity": severity, "namespace": "team-a",
        "workload": "train", "kind": "Job", "tenant": "team-a",
    }  # fmt: skip
    assert (due.route, due.at) == (OPS, T)
    assert due.payload == {
        "receiver": "ops",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": {"summary": summary},
                "startsAt": "2026-01-01T00:00:00Z",
                "endsAt": ZERO_TIME,
                "generatorURL": "http://gf.example/api/v1/workloads/team-a/train",
                "fingerprint": fingerprint(labels),
            }
        ],
        "groupLabels": {"alertname": outcome.value},
        "commonLabels": labels,
        "commonAnnotations": {"summary": summary},
        "externalURL": "http://gf.example",
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{outcome.value}"}}',
        "truncatedAlerts": 0,
    }


def test_the_detail_is_the_description() -> None:
    [due] = workload_notifications([OPS], notice(WorkloadOutcome.FAILED, "OOMKilled: pod x"))
    [alert] = due.payload["alerts"]
    assert alert["annotations"]["description"] == "OOMKilled: pod x"
    assert alert["generatorURL"] == ""  # no external URL: nowhere to point


@pytest.mark.parametrize(
    ("outcome", "receivers"),
    [
        (WorkloadOutcome.SUCCEEDED, ["ops"]),
        (WorkloadOutcome.FAILED, ["pager"]),
        (WorkloadOutcome.PREEMPTED, ["pager"]),
    ],
    ids=["success-falls-back", "failure-pages", "preemption-pages"],
)
def test_a_notice_goes_to_the_routes_its_labels_match(
    outcome: WorkloadOutcome, receivers: list[str]
) -> None:
    due = workload_notifications([PAGER, OPS], notice(outcome))
    assert [d.route.receiver for d in due] == receivers
