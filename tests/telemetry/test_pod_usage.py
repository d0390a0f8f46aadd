"""The compact usage table answers as the dict of ``PodUsage`` objects it replaced."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.telemetry.pod_usage import SAVE_BLOCK, PodKey, PodUsage, PodUsageTable, saved_form

PODS = st.tuples(st.sampled_from(["ml", "team-a"]), st.sampled_from(["a", "b", "c", "d-0"]))
#: A sample of a pod (its time step after the last one, and its value) or a forget (time).
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), PODS, st.integers(0, 3), st.floats(0, 100)),
        st.tuples(st.just("forget"), st.integers(0, 40)),
    ),
    max_size=60,
)


def plain_forget(plain: dict[PodKey, PodUsage], before: float) -> list[PodKey]:
    stale = []
    for pod, usage in plain.items():
        if usage.last > before:
            break
        stale.append(pod)
    for pod in stale:
        del plain[pod]
    return stale


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_the_table_answers_as_a_dict_of_summaries(steps: list[tuple[object, ...]]) -> None:
    table, plain = PodUsageTable(capacity=2), dict[PodKey, PodUsage]()
    now = 0.0
    for step in steps:
        if step[0] == "add":
            _, pod, later, value = step
            assert isinstance(pod, tuple)
            assert isinstance(later, int)
            assert isinstance(value, float)
            now += later
            table.add(pod, now, value)
            usage = plain.pop(pod, None) or PodUsage()
            usage.add(now, value)
            plain[pod] = usage
        else:
            assert isinstance(step[1], int)
            assert table.forget_stale(now - step[1]) == plain_forget(plain, now - step[1])
        assert list(table) == list(plain)
        assert {pod: table[pod] for pod in table} == plain
        assert all(table.last_of(pod) == usage.last for pod, usage in plain.items())
    keys, rows = table.rows()
    assert keys == [f"{ns}/{pod}" for ns, pod in plain]
    assert rows.tolist() == [[u.samples, u.total, u.first, u.last] for u in plain.values()]


def test_a_forgotten_pods_row_is_reused_from_nothing() -> None:
    table = PodUsageTable(capacity=1)
    table.add(("ml", "a"), 10.0, 50.0)
    assert table.forget_stale(10.0) == [("ml", "a")]
    table.add(("ml", "b"), 20.0, 30.0)
    assert table[("ml", "b")] == PodUsage(1, 30.0, 20.0, 20.0)
    assert ("ml", "a") not in table
    assert table.last_of(("ml", "a")) is None
    assert math.isnan(PodUsage().mean)


def test_put_all_restores_in_the_order_given() -> None:
    table = PodUsageTable()
    table.put_all(
        [(("ml", "b"), PodUsage(2, 10.0, 0.0, 5.0)), (("ml", "a"), PodUsage(1, 1.0, 7, 7))]
    )
    assert list(table) == [("ml", "b"), ("ml", "a")]
    assert table[("ml", "a")].mean == 1.0


@pytest.mark.parametrize(
    "pods", [0, 1, SAVE_BLOCK, SAVE_BLOCK + 3], ids=["none", "one", "block", "more"]
)
def test_the_saved_form_is_the_json_of_every_summary(pods: int) -> None:
    table = PodUsageTable()
    for i in range(pods):
        table.add(("ml", f"p-{i}"), 10.0 + i, i / 3)
    form = saved_form(*table.rows())
    assert json.loads(form) == {f"ml/p-{i}": [1, i / 3, 10.0 + i, 10.0 + i] for i in range(pods)}
