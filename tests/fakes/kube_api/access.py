"""Who asked for what: each request as the attributes the real API server's RBAC authorizer
checks (verb, API group, resource with its subresource, namespace, name), per client.

The attributes are parsed from the URL alone, as the API server's request-info parser does
before any object is looked up, so a request for an object that does not exist (or a kind whose
CRD is not installed) is recorded too: RBAC would have been asked about it. HTTP methods map to
verbs as the API server maps them: GET of one object → get, of a collection → list, either with
``watch=true`` (or under the legacy ``/watch/`` prefix) → watch, POST → create, PUT → update,
PATCH → patch, DELETE of one object → delete, of a collection → deletecollection.
Paths outside ``/api`` and ``/apis/{group}/{version}`` (``/version``, discovery) are
non-resource URLs that every authenticated user may read; they are not recorded.

The client is the identity in the bearer token (``FakeApiServer.api_client(identity=...)``),
"" for a client that named none. With ``GPUFLEET_FAKE_KUBE_ACCESS_LOG`` set to a file, every
server appends what it recorded there when it stops, one JSON object a line tagged with the
test module that ran it, so that a whole test run's use can be checked against the shipped
roles (tests/deploy/rbac_evidence.py).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import unquote

#: The environment variable naming the file every server appends its record to.
ACCESS_LOG_ENV = "GPUFLEET_FAKE_KUBE_ACCESS_LOG"
#: What a token carries after this prefix and a dot is the client's identity.
TOKEN_PREFIX = "gpufleet-fake-token"
#: Namespace subresources: ``/api/v1/namespaces/{ns}/status`` is the Namespace's status, not a
#: resource named "status" in it (the API server's list). As there, a request for a Namespace
#: itself has that namespace as its namespace (a RoleBinding in it may grant reading it).
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True, order=True)
class Access:
    """One authorization question: may ``client`` ``verb`` the ``resource`` (``pods`` or
    ``pods/binding``) of API group ``group`` in ``namespace`` ("" cluster-wide), object
    ``name`` ("" for a collection, or a create)?"""

    client: str
    verb: str
    group: str
    resource: str
    namespace: str
    name: str


def identity_of(authorization: str | None) -> str:
    """The client named by an ``Authorization: Bearer <token>`` header ("" for none)."""
    token = (authorization or "").removeprefix("Bearer ").strip()
    prefix, dot, identity = token.partition(".")
    return identity if prefix == TOKEN_PREFIX and dot else ""


def token_for(identity: str) -> str:
    return f"{TOKEN_PREFIX}.{identity}" if identity else TOKEN_PREFIX


def request_access(client: str, method: str, path: str, query: dict[str, str]) -> Access | None:
    """The RBAC attributes of one request; None for a non-resource URL."""
    parts = [unquote(p) for p in path.strip("/").split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    watch = query.get("watch", "").lower() in ("true", "1")
    if rest[:1] == ["watch"]:
        watch, rest = True, rest[1:]
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    if not rest:
        return None
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return Access(client, verb, group, resource, namespace, name)


class AccessLog:
    """The accesses one server has seen (a set: the same question asked twice is one)."""

    def __init__(self) -> None:
        self._seen: set[Access] = set()
        self._lock = threading.Lock()

    def record(self, client: str, method: str, path: str, query: dict[str, str]) -> None:
        access = request_access(client, method, path, query)
        if access is not None:
            with self._lock:
                self._seen.add(access)

    def accesses(self, client: str | None = None) -> set[Access]:
        """Everything seen, or only what ``client`` asked."""
        with self._lock:
            return {a for a in self._seen if client is None or a.client == client}

    def append_to_env_file(self) -> None:
        """Append the record to the file ``GPUFLEET_FAKE_KUBE_ACCESS_LOG`` names, if set."""
        target = os.environ.get(ACCESS_LOG_ENV)
        if not target:
            return
        module = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
        lines = "".join(
            json.dumps({"module": module, **asdict(access)}, sort_keys=True) + "\n"
            for access in sorted(self.accesses())
        )
        # One O_APPEND write per server: parallel test workers do not interleave within it.
        fd = os.open(Path(target), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)


def read_access_log(path: Path) -> list[tuple[str, Access]]:
    """(test module, access) of every line of an access log file."""
    found: list[tuple[str, Access]] = []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            module = record.pop("module")
            found.append((module, Access(**record)))
    return found
