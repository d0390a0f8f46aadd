"""Notifications of a workload's end, failure or preemption, in the format and to the receivers
of gpufleet's alert notifications: one Alertmanager webhook payload (version 4) per route the
notice's labels match (:func:`~gpufleet.telemetry.alert_dispatch.routes_for`), so a receiver
that takes gpufleet's alerts (a chat bridge, a pager) takes these with no change.

Owns :class:`WorkloadNotice` (what happened to which workload, when) and
:func:`workload_notifications` (its payloads). A notice is an event, not a standing
condition: it is sent at once (no ``group_wait``, no repeat, no resolution), with
``status: firing`` and the labels

* ``alertname``: ``WorkloadSucceeded``, ``WorkloadFailed`` or ``WorkloadPreempted``;
* ``severity``: ``info`` for a success, ``warning`` otherwise (a route may match on it);
* ``namespace``, ``workload`` (its name), ``kind`` (``Pod``, ``Job``...) and ``tenant``;

and the annotations ``summary`` (``workload team-a/train failed``) and, where the plane said
why, ``description`` (its event: ``BackoffLimitExceeded: ...``). It sends nothing and reads no
clock: ``service/workload_notifier`` watches the plane and posts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import quote

from gpufleet.model.alerts import label_set
from gpufleet.telemetry.alert_dispatch import (
    WEBHOOK_VERSION,
    ZERO_TIME,
    Notification,
    Route,
    WallTime,
    fingerprint,
    format_labels,
    rfc3339,
    routes_for,
    same_time,
)


class WorkloadOutcome(StrEnum):
    """What a notice tells, by its ``alertname``."""

    SUCCEEDED = "WorkloadSucceeded"
    FAILED = "WorkloadFailed"
    PREEMPTED = "WorkloadPreempted"


_SAID = {
    WorkloadOutcome.SUCCEEDED: ("succeeded", "info"),
    WorkloadOutcome.FAILED: ("failed", "warning"),
    WorkloadOutcome.PREEMPTED: ("was preempted", "warning"),
}


@dataclass(frozen=True, slots=True)
class WorkloadNotice:
    """``outcome`` of the workload ``namespace/name`` (a ``kind``) of ``tenant`` at ``at``
    (the plane's time); ``detail``: why, where the plane said (an event's ``reason:
    message``)."""

    outcome: WorkloadOutcome
    namespace: str
    name: str
    kind: str
    tenant: str
    at: float
    detail: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def labels(self) -> dict[str, str]:
        return {
            "alertname": self.outcome.value,
            "severity": _SAID[self.outcome][1],
            "namespace": self.namespace,
            "workload": self.name,
            "kind": self.kind,
            "tenant": self.tenant,
        }

    def annotations(self) -> dict[str, str]:
        said = {"summary": f"workload {self.key} {_SAID[self.outcome][0]}"}
        if self.detail:
            said["description"] = self.detail
        return said


def workload_notifications(
    routes: Sequence[Route],
    notice: WorkloadNotice,
    *,
    external_url: str = "",
    wall: WallTime = same_time,
) -> list[Notification]:
    """The payloads of ``notice``, one per route its labels match, due at its time."""
    labels = label_set(notice.labels())
    due = []
    for index in routes_for(routes, labels):
        route = routes[index]
        group = route.group_labels(labels)
        group_key = f"{route.key}:{format_labels(group)}"
        due.append(
            Notification(
                route, group_key, notice.at, _payload(route, group_key, notice, external_url, wall)
            )
        )
    return due


def _payload(
    route: Route, group_key: str, notice: WorkloadNotice, external_url: str, wall: WallTime
) -> dict[str, Any]:
    labels = notice.labels()
    annotations = notice.annotations()
    base = external_url.rstrip("/")
    where = (
        f"{base}/api/v1/workloads/{quote(notice.namespace)}/{quote(notice.name)}" if base else ""
    )
    alert = {
        "status": "firing",
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(wall(notice.at)),
        "endsAt": ZERO_TIME,
        "generatorURL": where,
        "fingerprint": fingerprint(labels),
    }
    return {
        "receiver": route.receiver,
        "status": "firing",
        "alerts": [alert],
        "groupLabels": dict(route.group_labels(label_set(labels))),
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": base,
        "version": WEBHOOK_VERSION,
        "groupKey": group_key,
        "truncatedAlerts": 0,
    }
