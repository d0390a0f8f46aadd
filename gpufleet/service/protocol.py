"""What the API needs of a control plane, whatever world it runs on.

:class:`Plane` is met by :class:`~gpufleet.service.embedded_plane.EmbeddedControlPlane` (the
embedded simulated cluster), :class:`~gpufleet.service.local_plane.LocalControlPlane` (this
machine's GPUs) and :class:`~gpufleet.service.kube_plane.KubeControlPlane` (a Kubernetes
cluster). The views and routes are written against it only; what only some worlds can do
is offered as optional capabilities (:mod:`gpufleet.service.capabilities`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gpufleet.io.kinds import Skipped
from gpufleet.metrics.scheduler import SchedulerMetrics
from gpufleet.model import Node
from gpufleet.model.priorities import PriorityClass
from gpufleet.scheduling.core import PendingExplanation, SchedulerCore
from gpufleet.service.alert_webhooks import NotificationMetrics
from gpufleet.service.auth import Principal
from gpufleet.service.capabilities import PodLogs, Terminals, WaitingChanges
from gpufleet.service.observatory import Observatory
from gpufleet.service.plane_book import ServeOptions
from gpufleet.service.records import WorkloadRecord
from gpufleet.service.store import Store, StoredEvent, StoredToken
from gpufleet.telemetry.source import TelemetrySource

#: (scheduling turn, core identity) -> explanations computed then.
ExplainCache = tuple[tuple[int, int], dict[str, PendingExplanation]]


class Plane(Protocol):
    lock: threading.RLock
    turns: int
    history: deque[dict[str, Any]]
    counters: dict[str, int]
    explained: ExplainCache | None
    backend_name: str
    #: The earliest instant the plane answers for (a cost window starts there at the earliest).
    book_start: float
    #: The scheduler's metrics (its loop counts into them; a scrape reads its core).
    metrics: SchedulerMetrics
    #: Device telemetry, read at scrape time (thread-safe; None: the world has none).
    telemetry: TelemetrySource | None
    #: The GPUs' series and the alerts on them (None: the world observes nothing).
    observatory: Observatory | None
    #: Alert notifications delivered and failed (for /metrics).
    notifications: NotificationMetrics
    #: The plane's database (alert state and what was notified are kept in it).
    store: Store
    #: What the plane serves with (``gpufleet serve``'s options).
    options: ServeOptions
    #: What the world can do that not every world can (None: it cannot; see
    #: :mod:`gpufleet.service.capabilities`): a run's output, its terminal, an owner's
    #: changes to a waiting workload.

    @property
    def logs(self) -> PodLogs | None: ...

    @property
    def terminals(self) -> Terminals | None: ...

    @property
    def waiting_changes(self) -> WaitingChanges | None: ...

    @property
    def records(self) -> dict[str, WorkloadRecord]: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...

    @property
    def core(self) -> SchedulerCore: ...

    @property
    def policy(self) -> str: ...

    @property
    def speed(self) -> float | None: ...

    @property
    def running(self) -> bool: ...

    @property
    def stopping(self) -> bool: ...

    def healthy(self, within: float = 30.0) -> bool: ...

    def now(self) -> float: ...

    def cluster_nodes(self) -> Sequence[Node]: ...

    def priority_classes(self) -> Mapping[str, PriorityClass]: ...

    def recent_events(self, limit: int) -> list[StoredEvent]: ...

    def gpu_totals(self) -> tuple[int, float]: ...

    def pod_owners(self) -> dict[tuple[str, str], str]: ...

    def visible(self, principal: Principal, key: str) -> WorkloadRecord: ...

    def find(
        self, principal: Principal, namespace: str, name: str, kind: str | None = None
    ) -> WorkloadRecord: ...

    def authenticate(self, token: str) -> Principal: ...

    def throttle(self, principal: Principal) -> None: ...

    def create_token(
        self,
        principal: Principal | None,
        tenant: str,
        role: str,
        queues: Sequence[str] = (),
        name: str = "",
        lifetime: float | None = ...,
    ) -> tuple[str, StoredToken]: ...

    def list_tokens(self, principal: Principal) -> list[StoredToken]: ...

    def revoke_token(self, principal: Principal, token_id: str) -> StoredToken: ...

    def submit(
        self,
        principal: Principal,
        body: bytes,
        content_type: str,
        dry_run: bool = False,
        skipped: Skipped | None = None,
        paused: list[str] | None = None,
    ) -> list[WorkloadRecord]: ...

    def cancel(self, principal: Principal, key: str) -> WorkloadRecord: ...

    def put_object(self, principal: Principal, kind: str, document: dict[str, Any]) -> str: ...

    def delete_object(self, principal: Principal, kind: str, name: str) -> None: ...

    def subscribe(self, subscriber: Callable[[Sequence[Any]], None]) -> Callable[[], None]: ...
