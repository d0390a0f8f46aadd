"""A consistent copy of a control plane's database, taken while ``gpufleet serve`` may be
writing it: SQLite's online backup API (:meth:`sqlite3.Connection.backup`), which copies the
pages of one snapshot (in WAL mode a reader never blocks the server's writers), and restarts
the copy if a write from another connection lands while it runs.

The copy is written beside ``out`` under a temporary name, made 0600 before SQLite opens it
(it holds token hashes and every tenant's manifests, as the database does), checked with
``PRAGMA integrity_check``, and renamed into place: ``out`` is either the whole copy or absent.
A restore is the copy put back in the database's place while the server is stopped.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from gpufleet.service.private_files import PRIVATE_MODE

#: Pages copied per step: the server's writes interleave with the copy between steps.
PAGES_PER_STEP = 1024


class BackupError(Exception):
    """The backup could not be taken (one line, for the command to print)."""


def backup_database(db: Path, out: Path) -> int:
    """Copy the database ``db`` to the new file ``out``; the copy's size in bytes."""
    if not db.is_file():
        raise BackupError(f"{db}: no such database (pass --db)")
    if out.exists():
        raise BackupError(f"{out}: already exists (give a new file)")
    if not out.parent.is_dir():
        raise BackupError(f"{out.parent}: no such directory")
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
    except OSError as error:
        raise BackupError(f"{out}: cannot write the copy ({error.strerror})") from None
    os.close(fd)
    try:
        _copy(db, partial)
        os.replace(partial, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    return out.stat().st_size


def _copy(db: Path, partial: Path) -> None:
    try:
        source = sqlite3.connect(db)
    except sqlite3.Error as error:
        raise BackupError(f"{db}: cannot open the database ({error})") from None
    try:
        target = sqlite3.connect(partial)
        try:
            source.backup(target, pages=PAGES_PER_STEP)
            # The copy stands alone: one file, not a WAL beside it.
            target.execute("PRAGMA journal_mode=DELETE")
            (verdict,) = target.execute("PRAGMA integrity_check").fetchone()
            version = target.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'"
            ).fetchone()
        finally:
            target.close()
    except sqlite3.DatabaseError as error:  # not SQLite, or no meta table
        raise BackupError(f"{db}: not a usable gpufleet database ({error})") from None
    finally:
        source.close()
    if verdict != "ok":
        raise BackupError(f"{db}: the copy fails SQLite's integrity check ({verdict})")
    if version is None:
        raise BackupError(f"{db}: not a gpufleet database (no schema version)")
