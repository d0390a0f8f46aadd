"""The one format of durations and instants (gpufleet.model.times)."""

from __future__ import annotations

import pytest

from gpufleet.model.times import (
    format_duration,
    simulated_time,
    time_format,
    wall_clock_time,
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(0, "0s", id="zero"),
        pytest.param(0.25, "0.2s", id="under-a-second"),
        pytest.param(8.1, "8.1s", id="tenths-under-ten"),
        pytest.param(9.96, "10s", id="rounds-up-to-ten"),
        pytest.param(10, "10s", id="ten"),
        pytest.param(59, "59s", id="59"),
        pytest.param(59.6, "1m00s", id="rounds-up-to-a-minute"),
        pytest.param(60, "1m00s", id="a-minute"),
        pytest.param(2349, "39m09s", id="minutes-and-seconds"),
        pytest.param(3599, "59m59s", id="3599"),
        pytest.param(3600, "1h00m", id="an-hour"),
        pytest.param(7500, "2h05m", id="hours-and-minutes"),
        pytest.param(86399, "23h59m", id="86399"),
        pytest.param(86400, "1d00h", id="a-day"),
        pytest.param(97380, "1d03h", id="days-and-hours"),
        pytest.param(400 * 86400, "400d00h", id="long"),
        pytest.param(-75, "-1m15s", id="negative"),
    ],
)
def test_durations_read_in_the_two_largest_units(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert simulated_time(seconds) == f"t={text}"


@pytest.mark.parametrize(
    ("unix_seconds", "text"),
    [
        pytest.param(0, "1970-01-01 00:00:00 UTC", id="epoch"),
        pytest.param(1795475976, "2026-11-23 23:19:36 UTC", id="kube-now"),
        pytest.param(1795475976.9, "2026-11-23 23:19:36 UTC", id="to-the-second"),
    ],
)
def test_wall_clock_instants_read_as_utc_dates(unix_seconds: float, text: str) -> None:
    assert wall_clock_time(unix_seconds) == text


def test_each_world_has_its_format() -> None:
    assert time_format(simulated=True)(2349) == "t=39m09s"
    assert time_format(simulated=False)(1795475976) == "2026-11-23 23:19:36 UTC"
