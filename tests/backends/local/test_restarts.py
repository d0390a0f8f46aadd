"""The kubelet's rules for restarting a process in place: which ends restart it, and the
back-off before each restart; and the counts a run keeps in its labels."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.backends.local.restarts import CrashBackoff, RunCounts, restarts_after
from gpufleet.model.jobs import RestartPolicy


@pytest.mark.parametrize(
    ("policy", "succeeded", "restarts"),
    [
        pytest.param(RestartPolicy.ALWAYS, True, True, id="always-after-a-success"),
        pytest.param(RestartPolicy.ALWAYS, False, True, id="always-after-a-failure"),
        pytest.param(RestartPolicy.ON_FAILURE, True, False, id="on-failure-after-a-success"),
        pytest.param(RestartPolicy.ON_FAILURE, False, True, id="on-failure-after-a-failure"),
        pytest.param(RestartPolicy.NEVER, False, False, id="never"),
        pytest.param(None, False, False, id="none"),
    ],
)
def test_which_ends_restart_a_process(
    policy: RestartPolicy | None, succeeded: bool, restarts: bool
) -> None:
    assert restarts_after(policy, succeeded) is restarts


def test_the_kubelets_back_off_doubles_from_10s_to_5min() -> None:
    backoff = CrashBackoff()
    assert [backoff.delay(n) for n in range(8)] == [10, 20, 40, 80, 160, 300, 300, 300]
    assert backoff.reset_after_s == 600


@given(st.integers(min_value=0, max_value=10_000))
def test_a_back_off_never_passes_its_cap(streak: int) -> None:
    backoff = CrashBackoff(0.05, 0.2, 1.0)
    assert 0.05 <= backoff.delay(streak) <= 0.2


@given(
    st.builds(
        RunCounts,
        st.integers(0, 100),
        st.integers(0, 100),
        st.integers(0, 100),
        st.none() | st.floats(0, 2e9, allow_nan=False),
    )
)
def test_the_counts_a_run_keeps_read_back_the_same(counts: RunCounts) -> None:
    assert RunCounts.of(counts.labels()) == counts
