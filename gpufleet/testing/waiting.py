"""Waiting in tests for something another thread or process does: the one polling helper.

Owns :func:`wait_until` (poll a condition until it holds) and :func:`eventually` (retry an
assertion until it passes). Both fail with an :class:`AssertionError` that says what was
awaited and for how long, so a test that times out reads like any failed assertion.

What it does not do: wait on events. Where the code under test offers a notification (a
condition variable, a FIFO, a backend's ``wait``), wait on that instead; polling is for what
tells nobody (a file written, a socket served, a thread gone).
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: The default deadline: long enough for two busy cores, short enough to fail a hung test.
TIMEOUT_S = 10.0


def wait_until(
    condition: Callable[[], object],
    what: str = "",
    *,
    timeout_s: float = TIMEOUT_S,
    every_s: float = 0.01,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Call ``condition`` every ``every_s`` until it returns something true; raise an
    AssertionError naming ``what`` (else the condition) after ``timeout_s``. The deadline is
    looked at only after a false answer, so a condition that held when last asked never fails."""
    deadline = clock() + timeout_s
    while not condition():
        if clock() >= deadline:
            awaited = what or getattr(condition, "__name__", repr(condition))
            raise AssertionError(f"timed out after {timeout_s} s waiting for {awaited}")
        sleep(every_s)


def eventually(
    check: Callable[[], None],
    *,
    timeout_s: float = TIMEOUT_S,
    every_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Call ``check`` until it stops raising AssertionError; after ``timeout_s`` its last
    failure is raised as it is (the assertion's own message says what was wrong)."""
    deadline = clock() + timeout_s
    while True:
        try:
            check()
            return
        except AssertionError:
            if clock() >= deadline:
                raise
        sleep(every_s)


__all__ = ["TIMEOUT_S", "eventually", "wait_until"]
