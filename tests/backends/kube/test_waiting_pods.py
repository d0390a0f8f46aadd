"""Pods that wait, against the fake API server: each told why as soon as it waits, and gangs
all or nothing whatever order their pods come and go in (issue 27, items 3 and 7)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import Harness, harness

Obj = dict[str, Any]
GROUP = "gpufleet.dev/pod-group"


def cordoned(name: str, gpus: int = 4) -> Obj:
    node = ko.gpu_node(name, gpus=gpus)
    node["spec"]["unschedulable"] = True
    return node


def uncordon(h: Harness, name: str) -> None:
    node = h.server.get("v1", "Node", name)
    assert node is not None
    node["spec"]["unschedulable"] = False
    h.server.update(node)


def scheduled_condition(h: Harness, name: str) -> Obj | None:
    conditions = h.pod(name)["status"].get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def failed_scheduling(h: Harness) -> set[str]:
    return {e["involvedObject"]["name"] for e in h.events("FailedScheduling")}


def member(name: str, group: str = "ddp", gpus: int = 2) -> Obj:
    return ko.gpu_pod(name, gpus=gpus, labels={GROUP: group})


# ------------------------------------------------------------------------------ item 7
def test_every_pod_joining_a_parked_group_is_told_why_after_one_turn() -> None:
    """Five identical pods waiting for cordoned nodes: the four that come after the first
    parked join its group untried, and each is told why in the same turn."""
    with harness(cordoned("n1"), cordoned("n2")) as h:
        h.server.create(ko.gpu_pod("serve-0", gpus=1))
        h.settle()
        first = scheduled_condition(h, "serve-0")
        assert first is not None
        assert first["status"] == "False"
        for i in range(1, 5):
            h.server.create(ko.gpu_pod(f"serve-{i}", gpus=1))
        h.caught_up(10)
        h.scheduler.turn()
        h.caught_up(10)
        for i in range(5):
            condition = scheduled_condition(h, f"serve-{i}")
            assert condition is not None, f"serve-{i} was told nothing"
            assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
            assert condition["message"] == first["message"]
        assert failed_scheduling(h) == {f"serve-{i}" for i in range(5)}
        assert h.bound() == {}


# ------------------------------------------------------------------------------ item 3
def turn_until(h: Harness, check: Callable[[], bool], min_member: int, what: str) -> None:
    """Turn until ``check`` holds, asserting after every turn that the gang is all or
    nothing: none of its pods bound, or at least ``min_member``."""

    def all_or_nothing() -> bool:
        bound = len(h.bound())
        assert bound == 0 or bound >= min_member, f"{bound} pods of the gang bound alone"
        return check()

    h.until(all_or_nothing, what=what)


def delete(h: Harness, name: str) -> None:
    h.server.delete("v1", "Pod", name, "default")


def replace(h: Harness, name: str) -> None:
    h.server.create(member(name))


REPLACEMENTS: list[tuple[str, list[tuple[Callable[[Harness, str], None], str]], str]] = [
    ("deleted-then-replaced", [(delete, "ddp-1"), (replace, "ddp-4")], "ddp-4"),
    ("replaced-then-deleted", [(replace, "ddp-4"), (delete, "ddp-1")], "ddp-4"),
    ("replaced-under-its-name", [(delete, "ddp-1"), (replace, "ddp-1")], "ddp-1"),
]


@pytest.mark.parametrize(
    ("steps", "replacement"),
    [(steps, name) for _, steps, name in REPLACEMENTS],
    ids=[case for case, _, _ in REPLACEMENTS],
)
def test_a_waiting_gang_that_loses_a_pod_starts_whole_with_its_replacement(
    steps: list[tuple[Callable[[Harness, str], None], str]], replacement: str
) -> None:
    """PodGroup minMember 4, four pods waiting for cordoned nodes; one is deleted and its
    operator makes a replacement: nothing starts short of four, and once there is room the
    survivors and the replacement bind together (never the replacement alone, the survivors
    never stranded)."""
    with harness(cordoned("n1"), cordoned("n2"), ko.pod_group("ddp", min_member=4)) as h:
        for i in range(4):
            h.server.create(member(f"ddp-{i}"))
        h.settle()
        assert h.bound() == {}
        for step, name in steps:
            step(h, name)
            h.settle()
            assert h.bound() == {}, f"{h.bound()} bound while the nodes are cordoned"
        gang = {"default/ddp-0", "default/ddp-2", "default/ddp-3", f"default/{replacement}"}
        uncordon(h, "n1")
        uncordon(h, "n2")
        turn_until(h, lambda: set(h.bound()) == gang, 4, "the gang bound whole")


def test_survivors_of_a_waiting_gang_are_told_it_lacks_a_pod_not_the_stale_reason() -> None:
    with harness(cordoned("n1"), cordoned("n2"), ko.pod_group("ddp", min_member=4)) as h:
        for i in range(4):
            h.server.create(member(f"ddp-{i}"))
        h.settle()
        before = scheduled_condition(h, "ddp-0")
        assert before is not None
        assert "pods exist" not in before["message"]
        delete(h, "ddp-1")
        h.settle()
        for name in ("ddp-0", "ddp-2", "ddp-3"):
            condition = scheduled_condition(h, name)
            assert condition is not None
            assert condition["message"] == "waiting for gang default/ddp: 3/4 pods exist"


def test_a_pod_joining_a_waiting_gang_waits_for_it_to_start_then_runs_on_its_own() -> None:
    """A fifth pod made while the gang of four waits is not bound before the gang (it would
    hold GPUs the gang needs, alone); once the gang starts it is a workload of its own, as a
    pod joining a running gang is."""
    nodes = (cordoned("n1", gpus=5), cordoned("n2", gpus=5))
    with harness(*nodes, ko.pod_group("ddp", min_member=4)) as h:
        for i in range(4):
            h.server.create(member(f"ddp-{i}"))
        h.settle()
        h.server.create(member("ddp-4", gpus=1))
        h.settle()
        condition = scheduled_condition(h, "ddp-4")
        assert condition is not None
        assert "waiting for gang default/ddp to start" in condition["message"]
        uncordon(h, "n1")
        uncordon(h, "n2")
        turn_until(h, lambda: len(h.bound()) == 5, 4, "the gang, then the fifth pod, bound")


# ------------------------------------------------------------------------------ property
def set_cordoned(h: Harness, cordon: bool, *names: str) -> None:
    for name in names:
        node = h.server.get("v1", "Node", name)
        assert node is not None
        node["spec"]["unschedulable"] = cordon
        h.server.update(node)


def settle_checking(h: Harness, check: Callable[[], None], max_turns: int = 50) -> None:
    """:meth:`Harness.settle`, with ``check`` after every turn."""
    h.caught_up(10)
    for _ in range(max_turns):
        before = len(h.server.requests)
        h.scheduler.turn()
        h.caught_up(10)
        check()
        if len(h.server.requests) == before:
            return
    raise AssertionError(f"the scheduler did not settle in {max_turns} turns")


#: An example's steps: a pod made by the gang's operator, a waiting pod deleted (the n-th of
#: those waiting, round), or room made (the nodes uncordoned).
STEPS = st.lists(
    st.one_of(
        st.just(("add", 0)), st.tuples(st.just("delete"), st.integers(0, 5)), st.just(("room", 0))
    ),
    max_size=8,
)


def test_a_gang_is_all_or_nothing_whatever_order_its_pods_come_and_go_in() -> None:
    """Property: for any order of pods made, waiting pods deleted and room made, the gang's
    bound pods after every turn number none or at least minMember; and once there is room,
    a gang with minMember pods is bound whole (no survivor stranded)."""
    numbers = itertools.count()
    with harness(cordoned("n1"), cordoned("n2")) as h:

        @settings(
            max_examples=8,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        )
        @given(min_member=st.integers(2, 3), first=st.integers(0, 4), steps=STEPS)
        # The case: a waiting gang loses a pod, its operator makes a replacement.
        @example(min_member=3, first=3, steps=[("delete", 1), ("add", 0), ("room", 0)])
        def check(min_member: int, first: int, steps: list[tuple[str, int]]) -> None:
            group = f"g{next(numbers)}"
            made = itertools.count()
            h.server.create(ko.pod_group(group, min_member=min_member))

            def pods() -> list[Obj]:
                found = h.server.list("v1", "Pod")
                return [p for p in found if p["metadata"]["labels"].get(GROUP) == group]

            def all_or_nothing() -> None:
                bound = sum(1 for p in pods() if p["spec"].get("nodeName"))
                assert bound == 0 or bound >= min_member, f"{bound} of {group} bound alone"

            def add() -> None:
                if len(pods()) < 6:
                    h.server.create(member(f"{group}-{next(made)}", group, gpus=1))

            for _ in range(first):
                add()
            settle_checking(h, all_or_nothing)
            for step, n in steps:
                if step == "add":
                    add()
                elif step == "delete":
                    waiting = sorted(
                        p["metadata"]["name"] for p in pods() if not p["spec"].get("nodeName")
                    )
                    if waiting:
                        delete(h, waiting[n % len(waiting)])
                else:
                    set_cordoned(h, False, "n1", "n2")
                settle_checking(h, all_or_nothing)
            set_cordoned(h, False, "n1", "n2")
            settle_checking(h, all_or_nothing)
            left = pods()
            if len(left) >= min_member:
                unbound = [p["metadata"]["name"] for p in left if not p["spec"].get("nodeName")]
                assert unbound == [], f"stranded with room to run: {unbound}"
            for pod in left:  # the next example starts on empty, cordoned nodes
                delete(h, pod["metadata"]["name"])
            h.server.delete("gpufleet.dev/v1alpha1", "PodGroup", group, "default")
            set_cordoned(h, True, "n1", "n2")
            h.settle()

        check()
