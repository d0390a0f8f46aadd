"""The store's record of the Kubernetes objects the control plane created, and the migration
that adds it to a file of an older schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpufleet.service.store import SCHEMA_VERSION, CreatedObject, Store


def created(name: str, uid: str, workload: str = "team-a/Pod/p") -> CreatedObject:
    return CreatedObject("team-a", "Pod", name, "v1", uid, "team-a", workload)


@pytest.mark.parametrize("older", [1, 2], ids=["schema-1", "schema-2-tokens-only"])
def test_a_file_of_an_older_schema_gets_the_table_once_opened(tmp_path: Path, older: int) -> None:
    path = tmp_path / "gpufleet.db"
    Store(path).close()
    with sqlite3.connect(path) as db:  # as gpufleet before the record was written
        db.execute("DROP TABLE created_objects")
        db.execute(f"UPDATE meta SET value = '{older}' WHERE key = 'schema_version'")
    store = Store(path)
    assert store.meta("schema_version") == str(SCHEMA_VERSION) == "3"
    store.add_created([created("p", "u1")])
    assert store.created_objects() == [created("p", "u1")]
    store.close()


def test_an_object_made_again_replaces_its_record_and_forgetting_takes_its_uid(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "gpufleet.db")
    store.add_created([created("p", "u1"), created("q", "u2")])
    store.add_created([created("p", "u3")])
    assert sorted(c.uid for c in store.created_objects()) == ["u2", "u3"]
    store.forget_created("team-a", "Pod", "p", "u1")  # an older one: the newer stays
    assert sorted(c.uid for c in store.created_objects()) == ["u2", "u3"]
    store.forget_created("team-a", "Pod", "p", "u3")
    assert [c.uid for c in store.created_objects()] == ["u2"]
    store.close()
