"""A tty run (:mod:`gpufleet.backends.local.terminal`): the process on a pseudo-terminal of its
own, relayed over the run's attach socket and into its log."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from gpufleet.backends.local.supervisor import Supervisor
from gpufleet.backends.local.terminal import (
    ATTACH_SOCKET,
    DATA,
    RESIZE,
    FrameReader,
    frame,
    resize_frame,
    window_size,
)
from gpufleet.model.processes import ProcessSpec
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import wait_end

BASH = shutil.which("bash") or "/bin/bash"


def tty_spec(work: Path, *argv: str) -> ProcessSpec:
    env = {"PATH": os.environ["PATH"], "TERM": "dumb", "PS1": "$ "}
    return ProcessSpec(argv, BASH if argv[0] == "bash" else argv[0], env, str(work), tty=True)


def attach(supervisor: Supervisor, run_id: str) -> socket.socket:
    path = supervisor.run_dir(run_id) / ATTACH_SOCKET
    wait_until(path.exists)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    client.settimeout(10.0)
    return client


def read_until(client: socket.socket, text: bytes, timeout_s: float = 10.0) -> bytes:
    """What the terminal sent until ``text`` appeared in it (or the socket closed)."""
    reader, seen = FrameReader(), b""
    deadline = time.monotonic() + timeout_s
    while text not in seen and time.monotonic() < deadline:
        data = client.recv(65536)
        if not data:
            break
        seen += b"".join(payload for kind, payload in reader.feed(data) if kind == DATA)
    return seen


@pytest.fixture
def work(state_root: Path) -> Path:
    directory = state_root / "tenants" / "alice"
    directory.mkdir(parents=True)
    return directory


def test_a_tty_run_is_a_terminal_session_relayed_over_its_socket(
    supervisor: Supervisor, work: Path
) -> None:
    supervisor.start("t1", tty_spec(work, "bash", "--norc", "-i"))
    client = attach(supervisor, "t1")
    mode = os.stat(supervisor.run_dir("t1") / ATTACH_SOCKET).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    client.sendall(resize_frame(33, 101))
    # Quotes split each word printed, so that the terminal's echo of the line is not it.
    client.sendall(frame(DATA, b"test -t 0 && echo A-T''TY; stty size; echo h''i; exit 3\n"))
    seen = read_until(client, b"\nhi")
    assert b"A-TTY" in seen
    assert b"33 101" in seen
    read_until(client, b"never")  # until the relay closes: the process is gone
    end = wait_end(supervisor, "t1")
    assert end.record is not None
    assert end.record.exit_code == 3
    client.close()
    log = supervisor.log_path("t1").read_text()
    assert "hi" in log  # the session is in the run's log too
    assert not (supervisor.run_dir("t1") / ATTACH_SOCKET).exists()


def test_ctrl_c_typed_into_the_terminal_interrupts_its_foreground_process(
    supervisor: Supervisor, work: Path
) -> None:
    supervisor.start("t2", tty_spec(work, "bash", "--norc", "-i"))
    client = attach(supervisor, "t2")
    client.sendall(frame(DATA, b"sleep 30\n"))
    time.sleep(0.5)
    client.sendall(frame(DATA, b"\x03"))  # the terminal's intr: SIGINT to its foreground group
    client.sendall(frame(DATA, b"echo AFTER''-$?\n"))
    assert b"AFTER-130" in read_until(client, b"AFTER-130")
    client.sendall(frame(DATA, b"exit 0\n"))
    end = wait_end(supervisor, "t2")
    assert end.record is not None
    assert end.record.exit_code == 0
    client.close()


@pytest.mark.parametrize(
    ("chunks", "frames"),
    [
        pytest.param([frame(DATA, b"abc")], [(DATA, b"abc")], id="whole"),
        pytest.param([frame(DATA, b"abc")[:2], frame(DATA, b"abc")[2:]], [(DATA, b"abc")],
                     id="split-header"),
        pytest.param([frame(DATA, b"x") + resize_frame(2, 3)],
                     [(DATA, b"x"), (RESIZE, b"\0\2\0\3")], id="two-in-one"),
    ],
)  # fmt: skip
def test_frames_come_out_whole_however_the_bytes_come(
    chunks: list[bytes], frames: list[tuple[bytes, bytes]]
) -> None:
    reader = FrameReader()
    assert [f for chunk in chunks for f in reader.feed(chunk)] == frames


def test_a_resize_is_rows_then_columns() -> None:
    assert window_size(resize_frame(40, 120)[5:]) == (40, 120)
    with pytest.raises(ValueError, match="a resize holds 4 bytes"):
        window_size(b"\0")


def test_the_terminal_is_the_processs_controlling_terminal(
    supervisor: Supervisor, work: Path
) -> None:
    # /dev/tty opens only for a process with a controlling terminal, and Ctrl-C typed there
    # reaches its foreground group only then (bash would take one itself: python does not).
    check = "import os; os.open('/dev/tty', os.O_RDWR); print(os.tcgetpgrp(0) == os.getpgrp())"
    supervisor.start("t3", tty_spec(work, sys.executable, "-c", check))
    end = wait_end(supervisor, "t3")
    assert end.record is not None
    assert end.record.exit_code == 0, supervisor.log_path("t3").read_text()
    assert supervisor.log_path("t3").read_text().strip() == "True"
