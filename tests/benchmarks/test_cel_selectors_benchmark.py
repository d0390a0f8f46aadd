"""``benchmarks/cel_selectors.py``: its table's expected answers are gpufleet's engine's on the
benchmark's GPUs, so the comparison it prints times right answers."""

from __future__ import annotations

import pytest

from benchmarks.cel_selectors import TABLE, gpus, rust_engine


@pytest.mark.parametrize(("what", "expression", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_the_table_holds_gpufleets_answers(what: str, expression: str, expected: bool) -> None:
    outcome = rust_engine(expression, expected, gpus(16), 1)
    assert outcome.compiles, outcome.note
    assert outcome.correct
