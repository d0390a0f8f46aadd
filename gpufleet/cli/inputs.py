"""The commands' inputs: argument parsers (seeds, policies, durations, directories) and clear
errors for bad input files (the console, exit codes and ``fail`` come from ``cli/output`` and
are re-exported here, so that a command imports one module)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from rich.markup import escape

from gpufleet.cli.output import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    console,
    errors,
    fail,
    listen_socket,
    note_paused,
    warn,
    warn_skipped,
)
from gpufleet.io.cluster_traces.datasets import FetchError
from gpufleet.io.errors import InputError
from gpufleet.scheduling.policies import POLICY_NAMES, UnknownPolicyError

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "check_policies",
    "console",
    "ensure_dir",
    "errors",
    "fail",
    "friendly_errors",
    "listen_socket",
    "note_paused",
    "parse_duration",
    "parse_seeds",
    "warn",
    "warn_skipped",
]

P = ParamSpec("P")
R = TypeVar("R")


def friendly_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn bad input into one clear line on stderr and a non-zero exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except InputError as error:  # escaped: fields such as spec.quota[nvidia.com/gpu]
            raise fail(escape(str(error))) from None
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


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
