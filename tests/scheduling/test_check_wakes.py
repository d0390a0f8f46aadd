"""What wakes a workload an admission check refused (kube-scheduler's queueing hints): the
wakes its check names in ``requeue_on`` (quota given back by default, as before checks could
say), the check itself (``wake_refused_by``), or a wake of everything; never another check's
wake-up."""

from __future__ import annotations

import pytest

from gpufleet.scheduling.framework import REQUEUE_ON_QUOTA
from gpufleet.scheduling.pending import Parked, PendingWorkloads
from gpufleet.testing.builders import make_workload


def parked_by(check: str, requeue_on: frozenset[str]) -> PendingWorkloads:
    """One group, refused by ``check``, whose hints are ``requeue_on``."""
    pending = PendingWorkloads()
    pending.requeue_on = {check: requeue_on, "other": frozenset()}
    pending.add(make_workload("w", "q"), 0.0)
    (group,) = pending.groups()
    pending.park(group, Parked.ADMISSION_CHECK, by=check)
    return pending


@pytest.mark.parametrize(
    ("requeue_on", "wake", "woken"),
    [
        (REQUEUE_ON_QUOTA, "quota", True),
        (REQUEUE_ON_QUOTA, "capacity", False),
        (frozenset(), "quota", False),
        (frozenset({Parked.CAPACITY}), "capacity", True),
        (frozenset(), "everything", True),
        (frozenset(), "its check", True),
        (REQUEUE_ON_QUOTA, "another check", False),
    ],
    ids=[
        "quota-wakes-a-check-hinting-quota",
        "capacity-does-not",
        "quota-does-not-wake-a-check-hinting-nothing",
        "capacity-wakes-a-check-hinting-capacity",
        "a-wake-of-everything",
        "its-own-check",
        "not-another-check",
    ],
)
def test_what_wakes_a_refusal(requeue_on: frozenset[str], wake: str, woken: bool) -> None:
    pending = parked_by("mine", requeue_on)
    if wake == "everything":
        pending.wake_all()
    elif wake == "its check":
        pending.wake_refused_by("mine")
    elif wake == "another check":
        pending.wake_refused_by("other")
    else:
        pending.wake_all(Parked(wake))
    assert (not pending.parked_groups()) is woken


@pytest.mark.parametrize(
    "then",
    ["parked-again-for-capacity", "woken-then-parked-for-capacity", "left"],
)
def test_a_group_no_longer_refused_is_not_woken_as_refused(then: str) -> None:
    pending = parked_by("mine", REQUEUE_ON_QUOTA)
    (group,) = pending.groups()
    if then == "left":
        pending.remove("default/w")
    else:
        if then == "woken-then-parked-for-capacity":
            pending.wake_refused_by("mine")
        pending.park(group, Parked.CAPACITY)
    pending.wake_refused_by("mine")
    pending.wake_all(Parked.QUOTA)
    assert pending.parked_groups() == ([] if then == "left" else [group])
    assert group.refused_by == ""
