"""A control plane's workloads' ends, failures and preemptions, sent to the receivers of its
alert notifications (``serve --alert-config/--alert-webhook``) in the same Alertmanager
webhook format (``telemetry/workload_notices``), through the same sender (its queue, retries
and delivery counters).

Owns :class:`WorkloadNotifier`, a plane subscriber (:meth:`~gpufleet.service.plane_book.
PlaneBook.subscribe`): a workload
change to ``Succeeded`` or ``Failed`` is a notice, once per workload (the plane publishes a
workload's state on every turn that touches it), and a ``Preempted`` event is one, once per
workload and batch (a gang's pods are evicted together). A workload already ended when the
notifier starts (``ended``) is not told: after a restart, one an earlier server told is not
told again. One whose run ended while no server ran is told: ``serve --local`` takes such
ends in during its first turn, after the notifier has subscribed. A deleted workload's name
may be used again, and told again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpufleet.io.fleet.alert_routing import AlertRouting
from gpufleet.service.plane_book import Change
from gpufleet.service.states import ChangeKind, WorkloadState
from gpufleet.telemetry.alert_dispatch import WallTime, same_time
from gpufleet.telemetry.workload_notices import (
    WorkloadNotice,
    WorkloadOutcome,
    workload_notifications,
)

log = logging.getLogger(__name__)

_ENDS = {
    WorkloadState.SUCCEEDED.value: WorkloadOutcome.SUCCEEDED,
    WorkloadState.FAILED.value: WorkloadOutcome.FAILED,
}
#: Workload states after which it never runs again.
TERMINAL = frozenset(
    state.value
    for state in (WorkloadState.SUCCEEDED, WorkloadState.FAILED, WorkloadState.CANCELLED)
)
PREEMPTED_REASON = "Preempted"
DELETED = "Deleted"


class Sender(Protocol):
    """Where payloads are queued (:class:`~gpufleet.service.alert_webhooks.WebhookSender`)."""

    def submit(self, receiver: str, url: str, payload: Mapping[str, Any]) -> bool: ...


@dataclass(frozen=True, slots=True)
class WorkloadIdentity:
    """Who a workload is, as its notices name it (its API namespace and name)."""

    namespace: str
    name: str
    kind: str
    tenant: str


class WorkloadNotifier:
    """Subscribe :meth:`on_changes` to a plane. ``identify`` names the workload of a key
    (None: unknown, not told); ``ended`` are the keys already ended when it starts."""

    def __init__(
        self,
        config: AlertRouting,
        sender: Sender,
        identify: Callable[[str], WorkloadIdentity | None],
        *,
        ended: Iterable[str] = (),
        external_url: str = "",
        wall: WallTime = same_time,
    ) -> None:
        self.config = config
        self.sender = sender
        self._identify = identify
        self._ended = set(ended)
        self._external_url = external_url
        self._wall = wall

    def on_changes(self, changes: Sequence[Change]) -> None:
        """Take a batch of the plane's changes; queue the notices they make."""
        why = _why(changes)
        preempted: set[str] = set()
        for change in changes:
            key = change.key
            if key is None:
                continue
            if change.kind is ChangeKind.WORKLOAD:
                state = str(change.data.get("state"))
                if state == DELETED:
                    self._ended.discard(key)
                elif state in TERMINAL and key not in self._ended:
                    self._ended.add(key)
                    if state in _ENDS:
                        self._tell(_ENDS[state], key, change.time, why.get(key, ""))
            elif (
                change.kind is ChangeKind.EVENT
                and change.data.get("reason") == PREEMPTED_REASON
                and key not in preempted
            ):
                preempted.add(key)
                detail = f"{PREEMPTED_REASON}: {change.data.get('message')}"
                self._tell(WorkloadOutcome.PREEMPTED, key, change.time, detail)

    def _tell(self, outcome: WorkloadOutcome, key: str, at: float, detail: str) -> None:
        who = self._identify(key)
        if who is None:
            log.debug("no notice for %s: not a known workload", key)
            return
        notice = WorkloadNotice(outcome, who.namespace, who.name, who.kind, who.tenant, at, detail)
        for due in workload_notifications(
            self.config.routes, notice, external_url=self._external_url, wall=self._wall
        ):
            if due.route.target:  # a receiver without webhooks: taken, not sent
                self.sender.submit(due.route.receiver, due.route.target, due.payload)


def _why(changes: Sequence[Change]) -> dict[str, str]:
    """Each workload's event of the batch that says most (its last warning, else its first
    event), as ``reason: message``."""
    why: dict[str, str] = {}
    for change in changes:
        key = change.key
        if change.kind is not ChangeKind.EVENT or key is None:
            continue
        if change.data.get("type") == "Warning" or key not in why:
            why[key] = f"{change.data.get('reason')}: {change.data.get('message')}"
    return why
