"""``Pod.renamed`` and ``Workload.renamed`` are ``dataclasses.replace`` of the name, faster."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.model import Pod
from gpufleet.model.workload import Workload
from gpufleet.testing.builders import make_pod, make_workload


@given(
    name=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    gpus=st.integers(0, 8),
    labels=st.dictionaries(st.sampled_from("abc"), st.sampled_from("xyz"), max_size=3),
)
def test_a_renamed_pod_is_the_replaced_one(name: str, gpus: int, labels: dict[str, str]) -> None:
    pod = make_pod("original", gpus=gpus, labels=labels)
    fast, plain = pod.renamed(name), dataclasses.replace(pod, name=name)
    for field in Pod.__slots__:  # every field, the computed key and signature included
        assert getattr(fast, field) == getattr(plain, field), field


def test_a_renamed_workload_is_the_replaced_one() -> None:
    workload = make_workload("w", "team", pods=3, gpus=2, namespace="ml")
    pods = tuple(p.renamed(f"v-{i}") for i, p in enumerate(workload.pods))
    fast = workload.renamed("v", pods)
    plain = dataclasses.replace(workload, name="v", pods=pods)
    for field in Workload.__slots__:
        assert getattr(fast, field) == getattr(plain, field), field
    assert fast.key == "ml/v"


def test_a_workload_renamed_keeps_its_pod_count() -> None:
    workload = make_workload("w", "team")
    with pytest.raises(ValueError, match="pods"):
        workload.renamed("v", ())
