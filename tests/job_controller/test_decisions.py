"""The Job controller's pure decisions, branch by branch: a pod failed for good (its backoff
limit, its index's limit, the maximum of failed indexes), an index failed, completions
through, a container restarted in place against the backoff limit, a deadline passed, and the
back-offs' doubling."""

from __future__ import annotations

import pytest

from gpufleet.job_controller.backoffs import JOB_BACKOFF, KUBELET_BACKOFF, backoff
from gpufleet.job_controller.decisions import (
    BACKOFF_LIMIT_EXCEEDED,
    DEADLINE_EXCEEDED,
    FAILED_INDEXES,
    MAX_FAILED_INDEXES_EXCEEDED,
    Decision,
    Follows,
    JobCounts,
    JobRules,
    container_restarted,
    deadline_exceeded,
    fail_index,
    index_failed,
    listing,
    pod_failed,
    through,
)


def counts(failed: int = 0, per_index: dict[int, int] | None = None, *out: int) -> JobCounts:
    return JobCounts(failed, dict(per_index or {}), frozenset(out))


def summary(decision: Decision) -> tuple[object, ...]:
    found = decision.counts
    return (
        decision.follows,
        decision.delay,
        decision.reason,
        found.failed,
        dict(found.index_failures),
        sorted(found.failed_indexes),
    )


@pytest.mark.parametrize(
    ("rules", "before", "index", "expected"),
    [
        pytest.param(JobRules(), counts(), None, (Follows.REPLACE, 10.0, "", 1, {}, []),
                     id="no-limit-first-failure-replaced-after-10s"),
        pytest.param(JobRules(), counts(2), None, (Follows.REPLACE, 40.0, "", 3, {}, []),
                     id="third-failure-back-off-doubles"),
        pytest.param(JobRules(), counts(9), None, (Follows.REPLACE, 360.0, "", 10, {}, []),
                     id="back-off-capped-at-6-minutes"),
        pytest.param(JobRules(1), counts(), None, (Follows.REPLACE, 10.0, "", 1, {}, []),
                     id="within-backoff-limit-replaced"),
        pytest.param(JobRules(1), counts(1), None,
                     (Follows.FAILED, 0.0, BACKOFF_LIMIT_EXCEEDED, 2, {}, []),
                     id="past-backoff-limit-fails-the-job"),
        pytest.param(JobRules(0), counts(), None,
                     (Follows.FAILED, 0.0, BACKOFF_LIMIT_EXCEEDED, 1, {}, []),
                     id="limit-0-fails-at-the-first-failure"),
        pytest.param(JobRules(None, 1), counts(), 2, (Follows.REPLACE, 10.0, "", 1, {2: 1}, []),
                     id="index-within-its-limit-retried"),
        pytest.param(JobRules(None, 2), counts(1, {2: 1}), 2,
                     (Follows.REPLACE, 20.0, "", 2, {2: 2}, []),
                     id="index-back-off-counts-its-own-failures"),
        pytest.param(JobRules(None, 1), counts(1, {2: 1}), 2,
                     (Follows.INDEX_FAILED, 0.0, "", 2, {2: 2}, [2]),
                     id="index-past-its-limit-fails-for-good"),
        pytest.param(JobRules(None, 0, 0), counts(), 2,
                     (Follows.FAILED, 0.0, MAX_FAILED_INDEXES_EXCEEDED, 1, {2: 1}, [2]),
                     id="failed-index-past-the-max-fails-the-job"),
        pytest.param(JobRules(None, 0, 1), counts(), 2,
                     (Follows.INDEX_FAILED, 0.0, "", 1, {2: 1}, [2]),
                     id="failed-index-within-the-max-goes-on"),
        pytest.param(JobRules(1, 5), counts(1, {0: 1}), 0,
                     (Follows.FAILED, 0.0, BACKOFF_LIMIT_EXCEEDED, 2, {0: 1}, []),
                     id="backoff-limit-counts-before-the-index-limit"),
        pytest.param(JobRules(None, 1), counts(), None, (Follows.REPLACE, 10.0, "", 1, {}, []),
                     id="index-limit-without-an-index-counts-the-job"),
    ],
)  # fmt: skip
def test_a_pod_failed_for_good(
    rules: JobRules, before: JobCounts, index: int | None, expected: tuple[object, ...]
) -> None:
    assert summary(pod_failed(rules, before, index)) == expected


@pytest.mark.parametrize(
    ("rules", "before", "counted", "expected"),
    [
        pytest.param(JobRules(None, None, 1), counts(), True,
                     (Follows.INDEX_FAILED, 0.0, "", 1, {}, [3]), id="fail-index-rule-counts"),
        pytest.param(JobRules(None, None, 0), counts(), True,
                     (Follows.FAILED, 0.0, MAX_FAILED_INDEXES_EXCEEDED, 1, {}, [3]),
                     id="fail-index-rule-past-the-max"),
        pytest.param(JobRules(), counts(4, {}, 1), False,
                     (Follows.INDEX_FAILED, 0.0, "", 4, {}, [1, 3]),
                     id="index-failed-counts-nothing-more"),
        pytest.param(JobRules(None, None, 1), counts(4, {}, 1), False,
                     (Follows.FAILED, 0.0, MAX_FAILED_INDEXES_EXCEEDED, 4, {}, [1, 3]),
                     id="second-failed-index-past-max-1"),
    ],
)  # fmt: skip
def test_an_index_failed(
    rules: JobRules, before: JobCounts, counted: bool, expected: tuple[object, ...]
) -> None:
    decide = fail_index if counted else index_failed
    assert summary(decide(rules, before, 3)) == expected


def test_past_the_max_the_message_names_it() -> None:
    decision = index_failed(JobRules(None, 0, 0), counts(), 1)
    assert decision.message == "Job has exceeded the maximum of 0 failed indexes"


@pytest.mark.parametrize(
    ("completions", "succeeded", "failed_indexes", "follows", "reason", "message"),
    [
        pytest.param(3, 2, (), Follows.NOTHING, "", "", id="completions-left"),
        pytest.param(3, 3, (), Follows.SUCCEEDED, "", "", id="all-succeeded"),
        pytest.param(3, 1, (0,), Follows.NOTHING, "", "", id="failed-index-and-some-left"),
        pytest.param(3, 1, (2, 0), Follows.FAILED, FAILED_INDEXES, "Job has failed indexes 0,2",
                     id="through-with-failed-indexes"),
    ],
)  # fmt: skip
def test_completions_through(
    completions: int,
    succeeded: int,
    failed_indexes: tuple[int, ...],
    follows: Follows,
    reason: str,
    message: str,
) -> None:
    decision = through(JobRules(completions=completions), counts(0, {}, *failed_indexes), succeeded)
    assert (decision.follows, decision.reason, decision.message) == (follows, reason, message)
    assert decision.job_ended is (follows is not Follows.NOTHING)


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        pytest.param([3], "3", id="one"),
        pytest.param(range(25), ",".join(map(str, range(20))) + " and 5 more", id="past-20"),
    ],
)
def test_failed_indexes_are_listed_as_kubernetes_lists_them(indexes: list[int], text: str) -> None:
    assert listing(indexes) == text


@pytest.mark.parametrize(
    ("limit", "live", "restarts", "follows", "delay", "message"),
    [
        pytest.param(None, 9, 1, Follows.RESTART, 10.0, "", id="no-limit-restarts-after-10s"),
        pytest.param(None, 9, 3, Follows.RESTART, 40.0, "", id="back-off-doubles"),
        pytest.param(None, 9, 10, Follows.RESTART, 300.0, "", id="back-off-capped-at-5-min"),
        pytest.param(2, 1, 1, Follows.RESTART, 10.0, "", id="below-the-limit"),
        pytest.param(2, 2, 1, Follows.FAILED, 0.0,
                     "PyTorchJob has reached the specified backoff limit (2)",
                     id="live-restarts-reach-the-limit"),
        pytest.param(0, 1, 1, Follows.FAILED, 0.0,
                     "PyTorchJob has reached the specified backoff limit (0)",
                     id="limit-0-any-restart"),
    ],
)  # fmt: skip
def test_a_container_restarted_in_place(
    limit: int | None, live: int, restarts: int, follows: Follows, delay: float, message: str
) -> None:
    decision = container_restarted(JobRules(limit), counts(), live, restarts, "PyTorchJob")
    assert (decision.follows, decision.delay, decision.message) == (follows, delay, message)
    assert decision.reason == (BACKOFF_LIMIT_EXCEEDED if follows is Follows.FAILED else "")


def test_a_pod_past_the_backoff_limit_says_so_as_both_worlds_report_it() -> None:
    decision = pod_failed(JobRules(1), counts(1))
    assert decision.message == "Job has reached the specified backoff limit (1)"


def test_a_deadline_passed_fails_the_job() -> None:
    decision = deadline_exceeded(counts(2))
    assert (decision.follows, decision.reason, decision.counts.failed) == (
        Follows.FAILED,
        DEADLINE_EXCEEDED,
        2,
    )
    assert decision.message == "active longer than its time limit (activeDeadlineSeconds)"


@pytest.mark.parametrize(
    ("rule", "times", "delay"),
    [
        pytest.param(JOB_BACKOFF, 1, 10.0, id="job-first"),
        pytest.param(JOB_BACKOFF, 0, 10.0, id="job-zeroth-is-the-first"),
        pytest.param(JOB_BACKOFF, 6, 320.0, id="job-sixth"),
        pytest.param(JOB_BACKOFF, 7, 360.0, id="job-capped"),
        pytest.param(KUBELET_BACKOFF, 5, 160.0, id="kubelet-fifth"),
        pytest.param(KUBELET_BACKOFF, 6, 300.0, id="kubelet-capped"),
        pytest.param(KUBELET_BACKOFF, 10**6, 300.0, id="crash-looping-for-ever-no-overflow"),
    ],
)
def test_the_back_offs_double_to_their_cap(
    rule: tuple[float, float], times: int, delay: float
) -> None:
    assert backoff(rule, times) == delay
