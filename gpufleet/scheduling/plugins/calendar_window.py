"""The ``calendar-window`` admission check: a queue admits new work only between given hours of
each day (of the core's clock: UTC on the wall clock, the simulated day in a simulation).

One line of profile enables it, for one queue (list it again for another)::

    admissionChecks:
      - budget
      - {name: calendar-window, args: {queue: batch, opensAt: 22, closesAt: 6}}

Hours may have fractions (``7.5``: 07:30); a window that closes before it opens runs over
midnight (22 to 6 is the night). Outside its window a workload of the queue waits, told when
the window opens; running work goes on. The check needs no event to change its mind, only
time: it tells the world's loop when it next opens (its ``next_timer``, so the world waits no
later), and at the first turn inside the window it wakes what it refused itself (its
``before_cycles``); no other wake does (``requeue_on`` is empty: quota given back does not
open a window).

What it does not do: know dates, weekdays or time zones (hours of a day of the core's clock
only), or stop what runs when the window closes.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.model.workload import Workload
from gpufleet.scheduling.framework import CheckWorld
from gpufleet.scheduling.profile import Args, ProfileError, arguments
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.state import CoreState

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 24 * SECONDS_PER_HOUR


def clock_time(hour: float) -> str:
    """``hour`` of the day as ``HH:MM``."""
    minutes = round(hour * 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


class CalendarWindow:
    """See the module docstring."""

    name = "calendar-window"
    #: Only time opens a window: it wakes what it refused itself.
    requeue_on: frozenset[str] = frozenset()

    def __init__(self, state: CoreState, queue: str, opens_at: float, closes_at: float) -> None:
        self.state = state
        self.queue = queue
        self.opens = opens_at % 24 * SECONDS_PER_HOUR
        self.closes = closes_at % 24 * SECONDS_PER_HOUR
        self.hours = f"{clock_time(opens_at)} to {clock_time(closes_at)}"
        #: Whether it refused a workload that has not been woken since.
        self.refused = False

    def is_open(self, now: float) -> bool:
        of_day = now % SECONDS_PER_DAY
        if self.opens < self.closes:
            return self.opens <= of_day < self.closes
        return of_day >= self.opens or of_day < self.closes

    def opening_after(self, now: float) -> float:
        """The first moment the window opens after ``now``."""
        day_start = now - now % SECONDS_PER_DAY
        opening = day_start + self.opens
        return opening if opening > now else opening + SECONDS_PER_DAY

    # ------------------------------------------------------------------------ admission
    def check(self, workload: Workload, request: Mapping[str, int], now: float) -> str | None:
        if workload.queue != self.queue or self.is_open(now):
            return None
        self.refused = True
        opens = self.state.time_format(self.opening_after(now))
        return f"queue {self.queue} admits new work from {self.hours} only; opens {opens}"

    # --------------------------------------------------------------------------- hooks
    def next_timer(self, now: float) -> float | None:
        return self.opening_after(now) if self.refused else None

    def before_cycles(self, world: CheckWorld, now: float) -> None:
        if self.refused and self.is_open(now):
            self.refused = False
            self.state.pending.wake_refused_by(self.name)

    def after_cycles(self, world: CheckWorld, now: float) -> None:
        """(It counts nothing.)"""

    # ---------------------------------------------------------------------- running set
    def started(self, running: RunningWorkload) -> None:
        """(What runs does not open or close a window.)"""

    def shrunk(self, running: RunningWorkload, freed: Mapping[str, int]) -> None: ...

    def stopped(self, running: RunningWorkload) -> None: ...

    def retagged(self, running: RunningWorkload, before: Workload) -> None: ...


def calendar_window(state: CoreState, args: Args) -> CalendarWindow:
    """The check from a profile's arguments: ``queue``, ``opensAt`` and ``closesAt`` (hours
    of the day, 0 to 24, not equal). A queue the core does not have is no error (queues come
    and go; the core is rebuilt with them): the window applies to nothing then."""
    known = {"queue": str, "opensAt": float, "closesAt": float}
    given = arguments(args, CalendarWindow.name, known)
    missing = [name for name in known if name not in given]
    if missing:
        raise ProfileError(f"{CalendarWindow.name}: missing argument {missing[0]!r}")
    queue, opens, closes = given["queue"], given["opensAt"], given["closesAt"]
    assert isinstance(queue, str)
    assert isinstance(opens, int | float)
    assert isinstance(closes, int | float)
    if not (0 <= opens <= 24 and 0 <= closes <= 24) or opens % 24 == closes % 24:
        raise ProfileError(
            f"{CalendarWindow.name}: opensAt and closesAt are hours from 0 to 24, not the same"
        )
    return CalendarWindow(state, queue, float(opens), float(closes))


__all__ = ["CalendarWindow", "calendar_window", "clock_time"]
