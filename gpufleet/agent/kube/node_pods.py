"""The pods bound to one node, as the node agent's device plugin looks them up.

Owns :class:`BoundPodsView`: a list-watch of the pods with ``spec.nodeName=<node>`` (the API
server filters; RBAC cannot, see deploy/README.md) through the same
:class:`~gpufleet.kube_client.informer.Informer` the scheduler uses (relists on 410, backoff,
a close that ends the open watch at once), kept as small read-only :class:`PodView`\\s: what
``Allocate`` needs to find a container's pod and the devices the scheduler chose for it
(namespace, name, uid, phase, the order pods were bound, each container's limits, the
annotations, the scheduler that placed it). It does not decide which pod an ``Allocate`` is
for: the agent does.

Bind order: the pod's ``PodScheduled`` condition time when the API server set one (at the
binding), else its creation time, ties broken by the order this view first saw the pod on the
node (the kubelet admits pods in the order it sees them too).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from gpufleet.kube_client.api_types import PODS, ListWatchApi, Obj, Resource
from gpufleet.kube_client.informer import DELETED, Change, Informer


@dataclass(frozen=True, slots=True)
class ContainerView:
    """One container of a pod: its name and resource limits (Kubernetes quantity text)."""

    name: str
    limits: Mapping[str, str]

    def count(self, resource: str) -> int:
        """How many of an extended resource (``nvidia.com/gpu``) it asks: 0 when none; a
        ValueError naming the container for a value that is not a whole number."""
        text = self.limits.get(resource)
        if text is None:
            return 0
        try:
            return int(text)
        except ValueError:
            raise ValueError(
                f"container {self.name}: limit {resource}={text!r} is not a whole number"
            ) from None


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod bound to the node, as the device plugin reads it."""

    namespace: str
    name: str
    uid: str
    phase: str
    created: str  # creationTimestamp (RFC 3339)
    scheduled_at: str  # PodScheduled condition's lastTransitionTime, or created
    seen: int  # when this view first saw the pod on the node (a counter)
    containers: tuple[ContainerView, ...]
    init_containers: tuple[ContainerView, ...]
    annotations: Mapping[str, str]
    deleting: bool  # deletionTimestamp set
    scheduler_name: str = ""  # spec.schedulerName

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bind_order(self) -> tuple[str, int]:
        return (self.scheduled_at, self.seen)

    @property
    def bind_time(self) -> float:
        """``scheduled_at`` in seconds since the epoch (0.0 when it has none)."""
        try:
            return datetime.fromisoformat(self.scheduled_at.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0

    def container(self, name: str) -> ContainerView | None:
        for container in (*self.init_containers, *self.containers):
            if container.name == name:
                return container
        return None


def _containers(items: Any) -> tuple[ContainerView, ...]:
    out = []
    for item in items or ():
        limits = (item.get("resources") or {}).get("limits") or {}
        out.append(
            ContainerView(
                str(item.get("name", "")),
                MappingProxyType({str(k): str(v) for k, v in limits.items()}),
            )
        )
    return tuple(out)


def pod_view(obj: Obj, seen: int) -> PodView:
    """The view of a pod object (``seen``: its first-seen counter)."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    created = str(metadata.get("creationTimestamp") or "")
    scheduled = next(
        (
            str(c.get("lastTransitionTime") or "")
            for c in status.get("conditions") or ()
            if c.get("type") == "PodScheduled" and c.get("status") == "True"
        ),
        "",
    )
    return PodView(
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        phase=str(status.get("phase") or "Pending"),
        created=created,
        scheduled_at=scheduled or created,
        seen=seen,
        containers=_containers(spec.get("containers")),
        init_containers=_containers(spec.get("initContainers")),
        annotations=MappingProxyType(dict(metadata.get("annotations") or {})),
        deleting=bool(metadata.get("deletionTimestamp")),
        scheduler_name=str(spec.get("schedulerName") or ""),
    )


def pods_on(node: str) -> Resource:
    """Pods, narrowed to those bound to ``node``."""
    return dataclasses.replace(PODS, field_selector=f"spec.nodeName={node}")


#: Told of each change: ("ADDED" | "MODIFIED", the pod) or ("DELETED", its last view).
PodListener = Callable[[str, PodView], None]


class BoundPodsView:
    """See the module docstring. Thread-safe; views are immutable snapshots. ``on_change``
    (optional) is told every change in order, on the watch's thread, after the view has it:
    a relist tells the pods gone meanwhile as DELETED, so a copy kept by it stays exact."""

    def __init__(
        self,
        api: ListWatchApi,
        node: str,
        watch_timeout_s: int = 300,
        on_change: PodListener | None = None,
    ) -> None:
        self.node = node
        self.on_change = on_change
        self.stop = threading.Event()
        self._by_uid: dict[str, PodView] = {}
        self._seen_count = 0
        self._changed = threading.Condition()
        self.informer = Informer(api, pods_on(node), self._take, self.stop, watch_timeout_s)

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> BoundPodsView:
        self.informer.start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        """Whether the first listing is in within ``timeout`` seconds."""
        return self.informer.synced.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        self.informer.close()
        self.informer.join(timeout)

    # ----------------------------------------------------------------------------- lookups
    def pods(self) -> list[PodView]:
        """Every pod bound to the node, in bind order."""
        with self._changed:
            found = list(self._by_uid.values())
        return sorted(found, key=lambda pod: pod.bind_order)

    def by_uid(self, uid: str) -> PodView | None:
        with self._changed:
            return self._by_uid.get(uid)

    def by_name(self, namespace: str, name: str) -> PodView | None:
        with self._changed:
            for pod in self._by_uid.values():
                if pod.name == name and pod.namespace == namespace:
                    return pod
        return None

    def wait_until(self, check: Callable[[list[PodView]], bool], timeout: float) -> bool:
        """Whether ``check`` (given :meth:`pods`) holds within ``timeout`` seconds; looks again
        after each change the watch brings (an ``Allocate`` that comes before its pod)."""
        with self._changed:
            return self._changed.wait_for(lambda: check(self._ordered()), timeout)

    def wait_for_uid(self, uid: str, timeout: float) -> PodView | None:
        """The pod of ``uid`` once the view has it (None after ``timeout`` seconds)."""
        self.wait_until(lambda _: uid in self._by_uid, timeout)
        return self.by_uid(uid)

    # ----------------------------------------------------------------------------- changes
    def _ordered(self) -> list[PodView]:
        return sorted(self._by_uid.values(), key=lambda pod: pod.bind_order)

    def _take(self, change: Change) -> None:
        uid = str((change.obj.get("metadata") or {}).get("uid", ""))
        with self._changed:
            known = self._by_uid.get(uid)
            if change.type == DELETED:
                self._by_uid.pop(uid, None)
                view = known or pod_view(change.obj, 0)
            else:
                if known is None:
                    self._seen_count += 1
                seen = known.seen if known is not None else self._seen_count
                view = self._by_uid[uid] = pod_view(change.obj, seen)
            self._changed.notify_all()
        if self.on_change is not None:
            self.on_change(change.type, view)
