"""How durations and instants read for people, the same in every world and every view.

A duration reads ``0s``, ``8.1s``, ``59s``, ``39m09s``, ``2h05m``, ``1d03h``. An instant of a
simulated cluster (seconds since it started) reads ``t=`` and a duration (``t=39m09s``); an
instant on Kubernetes and on one box (``serve --local``), where the clock is the wall clock
(Unix seconds), reads as a UTC date (``2026-11-24 15:38:02 UTC``). Whoever makes a message gets
a :data:`TimeFormat` from whoever knows the world (the scheduling core is given one when it is
built, with no default; a control plane says which clock it runs on), so that the same message
says ``t=39m09s`` in the simulator and a date on a cluster. Pure functions: no clock is read.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

#: Seconds (the cluster's clock) to text for people.
TimeFormat = Callable[[float], str]


def format_duration(seconds: float) -> str:
    """Seconds for people: '0s', '8.1s', '59s', '12m05s', '3h07m', '2d04h' ('-' before, if
    negative). Under 10 s a tenth is kept; otherwise whole seconds, then the two largest
    units."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 9.95:
        return f"{seconds:.1f}s".replace(".0s", "s")
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def simulated_time(seconds: float) -> str:
    """An instant of a simulated cluster: 't=39m09s'."""
    return f"t={format_duration(seconds)}"


def wall_clock_time(unix_seconds: float) -> str:
    """An instant of the wall clock, in UTC to the second: '2026-11-24 15:38:02 UTC'."""
    return datetime.fromtimestamp(unix_seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def time_format(simulated: bool) -> TimeFormat:
    """The format of a world's instants: simulated, else the wall clock."""
    return simulated_time if simulated else wall_clock_time
