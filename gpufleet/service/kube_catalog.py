"""Admins' Queues and PriorityClasses on ``gpufleet serve --kubeconfig``: the cluster holds them.

Owns :class:`KubeCatalogWrites`, the part of :class:`~gpufleet.service.kube_plane.
KubeControlPlane` that writes them: each put or delete is checked as every path checks it
(:meth:`~gpufleet.service.plane_book.PlaneBook.changed_catalog`, against the objects the
informers hold), written as the plane itself (server-side apply, or a delete), and waited for
until the informers show it and the scheduler has a core built with it (a few seconds at
most), so that the caller reads what it wrote; then the change is published.
"""

from __future__ import annotations

import logging
from typing import Any

from gpufleet.backends.kube.scheduler import KubeScheduler
from gpufleet.io.errors import InputError
from gpufleet.kube_client.api import PRIORITY_CLASSES, QUEUES, ApiError
from gpufleet.kube_client.writer import ObjectWriter
from gpufleet.service.auth import Principal
from gpufleet.service.plane_book import QUEUE, Change, PlaneBook, object_name, require_admin
from gpufleet.service.states import ChangeKind

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: How long an admin's write may take to come back through the informers.
WRITE_VISIBLE_S = 10.0


class KubeCatalogWrites:
    """See the module docstring."""

    def __init__(self, book: PlaneBook, writer: ObjectWriter, scheduler: KubeScheduler) -> None:
        self.book = book
        self.writer = writer
        self.scheduler = scheduler

    def put_object(self, principal: Principal, kind: str, document: dict[str, Any]) -> str:
        """Create or replace a Queue or PriorityClass (admin only), checked as every path
        checks them first; returns once the scheduler's core is built with it."""
        require_admin(principal)
        name = object_name(document, kind)
        with self.book.lock:
            self.book.changed_catalog(*self._documents(), kind, name, document)
        body = dict(document)
        body.setdefault("apiVersion", "gpufleet.dev/v1alpha1" if kind == QUEUE
                        else "scheduling.k8s.io/v1")  # fmt: skip
        try:
            written = self.writer.apply(body)
        except ApiError as error:
            refused = f"the API server refused it: {error.message}"
            raise InputError(f"{kind} {name}", refused) from None
        version = str((written.get("metadata") or {}).get("resourceVersion") or "")
        self._until_seen(kind, name, version)
        self.book.publish([Change(ChangeKind.QUEUE, name, self.book.now(), {"kind": kind})], [])
        return name

    def delete_object(self, principal: Principal, kind: str, name: str) -> None:
        """Delete a Queue or PriorityClass (admin only) that nothing needs."""
        require_admin(principal)
        with self.book.lock:
            self.book.changed_catalog(*self._documents(), kind, name, None)
        self.writer.delete(kind, None, name)
        self._until_seen(kind, name, None)
        self.book.publish([Change(ChangeKind.QUEUE, name, self.book.now(), {"deleted": True})], [])

    def _until_seen(self, kind: str, name: str, version: str | None) -> None:
        """Wait (a few seconds at most) until the informers show the write (``version``; None:
        the object gone) and the scheduler has a core built with it, so that the caller reads
        what it wrote."""
        resource = QUEUES if kind == QUEUE else PRIORITY_CLASSES
        backend = self.scheduler.backend
        if not backend.wait_until_seen(resource, name, version, WRITE_VISIBLE_S):
            log.warning("%s %s written but not yet seen by the informers", kind, name)
            return
        with self.book.lock:
            backend.drain()
            self.scheduler.turn()  # builds the new core now, not on the next change

    def _documents(self) -> tuple[dict[str, Obj], dict[str, Obj]]:
        backend = self.scheduler.backend
        return (
            {str(o["metadata"]["name"]): o for o in backend.objects[QUEUES].values()},
            {str(o["metadata"]["name"]): o for o in backend.objects[PRIORITY_CLASSES].values()},
        )
