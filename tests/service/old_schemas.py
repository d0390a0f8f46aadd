"""The CREATE statements of each older gpufleet database, word for word from the release that
wrote it (``git show REV:gpufleet/service/store.py``), for the migration tests: a database
built from one of these, with its ``schema_version``, is what an upgrade finds on disk.
Never edit one: a new schema version adds a new constant here."""

from __future__ import annotations

#: the first release (1e4c337): before blobs, jobs and processes
SCHEMA_1_FIRST = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
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
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS history (
    time REAL PRIMARY KEY,
    sample TEXT NOT NULL
);
"""

#: the last schema 1 (ff8a13b^): tokens without an expiry
SCHEMA_1_LAST = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, value BLOB NOT NULL);
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
    created REAL NOT NULL
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

#: schema 2 (ff8a13b): tokens expire; before created_objects
SCHEMA_2 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, value BLOB NOT NULL);
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

#: (schema_version it was written with, its CREATE statements), by a name for test ids.
OLDER_SCHEMAS = {
    "schema-1-first": (1, SCHEMA_1_FIRST),
    "schema-1-last": (1, SCHEMA_1_LAST),
    "schema-2": (2, SCHEMA_2),
}
