"""The pods bound to this node, as the device plugin needs them to answer the kubelet.

Owns the record of a bound pod (:class:`BoundPod`: identity, containers with their limits, the
scheduler's name and binding annotations, bind order), the :class:`BoundPods` protocol the device
plugin reads them through, and :class:`InMemoryBoundPods`, kept current by whoever watches the API
server (the Kubernetes adapter puts and removes pods as its watch reports them; tests put them
directly). Reading is a lock-free snapshot, so Allocate never waits on the API server. It does not
read annotations' meaning (:mod:`gpufleet.agent.allocation` does).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class BoundContainer:
    """One container of a bound pod and its resource limits (extended resources in units)."""

    name: str
    limits: Mapping[str, int] = field(default_factory=dict)
    #: An init container: the kubelet allocates for it first, and its devices may be reused.
    init: bool = False


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod the scheduler bound to this node, with the devices it chose in ``annotations``
    (``gpufleet.dev/gpu-index``, ``gpufleet.dev/gpu-milli-per-device``,
    ``gpufleet.dev/mig-slices``). ``bind_order`` grows with each binding (the kube adapter uses
    the bind time; any increasing number will do)."""

    namespace: str
    name: str
    uid: str
    containers: tuple[BoundContainer, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    bind_order: float = 0.0
    #: Breaks ties of ``bind_order`` (the order a watch first saw the pods).
    seen: int = 0
    #: ``spec.schedulerName``: only gpufleet's pods may carry a binding the agent honours.
    scheduler_name: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def units(self, resource: str) -> int:
        """Units of ``resource`` its containers ask (init containers' reused ones not counted
        twice: the kubelet counts the larger of the two)."""
        app = sum(c.limits.get(resource, 0) for c in self.containers if not c.init)
        init = max((c.limits.get(resource, 0) for c in self.containers if c.init), default=0)
        return max(app, init)


class BoundPods(Protocol):
    """The pods bound to this node now, running or about to (a pod that ended, Succeeded or
    Failed, the kubelet's refusals included, is no bound pod)."""

    def pods(self) -> Sequence[BoundPod]: ...


class InMemoryBoundPods:
    """Bound pods kept in memory; ``pods()`` is a consistent snapshot, cheap to take."""

    def __init__(self, pods: Sequence[BoundPod] = ()) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, BoundPod] = {p.uid: p for p in pods}
        self._snapshot: tuple[BoundPod, ...] = tuple(self._by_uid.values())

    def pods(self) -> Sequence[BoundPod]:
        return self._snapshot

    def put(self, pod: BoundPod) -> None:
        with self._lock:
            self._by_uid[pod.uid] = pod
            self._snapshot = tuple(self._by_uid.values())

    def remove(self, uid: str) -> None:
        with self._lock:
            if self._by_uid.pop(uid, None) is not None:
                self._snapshot = tuple(self._by_uid.values())

    def replace(self, pods: Sequence[BoundPod]) -> None:
        """All bound pods at once (a watch's relist)."""
        with self._lock:
            self._by_uid = {p.uid: p for p in pods}
            self._snapshot = tuple(self._by_uid.values())
