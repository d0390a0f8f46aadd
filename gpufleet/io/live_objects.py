"""The admission objects of a live cluster, and workloads assembled from its pods one at a time.

Owns :class:`LiveCatalog`: the Queues, PriorityClasses and ResourceQuotas that an API server
holds, read with the same readers and checks as scenario files (``workloads``), except that a
bad object is set aside with its error (the API server already stores it; the scheduler reports
it and goes on with the rest) instead of failing the whole read; and
:meth:`LiveCatalog.workload`, which turns the Pod objects of one gang (or one lone pod) into a
:class:`~gpufleet.model.tenancy.Workload` exactly the way ``read_scenario`` assembles a file's,
so the simulator and the Kubernetes backend decide from the same workloads. It does not watch
anything or decide when a gang is complete: the Kubernetes backend does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.io.errors import InputError
from gpufleet.io.kube_pods import pods_from_object
from gpufleet.io.manifests import Manifest
from gpufleet.io.tenancy import workload_settings
from gpufleet.io.workloads import DEFAULT_QUEUE, _Builder, _context, _part
from gpufleet.model.tenancy import (
    PriorityClass,
    Queue,
    QueueTreeError,
    ResourceQuota,
    Workload,
    validate_queue_tree,
)
from gpufleet.model.workload import TimedPod

SOURCE = "kubernetes"


@dataclass(frozen=True, slots=True)
class Rejected:
    """An object set aside: its kind, key (``name`` or ``namespace/name``) and why."""

    kind: str
    key: str
    message: str


def live_manifest(obj: Mapping[str, Any]) -> Manifest:
    """An API object as a manifest whose location is its resourceVersion."""
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return Manifest(obj, 0, 0, where=f"resourceVersion {version}" if version else "live")


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name", "?"))
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else name


class LiveCatalog:
    """See the module docstring. ``queues`` always has at least the implicit ``default``
    queue when no Queue object is valid (as a scenario without Queues has)."""

    def __init__(
        self,
        queues: Iterable[Mapping[str, Any]] = (),
        priority_classes: Iterable[Mapping[str, Any]] = (),
        resource_quotas: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.rejected: list[Rejected] = []
        self._builder = builder = _Builder()
        for obj in sorted(queues, key=_key):
            self._take("Queue", obj)
        for obj in sorted(priority_classes, key=_key):
            self._take("PriorityClass", obj)
        for obj in sorted(resource_quotas, key=_key):
            self._take("ResourceQuota", obj)
        self._drop_broken_tree()
        self._declared = {n: s.value for n, s in builder.queues.items()}
        self.queues: dict[str, Queue] = dict(self._declared)
        if not self.queues:
            self.queues[DEFAULT_QUEUE] = Queue(DEFAULT_QUEUE)
        self.priority_classes: dict[str, PriorityClass] = {
            name: setting.value for name, setting in builder.classes.items()
        }
        self.resource_quotas: list[ResourceQuota] = [s.value for s in builder.quotas.values()]

    def _take(self, kind: str, obj: Mapping[str, Any]) -> None:
        manifest = live_manifest({"kind": kind, **obj})
        try:
            self._builder.add(manifest, SOURCE)
        except InputError as error:
            self.rejected.append(Rejected(kind, _key(obj), str(error)))

    def _drop_broken_tree(self) -> None:
        """Set aside queues until the rest form a valid tree (a cycle, a missing parent...)."""
        settings = self._builder.queues
        while settings:
            try:
                validate_queue_tree({name: s.value for name, s in settings.items()})
            except QueueTreeError as error:
                setting = settings.pop(error.queue)
                self.rejected.append(Rejected("Queue", error.queue, f"{setting.where}: {error}"))
                for namespace, owner in list(self._builder.namespace_queues.items()):
                    if owner.value == error.queue:
                        del self._builder.namespace_queues[namespace]
                continue
            return

    def workload(
        self,
        pods: Sequence[Mapping[str, Any]],
        group: str | None = None,
        parsed: Callable[[Any], TimedPod] | None = None,
    ) -> Workload:
        """The workload of ``pods`` (all in one namespace): the gang ``group`` when given (its
        minMember is the caller's to set), else one lone pod. Raises :class:`InputError`
        naming the pod and field at fault. ``parsed``: the caller's :func:`timed_pod` for an
        object, when it keeps them (each pod is then read once, not once per use)."""
        parts = []
        for obj in pods:
            manifest = live_manifest({"kind": "Pod", "apiVersion": "v1", **obj})
            timed = (timed_pod(obj) if parsed is None else parsed(obj),)
            metadata: dict[str, Any] = manifest["metadata"]
            name, namespace = str(metadata["name"]), str(metadata.get("namespace") or "default")
            context = _context(SOURCE, manifest.location, f"Pod {namespace}/{name}")
            settings = workload_settings(context, metadata, manifest["spec"], "spec")
            parts.append(_part(context, "Pod", name, namespace, timed, settings))
        if not parts:
            raise ValueError("a workload needs at least one pod")
        head = parts[0]
        gang = ("PodGroup", head.namespace, group) if group else ("Pod", head.namespace, head.name)
        return self._builder._workload(gang, parts, self._declared).workload


def timed_pod(obj: Mapping[str, Any]) -> TimedPod:
    """One Pod object of the API as the readers read it. Raises :class:`InputError`."""
    manifest = live_manifest({"kind": "Pod", "apiVersion": "v1", **obj})
    return pods_from_object(manifest, SOURCE, manifest.location)[0]


def with_min_member(workload: Workload, min_member: int) -> Workload:
    """``workload`` needing ``min_member`` of its pods (0: all), capped at its pod count."""
    return dataclasses.replace(workload, min_member=min(min_member, len(workload.pods)))
