"""VersionedMemo: an answer is read only under the versions it was made under."""

from __future__ import annotations

import pytest

from gpufleet.scheduling.memo import VersionedMemo


class Counter:
    """A computation that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.calls


@pytest.mark.parametrize(
    ("asks", "computed"),
    [
        ([("a", (1, 0)), ("a", (1, 0))], 1),
        ([("a", (1, 0)), ("a", (2, 0))], 2),
        ([("a", (1, 0)), ("a", (2, 0)), ("a", (1, 0))], 3),
        ([("a", (1, 0)), ("b", (2, 0)), ("a", (1, 0))], 2),
        ([("a", (1, 0)), ("b", (1, 0)), ("c", (1, 0)), ("a", (1, 0))], 4),
    ],
    ids=["same-versions-kept", "new-versions-recomputed", "only-the-latest-kept",
         "entries-keep-their-own-versions", "past-its-size-emptied"],
)  # fmt: skip
def test_answers_are_read_only_under_their_versions(
    asks: list[tuple[str, tuple[int, int]]], computed: int
) -> None:
    memo: VersionedMemo[str, int] = VersionedMemo(limit=2)
    compute = Counter()
    for key, versions in asks:
        memo.get(key, versions, compute)
    assert compute.calls == computed
    assert len(memo) <= 2
