"""What a preempted workload's owner is told of its preemptor (:func:`told_to_victim`)."""

from __future__ import annotations

import pytest

from gpufleet.model.actions import PREEMPTOR_ELSEWHERE, told_to_victim


@pytest.mark.parametrize(
    ("reason", "preemptor", "victim_namespace", "expected"),
    [
        ("preempted by team-a/Job/big", "team-a/Job/big", "team-a",
         ("team-a/Job/big", "preempted by team-a/Job/big")),
        ("preempted by team-b/Job/big", "team-b/Job/big", "team-a",
         (PREEMPTOR_ELSEWHERE, f"preempted by {PREEMPTOR_ELSEWHERE}")),
        ("preempted by team-b/big", "team-b/big", "team-a",
         (PREEMPTOR_ELSEWHERE, f"preempted by {PREEMPTOR_ELSEWHERE}")),
        ("node n1 is going away", None, "team-a", (None, "node n1 is going away")),
    ],
    ids=["same-namespace", "other-namespace", "key-without-kind", "no-preemptor"],
)  # fmt: skip
def test_a_victim_learns_only_its_own_namespaces_preemptors(
    reason: str, preemptor: str | None, victim_namespace: str, expected: tuple[str | None, str]
) -> None:
    assert told_to_victim(reason, preemptor, victim_namespace) == expected
