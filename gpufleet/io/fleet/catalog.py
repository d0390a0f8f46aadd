"""The Queues and PriorityClasses in force, checked together: the one check of every path.

Owns :class:`Catalog`: Queue and PriorityClass objects read one at a time (the readers of
``queues``, unknown fields refused), names unique, one default queue per namespace, one
globalDefault class, and the queue tree valid as a whole
(:func:`~gpufleet.model.queues.validate_queue_tree`: parents defined, no cycle, no negative
amount, a positive weight, children within their parent's quota). Every problem is an
:class:`~gpufleet.io.errors.InputError` naming the source, the object and the field, the same
on every path: scenario files (``place``, ``simulate``), a scenario loaded by ``serve``,
``PUT``/``DELETE /api/v1/queues``, the queues a database holds, Queue objects on Kubernetes.

Strict, the first problem raises (a file). Lenient, a bad object is set aside as
:class:`Rejected` and the rest kept, as objects that a database or an API server already holds
must be (a server still starts, the scheduler still schedules; they say which object is bad).
:func:`check_change` judges a change (objects put, objects deleted) against what is in force
(a request, a scenario loaded into a database): it is refused when an object it puts is bad or
when it breaks one that was good; objects that were bad already stay set aside.

It reads no files and knows nothing of workloads (``workloads`` resolves them against it).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.queues import priority_class_from_object, queue_from_object
from gpufleet.io.kube.workload_settings import Setting
from gpufleet.io.manifests import Context, Manifest
from gpufleet.model.priorities import PriorityClass
from gpufleet.model.queues import Queue, QueueTreeError, validate_queue_tree

QUEUE = "Queue"
PRIORITY_CLASS = "PriorityClass"
CATALOG_KINDS = (QUEUE, PRIORITY_CLASS)


@dataclass(frozen=True, slots=True)
class Rejected:
    """An object set aside: its kind, key (``name`` or ``namespace/name``) and why."""

    kind: str
    key: str
    error: InputError

    @property
    def message(self) -> str:
        return str(self.error)


def object_key(obj: Mapping[str, Any]) -> str:
    """``name``, or ``namespace/name`` for a namespaced object (``?`` for a missing name)."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name = str(metadata.get("name") or "?")
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else name


class Catalog:
    """Queues and priority classes being checked (see the module docstring)."""

    def __init__(self, strict: bool = True) -> None:
        self.strict = strict
        self.queues: dict[str, Setting[Queue]] = {}
        self.namespace_queues: dict[str, Setting[str]] = {}
        self.classes: dict[str, Setting[PriorityClass]] = {}
        self.global_default: Setting[PriorityClass] | None = None
        self.rejected: list[Rejected] = []

    # ---------------------------------------------------------------------------- reading
    def add_catalog_object(self, manifest: Manifest, source: str) -> None:
        """A Queue or PriorityClass (``manifest``'s kind); strict: a problem raises."""
        kind = str(manifest.get("kind"))
        if kind not in CATALOG_KINDS:
            raise ValueError(f"a catalog holds {' and '.join(CATALOG_KINDS)}, not {kind}")
        try:
            if kind == QUEUE:
                queue = queue_from_object(manifest, source, manifest.location)
                context = Context(source, manifest.location).naming(f"Queue {queue.name}")
                self._add_queue(Setting(queue, context, None))
            else:
                found = priority_class_from_object(manifest, source, manifest.location)
                context = Context(source, manifest.location).naming(f"PriorityClass {found.name}")
                self._add_class(Setting(found, context, None))
        except InputError as error:
            if self.strict:
                raise
            self.rejected.append(Rejected(kind, object_key(manifest), error))

    def _add_queue(self, setting: Setting[Queue]) -> None:
        queue = setting.value
        first = self.queues.get(queue.name)
        if first is not None:
            raise _twice(setting, first, "Queue", queue.name)
        for i, namespace in enumerate(queue.namespaces):
            owner = self.namespace_queues.get(namespace)
            if owner is not None:
                raise setting.context.error(
                    f"spec.namespaces[{i}]",
                    f"namespace {namespace!r} already has a default queue: {owner.value!r} "
                    f"(in {owner.where})",
                )
        self.queues[queue.name] = setting
        for i, namespace in enumerate(queue.namespaces):
            self.namespace_queues[namespace] = Setting(
                queue.name, setting.context, f"spec.namespaces[{i}]"
            )

    def _add_class(self, setting: Setting[PriorityClass]) -> None:
        found = setting.value
        first = self.classes.get(found.name)
        if first is not None:
            raise _twice(setting, first, "PriorityClass", found.name)
        if found.global_default and self.global_default is not None:
            raise setting.context.error(
                "globalDefault",
                f"two global default priority classes: {found.name!r} and "
                f"{self.global_default.value.name!r} (in {self.global_default.where})",
            )
        self.classes[found.name] = setting
        if found.global_default:
            self.global_default = setting

    # ---------------------------------------------------------------------------- the tree
    def check_tree(self) -> None:
        """The queues as one tree. Strict: the first problem raises; lenient: the queue at
        fault is set aside (its children then lack their parent, and go too) until the rest
        form a valid tree."""
        while self.queues:
            try:
                validate_queue_tree({name: s.value for name, s in self.queues.items()})
            except QueueTreeError as error:
                setting = self.queues[error.queue]
                message = str(error).removeprefix(f"queue {error.queue!r}: ")
                problem = setting.context.error(_tree_error_field(message), message)
                if self.strict:
                    raise problem from None
                self._drop_queue(error.queue)
                self.rejected.append(Rejected(QUEUE, error.queue, problem))
                continue
            return

    def _drop_queue(self, name: str) -> None:
        del self.queues[name]
        for namespace, owner in list(self.namespace_queues.items()):
            if owner.value == name:
                del self.namespace_queues[namespace]

    # ---------------------------------------------------------------------------- results
    def queue_models(self) -> dict[str, Queue]:
        return {name: setting.value for name, setting in self.queues.items()}

    def class_models(self) -> dict[str, PriorityClass]:
        return {name: setting.value for name, setting in self.classes.items()}

    def rejected_keys(self) -> set[tuple[str, str]]:
        return {(r.kind, r.key) for r in self.rejected}


def check_catalog(objects: Iterable[tuple[Manifest, str]], strict: bool = False) -> Catalog:
    """The catalog of ``objects`` (each with the source that names it in errors), checked:
    strict, the first problem raises; lenient, bad objects are in ``rejected``."""
    catalog = Catalog(strict)
    for manifest, source in objects:
        catalog.add_catalog_object(manifest, source)
    catalog.check_tree()
    return catalog


@dataclass(frozen=True, slots=True)
class CatalogChange:
    """A change checked: the catalogs before and after it, and what it sets aside
    (``problems``, in the order found: an object it puts that is bad, or one that was good and
    that it breaks, such as the parent whose children it puts above its quota). A change with
    problems is to be refused, with the first."""

    before: Catalog
    after: Catalog
    problems: tuple[Rejected, ...]


def check_change(
    before: Iterable[tuple[Manifest, str]],
    after: Iterable[tuple[Manifest, str]],
    changed: Collection[tuple[str, str]],
) -> CatalogChange:
    """The change from the objects ``before`` to the objects ``after``, where ``changed``
    ((kind, name) pairs) were put or deleted. Objects that were bad before and that the change
    does not touch do not count against it."""
    old = check_catalog(before)
    new = check_catalog(after)
    was_bad = old.rejected_keys() - set(changed)
    problems = tuple(r for r in new.rejected if (r.kind, r.key) not in was_bad)
    return CatalogChange(old, new, problems)


# ---------------------------------------------------------------------------------- helpers
def _twice(setting: Setting[Any], first: Setting[Any], kind: str, name: str) -> InputError:
    return setting.context.error(
        "metadata.name", f"{kind} {name!r} appears twice (first in {first.where})"
    )


_TREE_FIELDS = (
    (re.compile(r"^children's (\S+) quotas"), "spec.quota[{0}]"),
    (re.compile(r"^(quota|borrowingLimit|lendingLimit) of (\S+) is negative"), "spec.{0}[{1}]"),
    (re.compile(r"^weight "), "spec.weight"),
    (re.compile(r"^parents? "), "spec.parent"),
)


def _tree_error_field(message: str) -> str:
    """The Queue field a :class:`QueueTreeError` is about (the model names only the queue)."""
    for pattern, field in _TREE_FIELDS:
        match = pattern.match(message)
        if match is not None:
            return field.format(*match.groups())
    return "spec"
