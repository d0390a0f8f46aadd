"""The set-up of benchmarks/cycle_speed.py, built small (50 nodes, 5 queues, 40 pending): it has
the intended shape (an org queue over team queues, a busy cluster with some team borrowing, the
pending workloads waiting untried) and its cycles run. No timing is asserted."""

from __future__ import annotations

import pytest

from benchmarks.cycle_speed import (
    Setup,
    allocated_fraction,
    borrowing_queues,
    build_setup,
    clone,
    finish_workload,
    is_lender,
    leaves,
    pending_kinds,
    run_cases,
    settle_after,
    timed_cycle,
)
from gpufleet.model.actions import Bind, Evict
from gpufleet.model.resources import GPU


@pytest.fixture(scope="module")
def setup() -> Setup:
    return build_setup(nodes=50, orgs=1, teams=4, pending=40, seed=0)


def test_queues_are_an_org_over_teams_with_quotas_adding_up_to_the_cluster(setup: Setup) -> None:
    teams = leaves(setup.queues)
    assert len(setup.queues) == 5
    assert len(teams) == 4
    assert {q.parent for q in teams} == {"org0"}
    (org,) = [q for q in setup.queues if q.parent is None]
    gpus = setup.core.table.total_gpu_milli()
    assert 0.95 * gpus <= org.nominal[GPU] <= gpus
    assert sum(q.nominal[GPU] for q in teams) <= org.nominal[GPU]
    assert any(is_lender(q) for q in teams)
    assert not all(is_lender(q) for q in teams)


def test_cluster_is_busy_with_some_team_borrowing(setup: Setup) -> None:
    core = setup.core
    assert core.table.size == 50
    assert 0.75 <= allocated_fraction(core) <= 0.95
    assert borrowing_queues(core, setup.queues)
    assert {r.workload.queue for r in core.running.values()} <= {q.name for q in setup.queues}
    assert all(r.started == 0.0 for r in core.running.values())


def test_pending_workloads_wait_untried_in_team_queues(setup: Setup) -> None:
    core = setup.core
    assert len(setup.pending) == 40
    assert len(core.pending) == 40
    teams = {q.name for q in leaves(setup.queues)}
    queues = {w.queue for w in setup.pending}
    assert queues <= teams
    assert len(queues) >= 2
    assert all(g.head.attempts == 0 and g.parked is None for g in core.pending.groups())
    kinds = pending_kinds(setup.pending)
    assert sum(v for k, v in kinds.items() if k != "in topology") == 40
    assert kinds["gangs"] > 0
    assert kinds["1-GPU pods"] > 0


def test_cycle_runs_on_a_copy_and_leaves_the_setup_as_it_was(setup: Setup) -> None:
    state = clone(setup)
    result, actions = timed_cycle(state.core, state.now)
    assert result.pending_before == 40
    assert result.tried >= 1
    assert result.searches >= result.preemptors
    assert result.seconds > 0
    assert result.admitted == len(
        {state.core.owner[a.pod.key] for a in actions if isinstance(a, Bind)}
    )
    assert len(setup.core.pending) == 40  # the original is untouched
    assert all(g.head.attempts == 0 for g in setup.core.pending.groups())


def test_settled_state_and_a_finished_workload_run(setup: Setup) -> None:
    settled = settle_after(setup)
    again = settled.core.cycle(settled.now)
    assert not any(isinstance(a, Bind | Evict) for a in again)  # nothing left to do
    running = len(settled.core.running)
    key = sorted(settled.core.running)[0]
    finish_workload(settled, key)
    assert len(settled.core.running) == running - 1
    waiting = len(settled.core.pending)
    result, _ = timed_cycle(settled.core, settled.now + 1.0)
    assert result.pending_before == waiting
    assert len(settled.core.pending) <= waiting


def test_all_cases_run(setup: Setup) -> None:
    cases, steady = run_cases(setup, repeats=1)
    assert [c.name for c in cases] == ["cold", "pod finished", "arrival"]
    assert all(len(c.results) == 1 for c in cases)
    assert all(len(c.event_seconds) == 1 for c in cases[1:])
    assert steady.running > 0
    assert 0.0 < steady.allocated <= 1.0
