""":class:`FakeApiServer`, the face tests use: lifecycle, client configuration, direct store
access (playing kubelet and controllers), and fault injection."""

from __future__ import annotations

import builtins
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import kubernetes.client

from tests.fakes.kube_api import errors
from tests.fakes.kube_api.access import Access, token_for
from tests.fakes.kube_api.authz import Caller
from tests.fakes.kube_api.resources import ResourceType
from tests.fakes.kube_api.server import HttpServer, ServerState
from tests.fakes.kube_api.store import Obj, Store


class FakeApiServer:
    """An in-process Kubernetes API server for the official python client.

    Direct store methods are thread-safe and produce the same watch events as API calls;
    they raise :class:`~tests.fakes.kube_api.errors.ApiError` (``.code`` 404, 409, ...)
    where the API would answer that error. Unlike the API, they write status as given.
    """

    def __init__(self) -> None:
        self.store = Store()
        self._state = ServerState(self.store)
        self._http: HttpServer | None = None
        #: The port of the first start: a server stopped and started again comes back there,
        #: as a restarted API server does (its clients' configuration still points at it).
        self._port = 0

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        if self._http is None:
            self._http = HttpServer(self._state, self._port)
            self._port = self._http.port
            self._http.start()
        return self

    def stop(self) -> None:
        """Stop answering (connections are refused; the objects are kept until
        :meth:`start` again)."""
        if self._http is not None:
            self._http.stop()
            self._http = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``; the server must be started."""
        if self._http is None:
            raise RuntimeError("FakeApiServer is not started")
        return self._http.url

    @property
    def requests(self) -> builtins.list[tuple[str, str]]:
        """``(method, path)`` of every request handled, query strings left out."""
        return self._state.requests

    @property
    def queries(self) -> builtins.list[dict[str, str]]:
        """The query of each request in :attr:`requests`, in the same order."""
        return self._state.queries

    def lists_and_watches(self, path: str) -> tuple[int, int]:
        """How many GETs of the collection ``path`` were lists, and how many watches."""
        watches = lists = 0
        for (method, seen), query in zip(self.requests, self.queries, strict=True):
            if method == "GET" and seen == path:
                if query.get("watch", "").lower() in ("true", "1"):
                    watches += 1
                else:
                    lists += 1
        return lists, watches

    @property
    def callers(self) -> builtins.list[Caller]:
        """Every request handled with who sent it: the user and groups it impersonated (None
        and (): the kubeconfig's own identity)."""
        return self._state.callers

    def grant_writes(self, user: str, namespace: str) -> None:
        """Let the impersonated ``user`` create, update, patch and delete in ``namespace``.
        From the first grant on, an impersonated user's write anywhere it was not granted
        (a cluster-scoped object included) is refused with RBAC's 403; reads and the
        kubeconfig's own identity are never checked."""
        self._state.authorizer.grant(user, namespace)

    def accesses(self, client: str | None = None) -> set[Access]:
        """The RBAC attributes of every request handled (:mod:`~tests.fakes.kube_api.access`),
        or of those ``client`` (the identity its token names) made."""
        return self._state.access.accesses(client)

    def wait_for(self, check: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
        """Wait until ``check`` holds, looking again after each write to the store and each
        watch opened (a bind, a kubelet's update, a lease renewed). ``check`` runs under the
        store's lock: it reads the store directly (:meth:`get`, :meth:`list`), never over
        HTTP. Raises AssertionError after ``timeout`` seconds."""
        with self.store.changed:
            if not self.store.changed.wait_for(check, timeout):
                raise AssertionError(f"timed out waiting for {what or check}")

    def wait_for_request(self, method: str, path: str, timeout: float = 10.0) -> None:
        """Wait until a ``method`` request for ``path`` has been received."""
        with self._state.logged:
            seen = self._state.logged.wait_for(
                lambda: (method, path) in self._state.requests, timeout
            )
        if not seen:
            raise AssertionError(f"no {method} {path} within {timeout} s")

    # ---- client configuration ------------------------------------------------------------

    def write_kubeconfig(self, path: str | Path, identity: str = "") -> Path:
        """Write a kubeconfig (JSON, which is YAML) for this server; returns its path. Its
        token names ``identity`` (see :meth:`accesses`)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token_for(identity)}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": "default"},
                }
            ],
            "current-context": "fake",
        }
        out = Path(path)
        out.write_text(json.dumps(config, indent=2))
        return out

    def configuration(self, identity: str = "") -> kubernetes.client.Configuration:
        """A client ``Configuration`` for this server (not made the default), whose token
        names ``identity``."""
        config = kubernetes.client.Configuration()
        config.host = self.url
        config.api_key = {"authorization": token_for(identity)}
        config.api_key_prefix = {"authorization": "Bearer"}
        return config

    def api_client(self, identity: str = "") -> kubernetes.client.ApiClient:
        """A ``kubernetes.client.ApiClient`` on :meth:`configuration`."""
        return kubernetes.client.ApiClient(self.configuration(identity))

    # ---- direct store access -------------------------------------------------------------

    def _type(self, api_version: str, kind: str) -> ResourceType:
        with self.store.lock:
            rt = self.store.registry.by_kind(api_version, kind)
        if rt is None:
            raise errors.ApiError(404, f"no resource for {api_version} {kind}", "NotFound")
        return rt

    def _of(self, obj: Obj) -> tuple[ResourceType, str | None, str]:
        rt = self._type(obj.get("apiVersion", ""), obj.get("kind", ""))
        meta = obj.get("metadata") or {}
        return rt, meta.get("namespace"), meta.get("name", "")

    def create(self, obj: Obj) -> Obj:
        """Create ``obj`` (``apiVersion`` and ``kind`` set; namespace defaults to default)."""
        rt, namespace, _ = self._of(obj)
        return self.store.create(rt, obj, namespace, as_client=False)

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        rt = self._type(api_version, kind)
        try:
            return self.store.get(rt, namespace or "default", name)
        except errors.ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> builtins.list[Obj]:
        """All objects of a kind, of one namespace or (None) of all."""
        items, _ = self.store.list(self._type(api_version, kind), namespace)
        return items

    def update(self, obj: Obj) -> Obj:
        """Replace ``obj`` whole, status included; a ``metadata.resourceVersion`` that is not
        current is a 409, none is unconditional. Removing the last finalizer of an object being
        deleted removes it."""
        rt, namespace, name = self._of(obj)
        return self.store.update(rt, obj, namespace or "default", name, None, as_client=False)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Remove at once (like grace period 0, ignoring finalizers); 404 if absent."""
        self.store.remove(self._type(api_version, kind), namespace or "default", name)

    # ---- fault injection -----------------------------------------------------------------

    def compact(self) -> None:
        """Forget all history: watching from any resourceVersion handed out so far is 410."""
        self.store.compact()

    def close_watches(self) -> None:
        """End every open watch stream cleanly, as a server-side timeout would."""
        self.store.close_watches()

    def freeze(self) -> None:
        """Hold every request from now on unanswered (connections are accepted and requests
        read and logged) until :meth:`thaw`, which carries them out, as a paused API server
        would; open watches stay open and quiet."""
        self._state.answering.clear()

    def thaw(self) -> None:
        self._state.answering.set()

    @contextmanager
    def outage(self) -> Iterator[None]:
        """The API server down for the body of the ``with`` (connections refused, open ones
        closed), then up again at the same address with the same objects."""
        if self._http is None:
            raise RuntimeError("FakeApiServer is not started")
        self.stop()
        try:
            yield
        finally:
            self.start()

    def drop_connections(self) -> None:
        """Lose every open connection at once (watches end mid-stream, with no last chunk),
        as a restarted API server or a broken network path does; new ones are served."""
        if self._http is not None:
            self._http.drop_connections()

    def fail_next(
        self,
        method: str,
        path_pattern: str,
        status: int,
        times: int = 1,
        commit: bool = False,
        hold: threading.Event | None = None,
    ) -> None:
        """Answer the next ``times`` requests of ``method`` (``"*"``: any) whose path matches
        the regex ``path_pattern`` (``re.search``) with a ``Status`` of code ``status`` (0:
        the connection is closed, no answer). ``commit``: carry the request out all the same
        (an answer lost, a write that timed out and committed). ``hold``: answer only once
        that event is set (a request held in the API server, as while etcd is away)."""
        self._state.add_fault(method, path_pattern, status, times, commit, hold)

    def answer_late(
        self, method: str, path_pattern: str, release: threading.Event, times: int = 1
    ) -> None:
        """Carry out the next ``times`` matching requests at once, so that watches see their
        writes, but send each its true answer only once ``release`` is set: a client that
        takes its watch events before its own calls' answers (a loaded one can)."""
        self._state.add_fault(
            method, path_pattern, 200, times, commit=True, hold=release, late=True
        )

    def clear_faults(self) -> None:
        """Forget the faults not used up yet: every request is served again."""
        self._state.clear_faults()
