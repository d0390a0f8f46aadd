"""An upgrade meets the database an older gpufleet wrote: each older schema (built from that
release's own CREATE statements, ``old_schemas``), with a workload, its pod, an event, an object
and a token in it, is migrated when first opened to the schema a new database gets, with
everything kept; a database of a newer schema is refused, naming both versions."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.service.auth import hash_token
from gpufleet.service.store import SCHEMA_VERSION, CreatedObject, Store, StoreError
from gpufleet.testing.builders import make_pod
from tests.service.old_schemas import OLDER_SCHEMAS

MADE = 1_700_000_000.0
JOB = TimedWorkload(Workload("train", "team-a", (make_pod("train", gpus=2),), "team-a"), 0.0, 60.0)


def old_database(path: Path, version: int, schema: str) -> Path:
    """A database as the release with ``schema`` left it, holding one of each thing."""
    with sqlite3.connect(path) as raw:
        raw.executescript(schema)
        raw.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(version),))
        raw.execute(
            "INSERT INTO workloads (key, seq, tenant, kind, model, submitted, state, started) "
            "VALUES (?, 1, 'team-a', 'Pod', ?, 5.0, 'Running', 6.0)",
            (JOB.workload.key, TypeAdapter(TimedWorkload).dump_json(JOB).decode()),
        )
        raw.execute(
            "INSERT INTO pods (key, workload, state, started, remaining) "
            "VALUES ('team-a/train', ?, 'Running', 6.0, 54.0)",
            (JOB.workload.key,),
        )
        raw.execute(
            "INSERT INTO events (time, workload, type, reason, message) "
            "VALUES (6.0, ?, 'Normal', 'Scheduled', 'placed')",
            (JOB.workload.key,),
        )
        raw.execute("INSERT INTO objects VALUES ('Queue', 'team-a', ?)", (json.dumps({"a": 1}),))
        raw.execute(
            "INSERT INTO tokens (hash, tenant, role, queues, created) "
            "VALUES (?, 'team-a', 'tenant', '[]', ?)",
            (hash_token("gf_old"), MADE),
        )
    raw.close()
    return path


def shape(path: Path) -> dict[str, list[tuple[str, str, int, object]]]:
    """Each table's and index's columns (name, type, not null, default), by name."""
    with sqlite3.connect(path) as raw:
        names = [
            row[0]
            for row in raw.execute(
                "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        found = {
            name: [tuple(row[1:5]) for row in raw.execute(f"PRAGMA table_xinfo('{name}')")]
            for name in names
        }
    raw.close()
    return found


@pytest.mark.parametrize("older", list(OLDER_SCHEMAS), ids=list(OLDER_SCHEMAS))
def test_an_older_database_is_migrated_to_the_new_schema_with_everything_kept(
    tmp_path: Path, older: str
) -> None:
    version, schema = OLDER_SCHEMAS[older]
    assert version < SCHEMA_VERSION
    db = old_database(tmp_path / "old.db", version, schema)
    store = Store(db)
    try:
        assert store.meta("schema_version") == str(SCHEMA_VERSION)
        [workload] = store.workloads()
        assert (workload.timed, workload.state, workload.tenant) == (JOB, "Running", "team-a")
        assert [(pod.key, pod.remaining) for pod in workload.pods] == [("team-a/train", 54.0)]
        assert [event.reason for event in store.events(JOB.workload.key)] == ["Scheduled"]
        assert store.objects("Queue") == [{"a": 1}]
        [token] = store.tokens()
        kept = (token.tenant, token.created, token.expires, token.revoked)
        assert kept == ("team-a", MADE, None, None)
        created = CreatedObject("team-a", "Job", "train", "batch/v1", "u1", "team-a", "train")
        store.add_created([created])  # what schema 3 added works
        assert store.created_objects() == [created]
    finally:
        store.close()
    fresh = tmp_path / "new.db"
    Store(fresh).close()
    assert shape(db) == shape(fresh)


def test_a_newer_database_is_refused_naming_both_versions(tmp_path: Path) -> None:
    db = tmp_path / "newer.db"
    Store(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    raw.close()
    with pytest.raises(StoreError, match=f"newer gpufleet \\(schema {SCHEMA_VERSION + 1}, "):
        Store(db)
