"""``gpufleet admin backup --db DB OUT``: a consistent copy (SQLite's online backup API) of a
database that a server is writing, which opens as a database with the same workloads; bad
arguments are one line each, exit 2, and leave no file behind."""

from __future__ import annotations

import sqlite3
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.service.store import SCHEMA_VERSION, Store
from gpufleet.testing.builders import make_pod

runner = CliRunner()


def timed(name: str) -> TimedWorkload:
    return TimedWorkload(Workload(name, "default", (make_pod(name),), "default"), 0.0, 100.0)


def backup(db: Path, out: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["admin", "backup", "--db", str(db), str(out)])
    return result.exit_code, " ".join(result.output.split())


def keys(db: Path) -> list[str]:
    store = Store(db)
    try:
        assert store.meta("schema_version") == str(SCHEMA_VERSION)
        return sorted(found.key for found in store.workloads())
    finally:
        store.close()


def test_a_backup_taken_under_writes_opens_with_the_same_workloads(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    store = Store(db)
    for seq in range(1, 51):
        store.add_workload(seq, "team", "Pod", timed(f"before-{seq}"), float(seq))
    stop = threading.Event()

    def write() -> None:  # the server, still submitting while the copy is taken
        seq = 51
        while not stop.is_set():
            store.add_workload(seq, "team", "Pod", timed(f"during-{seq}"), float(seq))
            seq += 1

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        code, said = backup(db, tmp_path / "copy.db")
    finally:
        stop.set()
        writer.join(timeout=30)
        store.close()
    assert code == 0, said
    assert "copied to" in said
    copied = keys(tmp_path / "copy.db")
    assert {f"default/before-{seq}" for seq in range(1, 51)} <= set(copied)
    # a snapshot: the workloads written during the copy are there up to some point, no gaps
    during = sorted(int(key.rsplit("-", 1)[1]) for key in copied if "during" in key)
    assert during == list(range(51, 51 + len(during)))
    assert set(copied) <= set(keys(db))
    assert stat.S_IMODE((tmp_path / "copy.db").stat().st_mode) == 0o600
    assert not (tmp_path / "copy.db-wal").exists()  # one file, not a WAL beside it


@pytest.mark.parametrize(
    ("make", "out", "message"),
    [
        (None, "copy.db", "no such database"),
        ("sqlite-not-gpufleet", "copy.db", "not a usable gpufleet database"),
        ("garbage", "copy.db", "not a usable gpufleet database"),
        ("gpufleet", "exists.db", "already exists"),
        ("gpufleet", "missing/copy.db", "no such directory"),
    ],
    ids=["no-database", "another-sqlite-file", "not-sqlite", "out-exists", "out-dir-missing"],
)
def test_bad_arguments_are_one_line_and_leave_nothing(
    tmp_path: Path, make: str | None, out: str, message: str
) -> None:
    db = tmp_path / "g.db"
    if make == "gpufleet":
        Store(db).close()
    elif make == "sqlite-not-gpufleet":
        with sqlite3.connect(db) as other:
            other.execute("CREATE TABLE t (x)")
        other.close()
    elif make == "garbage":
        db.write_text("this is not sqlite" * 100)
    (tmp_path / "exists.db").write_text("keep me")
    before = sorted(path.name for path in tmp_path.iterdir())
    code, said = backup(db, tmp_path / out)
    assert code == 2
    assert message in said
    assert sorted(path.name for path in tmp_path.iterdir()) == before
    assert (tmp_path / "exists.db").read_text() == "keep me"
