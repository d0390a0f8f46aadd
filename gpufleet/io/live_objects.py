"""The admission objects of a live cluster, and workloads assembled from its pods one at a time.

Owns :class:`LiveCatalog`: the Queues, PriorityClasses and ResourceQuotas that an API server
(or a control plane's database) holds, read with the same readers and checks as scenario files
(``catalog``, ``assembly``), except that a bad object is set aside with its error (it is
stored already; the scheduler reports it and goes on with the rest) instead of failing the
whole read; and
:meth:`LiveCatalog.workload`, which turns the Pod objects of one gang (or one lone pod) into a
:class:`~gpufleet.model.workload.Workload` exactly the way ``read_scenario`` assembles a file's,
so the simulator and the Kubernetes backend decide from the same workloads. It does not watch
anything or decide when a gang is complete: the Kubernetes backend does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpufleet.io.assembly import DEFAULT_QUEUE, ScenarioBuilder, object_context, object_pods
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.catalog import Rejected, object_key
from gpufleet.io.kube.pods import pods_from_object
from gpufleet.io.kube.workload_settings import Setting, workload_settings
from gpufleet.io.manifests import Context, Manifest
from gpufleet.model.priorities import PriorityClass
from gpufleet.model.queues import Queue, ResourceQuota, implicit_default_queue
from gpufleet.model.workload import TimedPod, Workload

SOURCE = "kubernetes"


def live_manifest(obj: Mapping[str, Any], where: str | None = None) -> Manifest:
    """An API object as a manifest whose location is its resourceVersion (or ``where``)."""
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if where is None:
        where = f"resourceVersion {version}" if version else "live"
    return Manifest(obj, 0, 0, where=where)


class LiveCatalog:
    """See the module docstring. ``queues`` always has at least the implicit ``default``
    queue when no Queue object is valid (as a scenario without Queues has)."""

    def __init__(
        self,
        queues: Iterable[Mapping[str, Any]] = (),
        priority_classes: Iterable[Mapping[str, Any]] = (),
        resource_quotas: Iterable[Mapping[str, Any]] = (),
        source: str = SOURCE,
        where: str | None = None,
    ) -> None:
        """``source`` and ``where`` name the objects in errors (default: ``kubernetes`` and
        each object's resourceVersion)."""
        self._builder = builder = ScenarioBuilder(strict=False)
        self._source, self._where = source, where
        self._resource_rejected: list[Rejected] = []
        for kind, objects in (("Queue", queues), ("PriorityClass", priority_classes)):
            for obj in sorted(objects, key=object_key):
                builder.add_catalog_object(live_manifest({"kind": kind, **obj}, where), source)
        for obj in sorted(resource_quotas, key=object_key):
            manifest = live_manifest({"kind": "ResourceQuota", **obj}, where)
            try:
                builder.add(manifest, source)
            except InputError as error:
                self._resource_rejected.append(Rejected("ResourceQuota", object_key(obj), error))
        builder.check_tree()
        self.rejected: list[Rejected] = [*builder.rejected, *self._resource_rejected]
        self._declared = builder.queue_models()
        self.queues: dict[str, Queue] = dict(self._declared)
        if not self.queues:
            self.queues[DEFAULT_QUEUE] = implicit_default_queue()
        self.priority_classes: dict[str, PriorityClass] = builder.class_models()
        self.resource_quotas: list[ResourceQuota] = [s.value for s in builder.quotas.values()]

    def request_builder(self) -> ScenarioBuilder:
        """A builder that knows the good queues and priority classes, for reading the workloads
        of requests against them (forked per request), refusing a pod's own ``spec.priority``
        as the API server does. It knows the implicit ``default`` queue
        too, as the scheduler does: where a workload goes that names no queue and whose
        namespace no queue is the default for."""
        builder = ScenarioBuilder()
        builder.queues = dict(self._builder.queues)
        builder.namespace_queues = dict(self._builder.namespace_queues)
        builder.classes = dict(self._builder.classes)
        builder.global_default = self._builder.global_default
        builder.priority_admission = True
        if DEFAULT_QUEUE not in builder.queues:
            context = Context(self._source, "implicit").naming(f"Queue {DEFAULT_QUEUE}")
            builder.queues[DEFAULT_QUEUE] = Setting(implicit_default_queue(), context, None)
        return builder

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
            context = object_context(SOURCE, manifest.location, f"Pod {namespace}/{name}")
            settings = workload_settings(context, metadata, manifest["spec"], "spec")
            parts.append(object_pods(context, "Pod", name, namespace, timed, settings))
        if not parts:
            raise ValueError("a workload needs at least one pod")
        head = parts[0]
        gang = ("PodGroup", head.namespace, group) if group else ("Pod", head.namespace, head.name)
        return self._builder.assemble(gang, parts, self._declared).workload


def timed_pod(obj: Mapping[str, Any]) -> TimedPod:
    """One Pod object of the API as the readers read it. Raises :class:`InputError`. A live
    pod's ``nodeName`` is where it is bound (the backend reads that), not a choice of node to
    place it on, as a manifest's is: it is left out, as the backend's shared readings do."""
    spec = obj.get("spec")
    if isinstance(spec, Mapping) and "nodeName" in spec:
        obj = {**obj, "spec": {k: v for k, v in spec.items() if k != "nodeName"}}
    manifest = live_manifest({"kind": "Pod", "apiVersion": "v1", **obj})
    return pods_from_object(manifest, SOURCE, manifest.location)[0]


def with_min_member(workload: Workload, min_member: int) -> Workload:
    """``workload`` needing ``min_member`` of its pods (0: all), capped at its pod count."""
    return dataclasses.replace(workload, min_member=min(min_member, len(workload.pods)))
