"""The ``calendar-window`` admission check, a check written as one file and enabled by one line
of profile: in a simulated world, a queue's workload that arrives outside the window waits with
the check's reason (explain says it), the loop wakes at the window's opening by the check's
timer (no turn in between), and it is admitted then; inside the window work starts at once.
Also its hours (over midnight, fractions) and its arguments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpufleet.backends.sim.cluster import Mode, SimulatedCluster
from gpufleet.control.loop import ControlLoop, Turn, sync
from gpufleet.control.profiles import load_profile
from gpufleet.io.errors import InputError
from gpufleet.model.events import ClusterEvent
from gpufleet.model.workload import TimedWorkload
from gpufleet.scheduling.core import PendingExplanation, SchedulerCore
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.plugins.calendar_window import CalendarWindow
from gpufleet.scheduling.profile import PluginSpec, Profile
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import make_core

HOUR = 3600.0
DAY = 24 * HOUR
README = Path(__file__).resolve().parents[2] / "README.md"
#: The one line that enables it: the queue "night" admits new work from 02:00 to 06:00.
PROFILE = (
    "admissionChecks: [budget, "
    "{name: calendar-window, args: {queue: night, opensAt: 2, closesAt: 6}}]\n"
)
#: What explain says of a workload of "night" that arrived at 00:00.
WAITS = (
    "waiting for admission check calendar-window: queue night admits new work from "
    "02:00 to 06:00 only; opens t=2h00m"
)


@dataclass
class Watch:
    """Each turn's time, and what waited (explain) and ran after it."""

    turns: list[float] = field(default_factory=list)
    waiting: dict[float, list[PendingExplanation]] = field(default_factory=dict)
    running: dict[float, set[str]] = field(default_factory=dict)

    def events_in(self, events: Sequence[ClusterEvent]) -> None:
        pass

    def turn_done(self, core: SchedulerCore, turn: Turn) -> None:
        self.turns.append(turn.now)
        self.waiting[turn.now] = core.explain_pending(estimate=False)
        self.running[turn.now] = set(core.running)


def simulate(tmp_path: Path, *timed: TimedWorkload) -> tuple[Watch, SchedulerCore]:
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE)
    nodes = [make_node("n0", gpus=8)]
    core = make_core(
        nodes, [make_queue("night", gpus=8), make_queue("day", gpus=8)], profile=load_profile(path)
    )
    sim = SimulatedCluster(nodes, (), Mode.REPLAY, TargetWorkload((), ()), workloads=timed)
    watch = Watch()
    sync(core, sim.list_state())
    ControlLoop(sim, lambda: core, [watch]).run()
    return watch, core


def test_outside_its_window_a_workload_waits_with_the_checks_reason_until_the_opening(
    tmp_path: Path,
) -> None:
    night = make_workload("train", "night", gpus=2)
    day = make_workload("serve", "day", gpus=2)
    # (A world whose events are over ends, waits or not: a later arrival keeps it going.)
    later = make_workload("later", "day", gpus=2)
    watch, core = simulate(
        tmp_path,
        TimedWorkload(night, 0.0, HOUR),
        TimedWorkload(day, 0.0, HOUR),
        TimedWorkload(later, 5 * HOUR, HOUR),
    )
    # At 00:00 the window is shut: the other queue's work starts, the night queue's waits,
    # parked for the check (not for quota), and explain says the check's own message.
    assert watch.running[0.0] == {day.key}
    (waits,) = watch.waiting[0.0]
    assert waits.workload == night.key
    assert waits.waiting_for == CalendarWindow.name
    assert waits.message == WAITS
    # The loop's next turn after 00:00 and before 02:00 is the day job's end at 01:00 (an
    # event); none comes between that and the opening: the check's timer woke it.
    assert [t for t in watch.turns if t < 2 * HOUR] == [0.0, HOUR]
    assert night.key not in watch.running[HOUR]
    assert [t for t in watch.turns if HOUR < t <= 2 * HOUR] == [2 * HOUR]
    assert watch.running[2 * HOUR] == {night.key}
    assert watch.waiting[2 * HOUR] == []
    assert core.preemptions == []


def test_inside_its_window_work_starts_at_once_and_a_closed_window_waits_for_the_next_day(
    tmp_path: Path,
) -> None:
    early = make_workload("early", "night", gpus=2)
    late = make_workload("late", "night", gpus=2)
    first, last = (make_workload(name, "day", gpus=1) for name in ("first", "last"))
    watch, _ = simulate(
        tmp_path,
        TimedWorkload(first, 0.0, HOUR),  # the simulated day starts with it, at 00:00
        TimedWorkload(early, 3 * HOUR, HOUR),  # inside: starts at 03:00
        TimedWorkload(late, 7 * HOUR, HOUR),  # after it closed: waits for 02:00 next day
        TimedWorkload(last, 27 * HOUR, HOUR),
    )
    assert watch.running[3 * HOUR] == {early.key}
    closed = 7 * HOUR
    (waits,) = watch.waiting[closed]
    assert (waits.workload, waits.waiting_for) == (late.key, CalendarWindow.name)
    assert waits.message.endswith("opens t=1d02h")  # 02:00 of the next (simulated) day
    opening = DAY + 2 * HOUR
    assert [t for t in watch.turns if closed < t < opening] == []
    assert watch.running[opening] == {late.key}


def test_quota_given_back_does_not_wake_what_the_window_refused() -> None:
    """Its refusals are woken by itself only (``requeue_on`` is empty), not with quota."""
    args = {"queue": "night", "opensAt": 2, "closesAt": 6}
    profile = Profile(admission_checks=(PluginSpec("calendar-window", args),))
    core = make_core([make_node("n0", gpus=8)], [make_queue("night", gpus=8)], profile=profile)
    (window,) = core.admission_checks
    core.add(make_workload("train", "night", gpus=2))
    core.run_until_idle(0.0)
    (group,) = core.pending.parked_groups()
    assert (group.parked, group.refused_by) == (Parked.ADMISSION_CHECK, window.name)
    core.pending.wake_all(Parked.QUOTA)
    assert core.pending.parked_groups() == [group]
    assert core.check_timer(0.0) == 2 * HOUR
    core.pending.wake_refused_by(window.name)
    assert core.pending.parked_groups() == []


@pytest.mark.parametrize(
    ("opens", "closes", "hour", "is_open", "next_opening"),
    [
        (2.0, 6.0, 1.0, False, 2.0),
        (2.0, 6.0, 2.0, True, 26.0),
        (2.0, 6.0, 6.0, False, 26.0),
        (22.0, 6.0, 23.0, True, 46.0),
        (22.0, 6.0, 5.5, True, 22.0),
        (22.0, 6.0, 12.0, False, 22.0),
        (7.5, 8.0, 7.75, True, 31.5),
        (20.0, 24.0, 23.9, True, 44.0),
    ],
    ids=[
        "before-it-opens",
        "at-its-opening",
        "at-its-close",
        "over-midnight-before-midnight",
        "over-midnight-after-midnight",
        "over-midnight-at-noon",
        "half-hours",
        "to-midnight",
    ],
)
def test_its_hours(
    opens: float, closes: float, hour: float, is_open: bool, next_opening: float
) -> None:
    core = make_core([make_node("n0", gpus=1)], [make_queue("night")])
    window = CalendarWindow(core.state, "night", opens, closes)
    assert window.is_open(hour * HOUR) is is_open
    assert window.opening_after(hour * HOUR) == next_opening * HOUR


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ("{queue: night, opensAt: 2}", "missing argument 'closesAt'"),
        ("{queue: night, opensAt: 2, closesAt: 2}", "hours from 0 to 24, not the same"),
        ("{queue: night, opensAt: 0, closesAt: 24}", "hours from 0 to 24, not the same"),
        ("{queue: night, opensAt: 2, closesAt: 25}", "hours from 0 to 24, not the same"),
        ("{queue: 3, opensAt: 2, closesAt: 6}", "argument 'queue' must be a str"),
        ("{queue: night, opensAt: 2, closesAt: 6, days: 5}", "unknown argument 'days'"),
    ],
    ids=["missing", "empty-window", "whole-day", "past-midnight", "queue-not-a-name", "unknown"],
)
def test_bad_arguments_are_an_error_naming_the_file(tmp_path: Path, args: str, error: str) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(f"admissionChecks: [{{name: calendar-window, args: {args}}}]\n")
    with pytest.raises(InputError, match=error):
        load_profile(path)


def test_the_readme_shows_the_profile_line_and_the_message_tested_here() -> None:
    readme = " ".join(README.read_text().split())
    assert PROFILE.strip() in readme
    assert WAITS in readme
