"""Who may read what in the state directory of ``serve --local``: each path's owner and mode.

Owns :data:`LAYOUT`, the mode of every kind of path the server makes there, and
:func:`prepare_state_dir`, which makes the directory with those modes (or tightens one that an
older gpufleet made looser, saying so). One box is shared by tenants whose runs run as other
local users (``--run-as``); the state directory holds each run's command line and whole
environment (``spec.json``: tokens included) and its output, so:

=====================================  ======  ===============================================
path                                   mode    who may
=====================================  ======  ===============================================
``<state>/``                           0711    everyone passes through, nobody lists it
``<state>/tenants/``                   0711    each tenant reaches its own root, lists none
``<state>/tenants/<tenant>/``          0700    the tenant's user (its owner) alone
``<state>/runs/``                      0700    the server's user alone
``<state>/runs/<run>/`` and its files  0700,   the server's user alone (a run writes its output
                                       0600    through the descriptor it inherits)
``<state>/wake.fifo``                  0600    the server and its shims (the server's user)
=====================================  ======  ===============================================

A tenant reads its runs' output through the API (``gpufleet logs``), never from disk, so no
run file need be readable by anyone but the server. Every path is made with its mode from
the start (:func:`.run_state.make_private_dir`, :func:`.run_state.open_private`, ``mkfifo``
with the mode). The database beside it is :mod:`gpufleet.service.private_files`' (0600).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from gpufleet.backends.local.run_state import (
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    RUNS_DIR,
    WAKE_FIFO,
    make_private_dir,
)

log = logging.getLogger(__name__)

TENANTS_DIR = "tenants"
#: A directory others pass through (to their own part of it) but may not list.
PASSAGE_MODE = 0o711
#: A tenant's root: its user's (the owner) alone.
TENANT_ROOT_MODE = 0o700

#: The mode of each kind of path (``*``: any one name), from the state directory.
LAYOUT: dict[str, int] = {
    ".": PASSAGE_MODE,
    TENANTS_DIR: PASSAGE_MODE,
    f"{TENANTS_DIR}/*": TENANT_ROOT_MODE,
    RUNS_DIR: PRIVATE_DIR_MODE,
    f"{RUNS_DIR}/*": PRIVATE_DIR_MODE,
    f"{RUNS_DIR}/*/*": PRIVATE_FILE_MODE,
    WAKE_FIFO: PRIVATE_FILE_MODE,
}


def prepare_state_dir(state_dir: Path) -> None:
    """Make ``state_dir`` and its ``tenants`` and ``runs`` directories with their modes, and
    its wake FIFO; tighten what an older gpufleet left looser (each run's directory and
    files included), with one warning saying how many paths. Its parents are the operator's
    (made, if missing, as ``mkdir -p`` makes them: tenants must pass through them)."""
    state_dir = Path(state_dir)
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    tightened = 0
    for path, mode in (
        (state_dir, PASSAGE_MODE),
        (state_dir / TENANTS_DIR, PASSAGE_MODE),
        (state_dir / RUNS_DIR, PRIVATE_DIR_MODE),
    ):
        if not make_private_dir(path, mode):
            tightened += _tighten(path, mode)
    fifo = state_dir / WAKE_FIFO
    try:
        os.mkfifo(fifo, PRIVATE_FILE_MODE)
    except FileExistsError:
        tightened += _tighten(fifo, PRIVATE_FILE_MODE)
    for run_dir in (state_dir / RUNS_DIR).iterdir():
        if run_dir.is_symlink() or not run_dir.is_dir():
            continue
        tightened += _tighten(run_dir, PRIVATE_DIR_MODE)
        for item in run_dir.iterdir():
            if not item.is_symlink() and item.is_file():
                tightened += _tighten(item, PRIVATE_FILE_MODE)
    if tightened:
        log.warning(
            "%s: %d paths were readable by other users (made by an older gpufleet): "
            "tightened to the server's user only (runs' specs and output: 0600 in 0700)",
            state_dir,
            tightened,
        )


def _tighten(path: Path, mode: int) -> int:
    """Take from ``path`` every permission bit that ``mode`` does not grant; 1 if it had any."""
    current = stat.S_IMODE(path.lstat().st_mode)
    if current & ~mode:
        os.chmod(path, current & mode)
        return 1
    return 0


__all__ = [
    "LAYOUT",
    "PASSAGE_MODE",
    "TENANTS_DIR",
    "TENANT_ROOT_MODE",
    "prepare_state_dir",
]
