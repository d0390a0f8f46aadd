"""``gpufleet run -it`` on a real ``serve --local`` started as root with ``--run-as
research=nobody``: the session is a terminal of the tenant's user, in a private /dev that holds
only its own GPU's node (the fake GPUs' device directory), and exits with the shell's code.

Needs root and a kernel that lets the server mount (a private /dev, a /proc of its own); it
skips, saying why, elsewhere."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet.backends.local.private_dev import probe
from gpufleet.backends.local.proc_hiding import probe as probe_hiding
from gpufleet.devices.fake_nodes import write_fake_device_dir
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.testing.server_process import wait_until_ready
from tests.backends.local.conftest import no_process_left
from tests.cli.test_run_interactive import PROGRAM, Terminal

__all__ = ["no_process_left"]

pytest.importorskip("wsproto", reason="uvicorn needs wsproto to serve WebSockets")

NOBODY = 65534
FOUR_GPUS = {"node": "box", "devices": [{"product": "NVIDIA H100 80GB HBM3", "count": 4}]}


def _cannot() -> str | None:
    if os.geteuid() != 0:
        return "only root switches users and mounts a private /dev"
    return probe() or probe_hiding(NOBODY, NOBODY)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served_as_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """A ``serve --local`` subprocess as root, tenant ``research`` run as nobody, on four fake
    GPUs with a device directory; (its URL, a research token, the device directory)."""
    refused = _cannot()
    if refused is not None:
        pytest.skip(refused)
    root = tmp_path_factory.mktemp("root-serve")
    root.chmod(0o755)  # nobody's session starts in it
    devices = write_fake_device_dir(parse_fake_spec(FOUR_GPUS), root / "dev")
    spec = root / "gpus.yaml"
    spec.write_text(yaml.safe_dump({**FOUR_GPUS, "device_dir": str(devices)}))
    port = free_port()
    cli = [sys.executable, "-c", PROGRAM]
    log = root / "serve.log"
    with log.open("ab") as out:
        server = subprocess.Popen(
            [*cli, "serve", "--local", "--db", str(root / "g.db"), "--port", str(port),
             "--grace", "1", "--run-as", f"research={NOBODY}", "--fake-gpus", str(spec)],
            stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, server, log)
        token = subprocess.run(
            [*cli, "admin", "create-token", "--db", str(root / "g.db"), "--tenant", "research"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        yield url, token, devices
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_run_it_as_root_is_the_tenants_user_in_a_private_dev_on_a_tty(
    served_as_root: tuple[str, str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, token, devices = served_as_root
    monkeypatch.chdir(devices.parent)
    session = Terminal(url, token, "run", "-it", "--gpus", "1", "--queue", "research",
                       "--name", "shell", "-e", "PS1=$ ", "--", "/bin/sh")  # fmt: skip
    session.read_until(b"workload/research/shell accepted: 1 GPU(s)")
    session.read_until(b"$ ")
    # Quotes split the marker words, so that the terminal's echo of the line is not them.
    session.type(b"echo u''ser=$(id -un); ls /dev/nvidia*; echo t''ty=$(tty); exit 5\n")
    seen = session.read_until(b"\r\ntty=").decode(errors="replace")
    session.read_until(b"\n", timeout_s=5)
    assert session.exit_code() == 5
    text = session.seen.decode(errors="replace")
    assert "\r\nuser=nobody" in text, text
    listed = re.findall(r"/dev/nvidia[\w-]*", seen.split("\r\nuser=nobody", 1)[1])
    gpus = [name for name in listed if re.fullmatch(r"/dev/nvidia\d+", name)]
    assert len(gpus) == 1, text  # only its own GPU's node of the four
    assert sorted(set(listed) - set(gpus)) == [
        "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl",
    ]  # fmt: skip
    assert {p.name for p in devices.iterdir()} >= {f"nvidia{i}" for i in range(4)}
    match = re.search(r"\r\ntty=(\S+)", text)
    assert match is not None, text
    assert re.fullmatch(r"/dev/pts/\d+", match.group(1)), text  # the run's own terminal
