"""Issue 30, item 1: no other local user, and no other tenant's run, reads anything of the state
directory of ``serve --local`` or of its database.

A box as root with two tenants (research as ``nobody``, prod as ``daemon``), a run of each
(their environments hold a token), and the database beside it; then

* every path the server made has the owner and mode of the table below (and no path is left
  out of the table: one a later change adds without a mode fails here);
* each tenant's Unix user (a child switched to it) and prod's own run (a process the server
  started as ``daemon``) open every path of the box but their own root, and every open fails
  with EACCES: the guard for the class of bug (a file readable by others), whatever its name.

Before the fix, ``spec.json`` and ``output.log`` were 0644 in 0755 directories: research's
user read prod's ``HF_TOKEN``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.backends.local.machine import LocalMachine
from gpufleet.backends.local.run_state import make_private_dir, open_private
from gpufleet.backends.local.state_modes import LAYOUT, prepare_state_dir
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.processes import ProcessSpec
from gpufleet.service.store import Store
from tests.backends.local.test_proc_hiding import wait_ends

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root runs tenants' processes as other users"
)

NOBODY = (65534, 65534)
DAEMON = (1, 1)
ROOT = (0, 0)
#: A Python every user may run (the tests' virtualenv may not be), and the walker it runs: it
#: opens each path of a JSON list (read from the file named, or stdin) and prints what each
#: open did.
PYTHON = "/usr/bin/python3"
WALKER = """
import errno, json, os, sys
paths = json.load(open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin)
seen = {}
for path in paths:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW))
        seen[path] = "opened"
    except OSError as error:
        seen[path] = errno.errorcode.get(error.errno, str(error.errno))
print("WALKED " + json.dumps(seen), flush=True)
"""
SECRET = "hf_secret_of_prod"


@dataclass(frozen=True)
class Box:
    state: Path
    db: Path
    machine: LocalMachine


@pytest.fixture(scope="module")
def box(eight_gpus: NodeInventory) -> Iterator[Box]:
    # Not under pytest's tmp_path (private to root: it would hide everything from the others
    # and prove nothing); as /srv/gpufleet, which tenants pass through to their roots.
    top = Path(tempfile.mkdtemp(prefix="gpufleet-box-"))
    top.chmod(0o755)
    for parent in top.parents:
        assert os.stat(parent).st_mode & 0o001, f"{parent} must be searchable by all"
    state, db = top / "gpufleet.db.local", top / "gpufleet.db"
    store = Store(db)
    store.set_meta("written", "so that the -wal and -shm files exist")
    machine = LocalMachine(eight_gpus, state, shared_proc=True)
    for tenant, (uid, gid) in (("research", NOBODY), ("prod", DAEMON)):
        root = machine.tenant_root(tenant, uid, gid)
        env = {"PATH": "/usr/bin:/bin", "HF_TOKEN": f"hf_secret_of_{tenant}"}
        spec = ProcessSpec(("sh", "-c", "echo $HF_TOKEN"), "/bin/sh", env, str(root), uid, gid)
        machine.supervisor.start(f"{tenant}_train_1", spec)
    ends = wait_ends(machine.supervisor, {"research_train_1", "prod_train_1"})
    assert all(end.succeeded for end in ends), ends
    assert SECRET in (state / "runs" / "prod_train_1" / "output.log").read_text()
    yield Box(state, db, machine)
    machine.close()
    store.close()
    shutil.rmtree(top, ignore_errors=True)


#: Every path the box holds (from the state directory; ``../`` the database's), its mode and
#: owner (uid, gid).
EXPECTED = [
    pytest.param(".", 0o711, ROOT, id="state-dir"),
    pytest.param("tenants", 0o711, ROOT, id="tenants"),
    pytest.param("tenants/research", 0o700, NOBODY, id="research-root"),
    pytest.param("tenants/prod", 0o700, DAEMON, id="prod-root"),
    pytest.param("runs", 0o700, ROOT, id="runs"),
    pytest.param("wake.fifo", 0o600, ROOT, id="wake-fifo"),
    *(
        pytest.param(f"runs/{run}", 0o700, ROOT, id=run)
        for run in ("research_train_1", "prod_train_1")
    ),
    *(
        pytest.param(f"runs/{run}/{name}", 0o600, ROOT, id=f"{run}-{name}")
        for run in ("research_train_1", "prod_train_1")
        for name in ("spec.json", "output.log", "shim.json", "child.json", "exit.json")
    ),
    *(
        pytest.param(f"../gpufleet.db{side}", 0o600, ROOT, id=f"db{side}")
        for side in ("", "-wal", "-shm")
    ),
]


@needs_root
@pytest.mark.parametrize(("relative", "mode", "owner"), EXPECTED)
def test_each_path_has_its_mode_and_owner(
    box: Box, relative: str, mode: int, owner: tuple[int, int]
) -> None:
    status = (box.state / relative).lstat()
    assert (oct(stat.S_IMODE(status.st_mode)), (status.st_uid, status.st_gid)) == (
        oct(mode),
        owner,
    )


@needs_root
def test_no_path_is_left_out_of_the_table(box: Box) -> None:
    listed = {p.values[0] for p in EXPECTED}
    found = {os.path.relpath(p, box.state) for p in _walk(box.state)}
    assert found <= listed, f"paths the server makes with no expected mode: {found - listed}"
    # And the module's own table agrees with every path.
    for relative in found:
        status = (box.state / relative).lstat()
        rules = [m for pattern, m in LAYOUT.items() if fnmatch.fnmatch(relative, pattern)]
        assert rules, relative
        assert stat.S_IMODE(status.st_mode) == rules[-1], relative


def _walk(state: Path) -> list[str]:
    """Every path of the state directory, not into tenants' roots (theirs), but the roots."""
    found = [str(state)]
    for directory, names, files in os.walk(state):
        for name in [*names, *files]:
            found.append(os.path.join(directory, name))
        if os.path.dirname(directory) == str(state / "tenants"):
            names.clear()
    return found


def _everything_but(box: Box, own_root: str) -> list[str]:
    paths = [p for p in _walk(box.state) if not p.startswith(str(box.state / own_root))]
    return paths + [str(box.db) + side for side in ("", "-wal", "-shm")]


@needs_root
@pytest.mark.parametrize(
    ("own_root", "user"),
    [
        pytest.param("tenants/research", NOBODY, id="research-user-nobody"),
        pytest.param("tenants/prod", DAEMON, id="prod-user-daemon"),
    ],
)
def test_another_user_opens_nothing(box: Box, own_root: str, user: tuple[int, int]) -> None:
    paths = _everything_but(box, own_root)
    own = str(box.state / own_root)
    done = subprocess.run(
        [PYTHON, "-I", "-S", "-c", WALKER],
        input=json.dumps([*paths, own]),
        capture_output=True,
        text=True,
        user=user[0],
        group=user[1],
        extra_groups=[],
        check=True,
        timeout=30,
    )
    seen = json.loads(done.stdout.removeprefix("WALKED "))
    assert seen[own] == "opened"  # it reaches the box: the refusals below are the modes'
    assert {path: seen[path] for path in paths if seen[path] != "EACCES"} == {}
    assert SECRET not in done.stdout + done.stderr


@needs_root
def test_another_tenants_run_opens_nothing(box: Box) -> None:
    """Prod's run (the server starts it as daemon) walks everything but prod's root."""
    paths = _everything_but(box, "tenants/prod")
    listing = box.state / "tenants" / "prod" / "paths.json"
    listing.write_text(json.dumps(paths))
    os.chown(listing, *DAEMON)
    argv = (PYTHON, "-I", "-S", "-c", WALKER, str(listing))
    spec = ProcessSpec(argv, PYTHON, {}, str(listing.parent), *DAEMON)
    box.machine.supervisor.start("prod_walk_1", spec)
    end = wait_ends(box.machine.supervisor, {"prod_walk_1"})[0]
    printed = box.machine.supervisor.log_path("prod_walk_1").read_text()
    assert end.succeeded, printed
    seen = json.loads(printed.split("WALKED ", 1)[1])
    assert {path: seen[path] for path in paths if seen[path] != "EACCES"} == {}


@pytest.mark.parametrize(
    "umask", [0o000, 0o022, 0o077], ids=["umask-000", "umask-022", "umask-077"]
)
def test_modes_hold_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    before = os.umask(umask)
    try:
        assert make_private_dir(tmp_path / "d", 0o711)
        os.close(open_private(tmp_path / "d" / "f", os.O_WRONLY))
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o711
    assert stat.S_IMODE((tmp_path / "d" / "f").stat().st_mode) & 0o077 == 0


def test_an_older_looser_state_dir_is_tightened(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run = state / "runs" / "prod_train_1"
    run.mkdir(parents=True, mode=0o755)
    (state / "tenants").mkdir(mode=0o755)
    (run / "spec.json").write_text("{}")
    for path in (state, state / "runs", run, state / "tenants"):
        path.chmod(0o755)
    (run / "spec.json").chmod(0o644)
    prepare_state_dir(state)
    modes = {
        os.path.relpath(p, state): oct(stat.S_IMODE(os.lstat(p).st_mode)) for p in _walk(state)
    }
    assert modes == {
        ".": "0o711",
        "tenants": "0o711",
        "runs": "0o700",
        "runs/prod_train_1": "0o700",
        "runs/prod_train_1/spec.json": "0o600",
        "wake.fifo": "0o600",
    }
