"""Shared CLI plumbing: the console, clear errors and exit codes, argument parsers."""

from __future__ import annotations

import errno
import functools
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from gpufleet.io.errors import InputError
from gpufleet.io.kinds import Skipped
from gpufleet.io.traces import FetchError
from gpufleet.scheduling.policies import POLICY_NAMES, UnknownPolicyError

console = Console(highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)

P = ParamSpec("P")
R = TypeVar("R")

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    errors.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


def warn(message: str) -> None:
    """One line on stderr that does not stop the command."""
    errors.print(f"[bold yellow]warning:[/] {message}")


def warn_skipped(skipped: Skipped) -> None:
    """Say once what a read set aside (ConfigMaps, Services...), if anything."""
    note = skipped.note()
    if note is not None:
        warn(escape(note))


def friendly_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn bad input into one clear line on stderr and a non-zero exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except InputError as error:
            raise fail(str(error)) from None
        except UnknownPolicyError as error:
            raise fail(str(error)) from None
        except FetchError as error:
            raise fail(str(error), EXIT_FAILED) from None
        except FileNotFoundError as error:
            raise fail(f"{error.filename}: no such file") from None

    return wrapper


def parse_seeds(text: str) -> list[int]:
    """'42-51', '42,43,50' or '7' -> seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(-?\d+)\s*-\s*(-?\d+)", part)
        try:
            if match:
                low, high = int(match[1]), int(match[2])
                if high < low:
                    raise ValueError
                seeds.extend(range(low, high + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise fail(f"--seeds: expected e.g. '42-51' or '42,43', got {text!r}") from None
    if not seeds:
        raise fail("--seeds: no seed given")
    return seeds


def check_policies(names: list[str]) -> list[str]:
    for name in names:
        if name not in POLICY_NAMES:
            raise fail(str(UnknownPolicyError(name)))
    return names


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(d|h|m|s)")


def parse_duration(text: str) -> float:
    """'90', '90s', '5m', '1h30m', '2d' -> seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise fail(f"expected a duration such as 90s, 5m, 1h30m or 2d, got {text!r}")
    scale = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
    return sum(float(n) * scale[u] for n, u in parts)


def listen_socket(host: str, port: int, flag: str = "--port") -> socket.socket:
    """A TCP socket bound to ``host:port`` (before anything says it serves there), or one line
    naming the flag to change and exit code 2: 'port 8080 on 127.0.0.1 is in use (pass
    --port)'."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, UnicodeError) as error:
        raise fail(f"cannot listen on {host!r}: {error} (pass --host)") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not past a live listener
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise fail(f"port {port} on {host} is in use (pass {flag})") from None
        raise fail(
            f"cannot listen on port {port} on {host}: {error.strerror} (pass {flag})"
        ) from None
    return sock


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
