"""The database and its ``-wal``/``-shm`` files are 0600 from the start, a looser one is
tightened with a warning, and another Unix user cannot read them."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.service.private_files import PRIVATE_MODE
from gpufleet.service.store import Store, StoreError


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that takes nothing away: the modes seen are the ones asked for."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("open_umask")
def test_a_new_database_and_its_side_files_are_the_owners_only(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    store = Store(db)
    try:
        store.set_meta("written", "1")
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert mode(path) == PRIVATE_MODE, path
    finally:
        store.close()


@pytest.mark.parametrize("side", ["", "-wal", "-shm"], ids=["db", "wal", "shm"])
def test_a_looser_file_is_tightened_with_a_warning(
    tmp_path: Path, side: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "g.db"
    Store(db).close()
    path = Path(f"{db}{side}")
    if side:  # what a crashed older server leaves beside its database
        path.write_bytes(b"")
    path.chmod(0o644)
    store = Store(db)
    try:
        assert mode(path) == PRIVATE_MODE
    finally:
        store.close()
    assert f"{path} was readable by other users (mode 0644)" in caplog.text


def test_a_database_that_cannot_be_created_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the database"):
        Store(tmp_path / "missing" / "g.db")


def _nobody() -> bool:
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return True


@pytest.mark.skipif(
    os.geteuid() != 0 or not _nobody(), reason="needs root and a user nobody to read as"
)
def test_another_user_cannot_read_the_database() -> None:
    # Not under tmp_path: pytest makes that 0700, which would hide a readable file too.
    root = Path(tempfile.mkdtemp(prefix="gpufleet-modes-"))
    try:
        root.chmod(0o755)
        db = root / "g.db"
        store = Store(db)
        store.set_meta("secret", "token hashes live here")
        try:
            for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
                reader = subprocess.run(
                    ["head", "-c1", str(path)],
                    user="nobody",
                    capture_output=True,
                    text=True,
                    check=False,
                )
                assert reader.returncode != 0, f"nobody read {path}"
                assert "Permission denied" in reader.stderr
        finally:
            store.close()
    finally:
        shutil.rmtree(root)
