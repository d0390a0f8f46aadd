"""The database's files are its owner's alone: mode 0600 from the moment they exist.

The database holds token hashes, every tenant's manifests and events. :func:`prepare_private`
creates it 0600 before SQLite opens it (so there is no moment when another user may read
it); SQLite creates the ``-wal`` and ``-shm`` files with the main file's mode, so they are
0600 too. A file found with a looser mode (made by an older gpufleet) is tightened, with a
logged warning.

The one-box state directory beside it (each run's spec, environment and output) is made the
same way, by :mod:`gpufleet.backends.local.state_modes` (a layer below this one: the run's shim
makes its files too); ``tests/backends/local/test_state_modes.py`` checks both as another user.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_MODE = 0o600
#: What SQLite writes beside a database in WAL mode.
SIDE_FILES = ("-wal", "-shm", "-journal")


def is_file_path(path: str) -> bool:
    """Whether SQLite's ``path`` names a file (not ``:memory:`` or a temporary database)."""
    return path not in ("", ":memory:") and not path.startswith("file:")


def prepare_private(path: str) -> None:
    """Create the database ``path`` with mode 0600 if it is missing, and tighten it and its
    side files to 0600 if they are looser."""
    if not is_file_path(path):
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_MODE)
    os.close(fd)
    for name in (path, *(path + side for side in SIDE_FILES)):
        tighten(Path(name))


def tighten(path: Path) -> None:
    """Make ``path`` (if it exists) readable and writable by its owner only."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        log.warning(
            "%s was readable by other users (mode %04o): changed to %04o",
            path,
            mode,
            PRIVATE_MODE,
        )
        path.chmod(PRIVATE_MODE)
