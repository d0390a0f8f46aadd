"""Waiting for a ``gpufleet serve`` started as a subprocess (tests and benchmarks)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx


class ServerNotReadyError(RuntimeError):
    """The server exited, or did not answer /readyz in time; the message ends with its log."""


def wait_until_ready(
    url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60.0
) -> None:
    """Until ``url``/readyz answers 200; ServerNotReadyError if the process exits first or
    ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerNotReadyError(
                f"gpufleet serve exited with {process.returncode}; its log:\n{_tail(log)}"
            )
        try:
            if httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise ServerNotReadyError(
        f"gpufleet serve not ready within {timeout:.0f} s; its log:\n{_tail(log)}"
    )


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-4000:]
    except OSError:
        return "(no log)"
