"""``benchmarks/strict_reader.py``: the scenario it times is one the strict reader accepts whole
(a manifest it refused would time an error path), with every kind it is meant to cover."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.strict_reader import change, write_scenario
from gpufleet.io.readers import read_scenario


def test_the_timed_scenario_reads_whole_under_the_strict_reader(tmp_path: Path) -> None:
    write_scenario(tmp_path, 8)
    scenario = read_scenario(tmp_path)
    pods = Counter(len(t.workload.pods) for t in scenario.workloads)
    # 2 of each kind: Pods (1 pod), Jobs (a gang of 2), a Deployment's 2 replicas (one workload
    # each), PyTorchJobs (a gang of 4)
    assert len(scenario.workloads) == 10
    assert pods == {1: 6, 2: 2, 4: 2}, pods
    assert {t.workload.queue for t in scenario.workloads} == {"research"}


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param(2.0, 2.1, "+5.0%", id="slower"),
        pytest.param(4.0, 3.0, "-25.0%", id="faster"),
        pytest.param(1.0, 1.0, "+0.0%", id="same"),
    ],
)
def test_change_is_relative_to_before(before: float, after: float, expected: str) -> None:
    assert change(before, after) == expected
