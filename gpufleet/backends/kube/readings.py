"""Pods and lone-pod workloads read once per shape, not once per pod.

Owns :class:`PodReadings`. A cluster's pods are mostly replicas: thousands of pods of a few
templates that differ only in their names and in fields no reader looks at (the projected
service-account volume's random name, uid, resourceVersion, managed fields, status). Reading
one costs about 50 µs and making a lone pod's workload about 40 µs more, which at a
scheduler's start with 10,000 pending pods was most of the time to the first bind.

Each object is first cut down to its *shape*: its namespace, labels, annotations and spec
without volumes, without containers' volume mounts and without ``nodeName``, under a fixed
placeholder name. The readers then read the shape, never the object, so two objects of equal
shape are read identically by construction, and the reading is kept under the shape's JSON
text; an object of a known shape gets a copy of the reading with its own name. Workloads are
kept the same way per catalog (queues and priority classes decide them). A shape that does
not read (an error) is read again from the whole object, so the error names the real pod and
field; errors are not kept. The cut leaves out only what no reader reads: a test reads
objects whole and as shapes and compares.
"""

from __future__ import annotations

import dataclasses
import marshal
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from gpufleet.io.errors import InputError
from gpufleet.io.live_objects import LiveCatalog, timed_pod
from gpufleet.kube_client.informer import object_key
from gpufleet.model import Pod
from gpufleet.model.workload import TimedPod, Workload

Obj = dict[str, Any]
T = TypeVar("T")

#: The name every shape is read under (a valid DNS-1123 name that no reading keeps).
PLACEHOLDER = "shape"
#: Spec fields no reader reads that differ from pod to pod of one template.
_SPEC_LEFT_OUT = frozenset({"volumes", "nodeName"})
_CONTAINER_LEFT_OUT = frozenset({"volumeMounts"})
_CONTAINER_LISTS = ("containers", "initContainers")
#: Readings kept at most (shapes, not pods: a cluster has few).
MAX_SHAPES = 4096


def shape_of(obj: Mapping[str, Any]) -> Obj:
    """``obj`` as the readers need it: see the module docstring."""
    metadata = obj.get("metadata") or {}
    shape_metadata: Obj = {"name": PLACEHOLDER}
    for key in ("namespace", "labels", "annotations"):
        if key in metadata:
            shape_metadata[key] = metadata[key]
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec = {k: v for k, v in spec.items() if k not in _SPEC_LEFT_OUT}
        for key in _CONTAINER_LISTS:
            containers = spec.get(key)
            if isinstance(containers, list):
                spec[key] = [
                    {k: v for k, v in c.items() if k not in _CONTAINER_LEFT_OUT}
                    if isinstance(c, dict)
                    else c
                    for c in containers
                ]
    shape: Obj = {"metadata": shape_metadata, "spec": spec}
    for key in ("kind", "apiVersion"):
        if key in obj:
            shape[key] = obj[key]
    return shape


def _name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


class PodReadings:
    """See the module docstring. Each object's shape is worked out once per resourceVersion."""

    def __init__(self, max_shapes: int = MAX_SHAPES) -> None:
        self.max_shapes = max_shapes
        #: Per object (``namespace/name``): its resourceVersion, shape key and reading.
        self._objects: dict[str, tuple[str, bytes, TimedPod]] = {}
        self._pods: dict[bytes, TimedPod] = {}
        self._workloads: dict[bytes, Workload] = {}
        self._catalog: LiveCatalog | None = None
        #: Objects read from a kept reading, and shapes read anew.
        self.hits = 0
        self.misses = 0

    def timed_pod(self, obj: Mapping[str, Any]) -> TimedPod:
        """``obj`` read as a pod. Raises :class:`~gpufleet.io.errors.InputError`."""
        reading = self._object(obj)[2]
        return dataclasses.replace(reading, pod=reading.pod.renamed(_name_of(obj)))

    def workload(self, catalog: LiveCatalog, obj: Mapping[str, Any]) -> Workload:
        """The workload of one lone pod, as ``catalog.workload([obj])`` makes it."""
        if catalog is not self._catalog:
            self._catalog = catalog
            self._workloads.clear()
        _, key, reading = self._object(obj)
        known = self._workloads.get(key)
        if known is None:
            known = _read(
                obj, shape_of(obj), lambda o: catalog.workload([o], None, _Reader(reading))
            )
            self._keep(self._workloads, key, known)
        name = _name_of(obj)
        return known.renamed(name, tuple(pod.renamed(name) for pod in known.pods))

    def shapes(self, objs: Iterable[Mapping[str, Any]]) -> tuple[list[Pod], list[float], list[Any]]:
        """The pods ``objs`` read as: one pod per shape and how many objects have it (what a
        target workload is made of, without a pod object per replica), and the objects that
        do not read."""
        counts: dict[bytes, list[Any]] = {}
        broken: list[Any] = []
        for obj in objs:
            try:
                _, key, reading = self._object(obj)
            except InputError:
                broken.append(obj)
                continue
            seen = counts.get(key)
            if seen is None:
                counts[key] = [reading.pod, 1.0]
            else:
                seen[1] += 1.0
        return [c[0] for c in counts.values()], [c[1] for c in counts.values()], broken

    def read(self, obj: Mapping[str, Any]) -> None:
        """Read ``obj`` now (what :meth:`timed_pod`, :meth:`workload` and :meth:`shapes` then
        take from memory). Raises :class:`~gpufleet.io.errors.InputError`."""
        self._object(obj)

    def forget(self, key: str) -> None:
        """The object ``key`` is gone."""
        self._objects.pop(key, None)

    def _object(self, obj: Mapping[str, Any]) -> tuple[str, bytes, TimedPod]:
        """(resourceVersion, shape key, the shape's reading) of ``obj``."""
        metadata = obj.get("metadata") or {}
        key_of_object = object_key(obj)
        version = str(metadata.get("resourceVersion") or "")
        seen = self._objects.get(key_of_object)
        if seen is not None and version and seen[0] == version:
            return seen
        shape = shape_of(obj)
        # marshal's format 2 writes values, not object identities (no back-references), so
        # equal shapes give equal bytes; it is several times faster than json.dumps.
        key = marshal.dumps(shape, 2)
        reading = self._pods.get(key)
        if reading is None:
            self.misses += 1
            reading = _read(obj, shape, timed_pod)
            self._keep(self._pods, key, reading)
        else:
            self.hits += 1
        entry = (version, key, reading)
        self._objects[key_of_object] = entry
        return entry

    def _keep(self, store: dict[bytes, Any], key: bytes, value: object) -> None:
        if len(store) >= self.max_shapes:
            store.clear()  # a cluster of that many shapes gains nothing from keeping them
        store[key] = value


class _Reader:
    """The pod reader ``catalog.workload`` is given: the reading already made (of the shape,
    or of the whole object when the shape would not read)."""

    def __init__(self, timed: TimedPod) -> None:
        self.timed = timed

    def __call__(self, obj: Mapping[str, Any]) -> TimedPod:
        return self.timed


def _read(obj: Mapping[str, Any], shape: Obj, read: Callable[[Any], T]) -> T:
    try:
        return read(shape)
    except InputError:
        # The error is the whole object's to tell (its name, its fields): reading it whole
        # raises it (and should that read after all, its reading is the answer).
        return read(obj)
