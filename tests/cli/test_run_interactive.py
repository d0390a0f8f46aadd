"""``gpufleet run -it`` and ``gpufleet attach``: the CLI (a subprocess on a terminal of its own,
so that its raw mode is real) against a real uvicorn server of a ``serve --local`` plane in
this process (fake GPUs, real processes), through the attach WebSocket."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.model.inventory import NodeInventory
from gpufleet.testing.local_service import TENANT, LocalHarness
from gpufleet.testing.threaded_server import threaded_server
from tests.backends.local.conftest import eight_gpus, no_process_left, state_root

__all__ = ["eight_gpus", "no_process_left", "state_root"]

# uvicorn serves WebSockets through wsproto (a dependency of gpufleet's since run -it).
pytest.importorskip("wsproto", reason="uvicorn needs wsproto to serve WebSockets")

BASH = shutil.which("bash") or "/bin/bash"
PROGRAM = "import sys; from gpufleet.cli.main import app; sys.argv[0] = 'gpufleet'; app()"


@pytest.fixture
def served(eight_gpus: NodeInventory, state_root: Path) -> Iterator[tuple[LocalHarness, str]]:
    harness = LocalHarness.start(eight_gpus, state_root)
    try:
        with threaded_server(harness.app) as url, harness.serving():
            yield harness, url
    finally:
        harness.shut_down()


class Terminal:
    """``gpufleet ARGS`` on a pseudo-terminal: what it prints, what is typed into it."""

    def __init__(self, url: str, token: str, *args: str) -> None:
        self.master, slave = os.openpty()
        env = {
            **os.environ,
            "GPUFLEET_SERVER": url,
            "GPUFLEET_TOKEN": token,
            "TERM": "dumb",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, *args],
            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        self.seen = b""

    def read_until(self, text: bytes, timeout_s: float = 20.0) -> bytes:
        deadline = time.monotonic() + timeout_s
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} not seen; seen: {self.seen!r}")
            readable, _, _ = select.select([self.master], [], [], left)
            if readable:
                try:
                    data = os.read(self.master, 65536)
                except OSError:  # EIO: the command has ended
                    data = b""
                if not data:
                    raise AssertionError(f"{text!r} not seen before the end; seen: {self.seen!r}")
                self.seen += data
        return self.seen

    def type(self, text: bytes) -> None:
        os.write(self.master, text)

    def exit_code(self) -> int:
        """Its exit code, once it has ended (what it printed last read first)."""
        code = self.process.wait(timeout=20)
        with contextlib.suppress(OSError):  # EIO once read to the end
            while select.select([self.master], [], [], 0.2)[0] and (data := self._read()):
                self.seen += data
        os.close(self.master)
        return code

    def _read(self) -> bytes:
        return os.read(self.master, 65536)


def test_run_it_is_a_terminal_session_that_exits_with_the_runs_code(
    served: tuple[LocalHarness, str],
) -> None:
    harness, url = served
    session = Terminal(
        url, harness.tokens[TENANT], "run", "-it", "--gpus", "1", "--name", "shell",
        "-e", "PS1=$ ", "--", BASH, "--norc", "-i",
    )  # fmt: skip
    session.read_until(b"workload/research/shell accepted: 1 GPU(s)")
    session.read_until(b"$ ")  # the run's prompt, through the API
    # Quotes split each printed word, so that the terminal's echo of the line is not it.
    session.type(b"test -t 0 && echo on-a-t''ty; echo h''i; exit 3\n")
    session.read_until(b"\nhi")
    assert session.exit_code() == 3
    assert b"on-a-tty" in session.seen
    harness.run_until(harness.state_is("shell", "Failed"))


def test_attach_takes_the_session_up_again_and_waits_for_gpus_first(
    served: tuple[LocalHarness, str],
) -> None:
    harness, url = served
    token = harness.tokens[TENANT]
    hog = Terminal(
        url,
        token,
        "run",
        "-it",
        "--gpus",
        "8",
        "--name",
        "hog",
        "-e",
        "PS1=$ ",
        "--",
        BASH,
        "--norc",
        "-i",
    )
    hog.read_until(b"$ ")
    later = Terminal(
        url,
        token,
        "run",
        "-it",
        "--gpus",
        "1",
        "--name",
        "later",
        "-e",
        "PS1=$ ",
        "--",
        BASH,
        "--norc",
        "-i",
    )
    later.read_until(b"waiting for GPUs: workload/research/later is Pending")
    hog.type(b"exit 0\n")
    assert hog.exit_code() == 0
    later.read_until(b"$ ")
    later.type(b"X=kept; echo s''et\n")
    later.read_until(b"\nset")
    later.process.kill()  # the client goes; the session stays
    later.exit_code()
    again = Terminal(url, token, "attach", "later")
    again.read_until(b"set\r\n$ ")  # the terminal's latest output, replayed
    again.type(b'echo "got-$X"; exit 4\n')
    again.read_until(b"got-kept")
    assert again.exit_code() == 4
    ended = Terminal(url, token, "attach", "later")
    assert ended.exit_code() == 1
    assert b"workload/research/later has ended (Failed): there is no terminal" in ended.seen
