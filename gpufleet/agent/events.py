"""What the node agent reports to the cluster as Events, and where it sends them.

Owns the plain record of one Event the agent raises (about a Pod or its Node) and the small
protocol a sink implements (:class:`EventSink`: the Kubernetes adapter writes them to the API
server, the tests keep them in memory with :class:`RecordingEventSink`). It does not talk to
any server.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

WARNING = "Warning"
NORMAL = "Normal"


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """An Event about ``kind`` ``namespace/name`` (a Node has no namespace)."""

    kind: str
    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    type: str = WARNING


class EventSink(Protocol):
    """Where the agent's Events go; ``emit`` must not block for long (it runs in Allocate)."""

    def emit(self, event: AgentEvent) -> None: ...


class RecordingEventSink:
    """Keeps every Event in memory, in order (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[AgentEvent] = []

    def emit(self, event: AgentEvent) -> None:
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> tuple[AgentEvent, ...]:
        with self._lock:
            return tuple(self._events)
