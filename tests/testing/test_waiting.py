"""The one polling helper: it returns once the condition holds, and fails naming what it
awaited once the deadline has passed; on a fake clock, so no test here sleeps."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from gpufleet.testing.waiting import eventually, wait_until


@dataclass
class FakeTime:
    """A clock that moves only when slept on, and a count of the sleeps."""

    now: float = 0.0
    slept: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def true_after(asks: int) -> Callable[[], bool]:
    """A condition false for its first ``asks - 1`` asks, then true."""
    answers = iter([False] * (asks - 1) + [True] * 100)
    return lambda: next(answers)


@pytest.mark.parametrize(
    ("asks", "timeout_s", "sleeps"),
    [
        pytest.param(1, 1.0, 0, id="holds-at-once-no-sleep"),
        pytest.param(3, 1.0, 2, id="holds-on-the-third-ask"),
        pytest.param(11, 1.0, 10, id="holds-when-asked-at-the-deadline"),
    ],
)
def test_wait_until_returns_once_the_condition_holds(
    asks: int, timeout_s: float, sleeps: int
) -> None:
    time = FakeTime()
    wait_until(
        true_after(asks), timeout_s=timeout_s, every_s=0.1, clock=time.clock, sleep=time.sleep
    )
    assert len(time.slept) == sleeps


@pytest.mark.parametrize(
    ("what", "named"),
    [
        pytest.param("the GPUs listed", "the GPUs listed", id="named-by-what"),
        pytest.param("", "never", id="named-by-the-condition"),
    ],
)
def test_wait_until_fails_after_the_deadline_naming_what(what: str, named: str) -> None:
    time = FakeTime()

    def never() -> bool:
        return False

    with pytest.raises(
        AssertionError, match=re.escape(f"timed out after 1.0 s waiting for {named}") + "$"
    ):
        wait_until(never, what, timeout_s=1.0, every_s=0.25, clock=time.clock, sleep=time.sleep)
    assert time.now == pytest.approx(1.0)  # it waited out the deadline, and no longer


def test_eventually_retries_an_assertion_until_it_passes() -> None:
    time = FakeTime()
    tries: list[int] = []

    def check() -> None:
        tries.append(1)
        assert len(tries) >= 3, "not yet"

    eventually(check, timeout_s=5.0, every_s=0.5, clock=time.clock, sleep=time.sleep)
    assert len(tries) == 3


def test_eventually_raises_the_last_failure_after_the_deadline() -> None:
    time = FakeTime()

    def check() -> None:
        raise AssertionError(f"still wrong at {time.now}")

    with pytest.raises(AssertionError, match=re.escape("still wrong at 2.0")):
        eventually(check, timeout_s=2.0, every_s=0.5, clock=time.clock, sleep=time.sleep)
