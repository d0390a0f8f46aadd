"""Durable state of the embedded control plane: one SQLite file in WAL mode.

Holds what must survive a ``kill -9``: accepted workloads (their parsed model form, so a restart
does not depend on the queues of the day), where each pod runs (node and devices, when it
started, how much work it had left), how far their jobs are (completions, failures, restarts),
the process each pod runs (``serve --local``), queues and priority classes as submitted, API
tokens (hashed), events and the cluster's history, the simulated clock, the telemetry
store's series (a blob), and (``serve --kubeconfig``) each Kubernetes object the plane created
for a submission, with its UID, tenant and workload: what the plane may delete, and whose
pods are whose (see :mod:`gpufleet.service.kube_identity`). Every write is a
transaction that is committed before the caller answers anyone: a workload acknowledged to a
client is on disk. WAL with ``synchronous=NORMAL`` survives a killed process (not a power cut
between checkpoints; use ``synchronous=FULL`` via ``durable=True`` for that). The file and its
``-wal``/``-shm`` are its owner's only (mode 0600, :mod:`gpufleet.service.private_files`).

The store is a plain repository: it does not decide anything, and it is not thread-safe on its
own (the control plane serialises calls under its lock). sqlite3 from the standard library is
used directly: the schema is ten small tables and an ORM would add nothing but weight. A schema
change is a step of ``Store._migrate``, run once on a file of an older schema.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from gpufleet.model import Placement
from gpufleet.model.processes import ProcessSpec
from gpufleet.model.workload import TimedWorkload
from gpufleet.service.private_files import is_file_path, prepare_private

log = logging.getLogger(__name__)

#: 2: tokens have a name, an expiry, a last-used time and a revocation time.
SCHEMA_VERSION = 3

_TIMED = TypeAdapter(TimedWorkload)
_PLACEMENT = TypeAdapter(Placement)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS pod_usage (
    key TEXT PRIMARY KEY, samples INTEGER NOT NULL, total REAL NOT NULL,
    first REAL NOT NULL, last REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS workloads (
    key TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    submitted REAL NOT NULL,
    state TEXT NOT NULL,
    started REAL,
    finished REAL
);
CREATE TABLE IF NOT EXISTS pods (
    key TEXT PRIMARY KEY,
    workload TEXT NOT NULL REFERENCES workloads(key),
    state TEXT NOT NULL,
    placement TEXT,
    started REAL,
    remaining REAL
);
CREATE INDEX IF NOT EXISTS pods_workload ON pods(workload);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    workload TEXT,
    type TEXT NOT NULL,
    reason TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_workload ON events(workload);
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    document TEXT NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    role TEXT NOT NULL,
    queues TEXT NOT NULL,
    created REAL NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    expires REAL,
    last_used REAL,
    revoked REAL
);
CREATE TABLE IF NOT EXISTS history (
    time REAL PRIMARY KEY,
    sample TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    workload TEXT PRIMARY KEY REFERENCES workloads(key),
    state TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS processes (
    workload TEXT PRIMARY KEY REFERENCES workloads(key),
    specs TEXT NOT NULL
);
"""


#: What version 3 of the schema adds: what the control plane on Kubernetes created, for whom
_CREATED_OBJECTS_V3 = """
CREATE TABLE IF NOT EXISTS created_objects (
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    api_version TEXT NOT NULL,
    uid TEXT NOT NULL,
    tenant TEXT NOT NULL,
    workload TEXT NOT NULL,
    PRIMARY KEY (namespace, kind, name)
);
CREATE INDEX IF NOT EXISTS created_objects_workload ON created_objects(workload);
CREATE INDEX IF NOT EXISTS created_objects_uid ON created_objects(uid);
"""


class StoreError(Exception):
    """The database file cannot be used (another program's file, a newer schema...)."""


@dataclass(frozen=True, slots=True)
class StoredPod:
    key: str
    state: str
    placement: Placement | None
    started: float | None
    remaining: float | None


@dataclass(frozen=True, slots=True)
class StoredWorkload:
    key: str
    seq: int
    tenant: str
    kind: str
    timed: TimedWorkload
    submitted: float
    state: str
    started: float | None
    finished: float | None
    pods: tuple[StoredPod, ...]


#: What version 1 of the schema lacks, added by the migration to version 2.
_TOKEN_COLUMNS_V2 = (
    "name TEXT NOT NULL DEFAULT ''",
    "expires REAL",
    "last_used REAL",
    "revoked REAL",
)
_TOKEN_FIELDS = "hash, tenant, role, queues, created, name, expires, last_used, revoked"


@dataclass(frozen=True, slots=True)
class StoredToken:
    """A token as stored (never the token itself): times in seconds since the epoch."""

    hash: str
    tenant: str
    role: str
    queues: tuple[str, ...]
    created: float
    name: str = ""
    #: None: it never expires (made so, or made before tokens had an expiry).
    expires: float | None = None
    last_used: float | None = None
    revoked: float | None = None

    @property
    def id(self) -> str:
        """How people name it (list, revoke): the start of its hash, which tells nothing of
        the token."""
        return self.hash[:TOKEN_ID_LENGTH]


TOKEN_ID_LENGTH = 12


@dataclass(frozen=True, slots=True)
class CreatedObject:
    """A Kubernetes object the control plane created for a submission (its create response's
    UID), the tenant that submitted it and the workload it was filed under."""

    namespace: str
    kind: str
    name: str
    api_version: str
    uid: str
    tenant: str
    workload: str


@dataclass(frozen=True, slots=True)
class StoredEvent:
    time: float
    workload: str | None
    type: str
    reason: str
    message: str


class Store:
    """See the module docstring."""

    def __init__(self, path: str | Path, durable: bool = False) -> None:
        self.path = str(path)
        try:
            prepare_private(self.path)
        except OSError as error:
            raise StoreError(f"{self.path}: cannot open the database ({error.strerror})") from None
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as error:
            raise StoreError(f"{self.path}: not a usable gpufleet database ({error})") from None
        version = self.meta("schema_version")
        found = 0 if version is None else int(version)  # 0: a new file
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: written by a newer gpufleet (schema {version}, "
                f"this one reads {SCHEMA_VERSION})"
            )
        if found < SCHEMA_VERSION:
            self._migrate(found)
        self._in_tx = False
        # Tokens are read and written on a connection of their own, under a lock of their
        # own: a request is authenticated without waiting for the control plane's lock (a
        # scheduling turn), and sees a token revoked by another process at once.
        self._tokens_lock = threading.Lock()
        self._tokens_db = (
            self._db
            if not is_file_path(self.path)
            else sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        )

    def _migrate(self, version: int) -> None:
        """Bring a database of schema ``version`` (0: a new file) to :data:`SCHEMA_VERSION`,
        in one transaction: each step runs once, on a file older than the version it makes."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if version < 2:
                present = {row[1] for row in self._db.execute("PRAGMA table_info(tokens)")}
                for column in _TOKEN_COLUMNS_V2:
                    if column.split()[0] not in present:
                        self._db.execute(f"ALTER TABLE tokens ADD COLUMN {column}")
                count = self._db.execute("SELECT COUNT(*) FROM tokens").fetchone()[0]
                if count:
                    log.warning(
                        "%s: %d token(s) made before tokens had an expiry never expire: list "
                        "them with `gpufleet admin tokens list` and revoke those no longer "
                        "needed (`gpufleet admin tokens revoke ID`)",
                        self.path,
                        count,
                    )
            if version < 3:
                for statement in _CREATED_OBJECTS_V3.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
            self.set_meta("schema_version", str(SCHEMA_VERSION))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        if self._tokens_db is not self._db:
            self._tokens_db.close()
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside are committed together, or none is (nested: joins the outer)."""
        if self._in_tx:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._in_tx = True
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")
        finally:
            self._in_tx = False

    # ----------------------------------------------------------------------------- meta
    def meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def blob(self, key: str) -> bytes | None:
        """A large value kept whole (the telemetry store's durable form)."""
        row = self._db.execute("SELECT value FROM blobs WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def set_blob(self, key: str, value: bytes) -> None:
        self._db.execute(
            "INSERT INTO blobs (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, sqlite3.Binary(value)),
        )

    def blobs(self, prefix: str) -> dict[str, bytes]:
        """Every blob whose key starts with ``prefix``, by key (the telemetry store's chunks)."""
        rows = self._db.execute(
            "SELECT key, value FROM blobs WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
        )
        return {str(key): bytes(value) for key, value in rows}

    def delete_blob(self, key: str) -> None:
        self._db.execute("DELETE FROM blobs WHERE key = ?", (key,))

    # ------------------------------------------------------------------------------ pod usage
    def pod_usage(self) -> list[tuple[str, int, float, float, float]]:
        """Every pod's usage summary (``namespace/pod``, samples, sum, first and last time),
        in the order of their last samples (the telemetry recorder's)."""
        rows = self._db.execute(
            "SELECT key, samples, total, first, last FROM pod_usage ORDER BY last, key"
        )
        return [(str(k), int(n), float(t), float(f), float(la)) for k, n, t, f, la in rows]

    def set_pod_usage(self, rows: Iterable[tuple[str, int, float, float, float]]) -> None:
        """Write these pods' summaries (new or changed): a save writes only what changed."""
        self._db.executemany(
            "INSERT INTO pod_usage (key, samples, total, first, last) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET samples = excluded.samples, "
            "total = excluded.total, first = excluded.first, last = excluded.last",
            rows,
        )

    def delete_pod_usage(self, keys: Iterable[str]) -> None:
        """Forget these pods' summaries (kept their 30 days)."""
        self._db.executemany("DELETE FROM pod_usage WHERE key = ?", ((key,) for key in keys))

    # ----------------------------------------------------------------------------- workloads
    def next_seq(self) -> int:
        row = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM workloads").fetchone()
        return int(row[0]) + 1

    def has_workload(self, key: str) -> bool:
        row = self._db.execute("SELECT 1 FROM workloads WHERE key = ?", (key,)).fetchone()
        return row is not None

    def add_workload(
        self, seq: int, tenant: str, kind: str, timed: TimedWorkload, submitted: float
    ) -> None:
        workload = timed.workload
        with self.transaction():
            self._db.execute(
                "INSERT INTO workloads (key, seq, tenant, kind, model, submitted, state) "
                "VALUES (?, ?, ?, ?, ?, ?, 'Pending')",
                (workload.key, seq, tenant, kind, _TIMED.dump_json(timed).decode(), submitted),
            )
            self._db.executemany(
                "INSERT INTO pods (key, workload, state, remaining) VALUES (?, ?, 'Pending', ?)",
                [(pod.key, workload.key, timed.duration) for pod in workload.pods],
            )

    def set_workload_model(self, timed: TimedWorkload) -> None:
        """Replace a workload's model form (its owner removed scheduling gates, resumed or
        suspended it): a restart takes it back so."""
        self._db.execute(
            "UPDATE workloads SET model = ? WHERE key = ?",
            (_TIMED.dump_json(timed).decode(), timed.workload.key),
        )

    def set_workload_state(
        self,
        key: str,
        state: str,
        started: float | None = None,
        finished: float | None = None,
    ) -> None:
        self._db.execute(
            "UPDATE workloads SET state = ?, started = COALESCE(?, started), "
            "finished = COALESCE(?, finished) WHERE key = ?",
            (state, started, finished, key),
        )

    def set_pod(
        self,
        key: str,
        state: str,
        placement: Placement | None = None,
        started: float | None = None,
        remaining: float | None = None,
    ) -> None:
        self._db.execute(
            "UPDATE pods SET state = ?, placement = ?, started = ?, remaining = ? WHERE key = ?",
            (
                state,
                None if placement is None else _PLACEMENT.dump_json(placement).decode(),
                started,
                remaining,
                key,
            ),
        )

    def set_pod_state(self, key: str, state: str) -> None:
        self._db.execute("UPDATE pods SET state = ? WHERE key = ?", (state, key))

    def set_job_states(self, key: str, states: dict[str, Any]) -> None:
        """The progress of a workload's jobs (its controllers' state, by job name)."""
        self._db.execute(
            "INSERT INTO jobs (workload, state) VALUES (?, ?) "
            "ON CONFLICT(workload) DO UPDATE SET state = excluded.state",
            (key, json.dumps(states, sort_keys=True)),
        )

    def job_states(self) -> dict[str, dict[str, Any]]:
        """Every workload's saved job progress, by workload key."""
        rows = self._db.execute("SELECT workload, state FROM jobs").fetchall()
        return {str(key): json.loads(state) for key, state in rows}

    def set_processes(self, key: str, specs: Mapping[str, ProcessSpec]) -> None:
        """The process of each pod of a workload (by pod key), as the local machine runs it."""
        document = {pod: spec.to_json() for pod, spec in specs.items()}
        self._db.execute(
            "INSERT INTO processes (workload, specs) VALUES (?, ?) "
            "ON CONFLICT(workload) DO UPDATE SET specs = excluded.specs",
            (key, json.dumps(document, sort_keys=True)),
        )

    def processes(self) -> dict[str, dict[str, ProcessSpec]]:
        """Every workload's processes, by workload key, then pod key."""
        rows = self._db.execute("SELECT workload, specs FROM processes").fetchall()
        return {
            str(key): {pod: ProcessSpec.from_json(spec) for pod, spec in json.loads(specs).items()}
            for key, specs in rows
        }

    def delete_workload(self, key: str) -> None:
        """Forget a workload and its pods (its events stay, as history)."""
        self._db.execute("DELETE FROM jobs WHERE workload = ?", (key,))
        self._db.execute("DELETE FROM processes WHERE workload = ?", (key,))
        self._db.execute("DELETE FROM pods WHERE workload = ?", (key,))
        self._db.execute("DELETE FROM workloads WHERE key = ?", (key,))

    def workloads(self, active_only: bool = False) -> list[StoredWorkload]:
        """Workloads in submission order (only those not finished, with ``active_only``)."""
        where = "WHERE state IN ('Pending', 'Admitted', 'Running')" if active_only else ""
        rows = self._db.execute(
            "SELECT key, seq, tenant, kind, model, submitted, state, started, finished "
            f"FROM workloads {where} ORDER BY seq"
        ).fetchall()
        pods: dict[str, list[StoredPod]] = {}
        for key, workload, state, placement, started, remaining in self._db.execute(
            "SELECT key, workload, state, placement, started, remaining FROM pods ORDER BY rowid"
        ):
            pods.setdefault(workload, []).append(
                StoredPod(
                    key,
                    state,
                    None if placement is None else _PLACEMENT.validate_json(placement),
                    started,
                    remaining,
                )
            )
        return [
            StoredWorkload(
                key,
                seq,
                tenant,
                kind,
                _TIMED.validate_json(model),
                submitted,
                state,
                started,
                finished,
                tuple(pods.get(key, ())),
            )
            for key, seq, tenant, kind, model, submitted, state, started, finished in rows
        ]

    # ----------------------------------------------------------------------------- events
    def add_events(self, events: Sequence[StoredEvent]) -> None:
        self._db.executemany(
            "INSERT INTO events (time, workload, type, reason, message) VALUES (?, ?, ?, ?, ?)",
            [(e.time, e.workload, e.type, e.reason, e.message) for e in events],
        )

    def events(self, workload: str | None = None, limit: int = 1000) -> list[StoredEvent]:
        """The latest ``limit`` events (of one workload), oldest first."""
        if workload is None:
            cursor = self._db.execute(
                "SELECT time, workload, type, reason, message FROM events ORDER BY id DESC LIMIT ?",
                (limit,),
            )
        else:
            cursor = self._db.execute(
                "SELECT time, workload, type, reason, message FROM events WHERE workload = ? "
                "ORDER BY id DESC LIMIT ?",
                (workload, limit),
            )
        return [StoredEvent(*row) for row in reversed(cursor.fetchall())]

    # ----------------------------------------------------------------------------- objects
    def put_object(self, kind: str, name: str, document: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT INTO objects (kind, name, document) VALUES (?, ?, ?) "
            "ON CONFLICT(kind, name) DO UPDATE SET document = excluded.document",
            (kind, name, json.dumps(document, sort_keys=True)),
        )

    def delete_object(self, kind: str, name: str) -> bool:
        cursor = self._db.execute("DELETE FROM objects WHERE kind = ? AND name = ?", (kind, name))
        return cursor.rowcount > 0

    def objects(self, kind: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT document FROM objects WHERE kind = ? ORDER BY name", (kind,)
        ).fetchall()
        return [json.loads(row[0]) for row in rows]

    # ----------------------------------------------------------------------------- tokens
    # Thread-safe, on the tokens' own connection (see __init__).
    def add_token(
        self,
        token_hash: str,
        tenant: str,
        role: str,
        queues: Sequence[str],
        created: float,
        name: str = "",
        expires: float | None = None,
    ) -> None:
        with self._tokens_lock:
            self._tokens_db.execute(
                "INSERT INTO tokens (hash, tenant, role, queues, created, name, expires) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (token_hash, tenant, role, json.dumps(list(queues)), created, name, expires),
            )

    def token(self, token_hash: str) -> StoredToken | None:
        """The token whose hash is ``token_hash``, as committed now (by any process)."""
        with self._tokens_lock:
            row = self._tokens_db.execute(
                f"SELECT {_TOKEN_FIELDS} FROM tokens WHERE hash = ?", (token_hash,)
            ).fetchone()
        return None if row is None else _stored_token(row)

    def tokens(self) -> list[StoredToken]:
        """Every token, oldest first."""
        with self._tokens_lock:
            rows = self._tokens_db.execute(
                f"SELECT {_TOKEN_FIELDS} FROM tokens ORDER BY created, hash"
            ).fetchall()
        return [_stored_token(row) for row in rows]

    def tokens_with_id(self, token_id: str) -> list[StoredToken]:
        """The tokens whose id (the start of the hash) starts with ``token_id``."""
        with self._tokens_lock:
            rows = self._tokens_db.execute(
                f"SELECT {_TOKEN_FIELDS} FROM tokens WHERE substr(hash, 1, ?) = ? ORDER BY created",
                (len(token_id), token_id.lower()),
            ).fetchall()
        return [_stored_token(row) for row in rows]

    def revoke_token(self, token_hash: str, at: float) -> bool:
        """Mark the token revoked at ``at`` (if it is not already); whether it was."""
        with self._tokens_lock:
            cursor = self._tokens_db.execute(
                "UPDATE tokens SET revoked = ? WHERE hash = ? AND revoked IS NULL",
                (at, token_hash),
            )
        return cursor.rowcount > 0

    def touch_token(self, token_hash: str, at: float) -> None:
        """Record that the token was used at ``at``."""
        with self._tokens_lock:
            self._tokens_db.execute(
                "UPDATE tokens SET last_used = ? WHERE hash = ?", (at, token_hash)
            )

    # ----------------------------------------------------------------------------- created
    def add_created(self, created: Sequence[CreatedObject]) -> None:
        """Record objects the plane created (one of the same kind, namespace and name before
        it is replaced: names are reused once an object is gone)."""
        with self.transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO created_objects "
                "(namespace, kind, name, api_version, uid, tenant, workload) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (c.namespace, c.kind, c.name, c.api_version, c.uid, c.tenant, c.workload)
                    for c in created
                ],
            )

    def created_objects(self) -> list[CreatedObject]:
        """Every object the plane recorded as created, in the order it created them."""
        rows = self._db.execute(
            "SELECT namespace, kind, name, api_version, uid, tenant, workload "
            "FROM created_objects ORDER BY rowid"
        ).fetchall()
        return [CreatedObject(*row) for row in rows]

    def forget_created(self, namespace: str, kind: str, name: str, uid: str) -> None:
        """Drop the record of an object (only the one of that UID: a newer one keeps its)."""
        self._db.execute(
            "DELETE FROM created_objects WHERE namespace = ? AND kind = ? AND name = ? AND uid = ?",
            (namespace, kind, name, uid),
        )

    # ----------------------------------------------------------------------------- history
    def add_history(self, time: float, sample: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO history (time, sample) VALUES (?, ?)",
            (time, json.dumps(sample)),
        )

    def history(self, limit: int) -> list[tuple[float, dict[str, Any]]]:
        rows = self._db.execute(
            "SELECT time, sample FROM history ORDER BY time DESC LIMIT ?", (limit,)
        ).fetchall()
        return [(float(t), json.loads(s)) for t, s in reversed(rows)]


def _stored_token(row: Sequence[Any]) -> StoredToken:
    token_hash, tenant, role, queues, created, name, expires, last_used, revoked = row
    return StoredToken(
        token_hash, tenant, role, tuple(json.loads(queues)), created, name, expires, last_used,
        revoked,
    )  # fmt: skip
