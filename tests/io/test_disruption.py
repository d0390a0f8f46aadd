"""The autoscalers' do-not-disrupt annotations: read as "not preemptible", and written by
gpufleet on a gang's pods without ever being read back as the user's own."""

from __future__ import annotations

import pytest

from gpufleet.io.kube.disruption import (
    DO_NOT_DISRUPT,
    GUARD_ANNOTATION,
    SAFE_TO_EVICT,
    gang_guard,
    protection,
)
from tests.io.conftest import WriteFile
from tests.io.test_queues import Obj, pod_group
from tests.io.test_workloads import GROUP, deployment, pod, read, template


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, None),
        ({SAFE_TO_EVICT: "false"}, f'{SAFE_TO_EVICT}: "false"'),
        ({SAFE_TO_EVICT: "true"}, None),
        ({SAFE_TO_EVICT: "False"}, None),  # Cluster Autoscaler compares exactly
        ({DO_NOT_DISRUPT: "true"}, f'{DO_NOT_DISRUPT}: "true"'),
        ({DO_NOT_DISRUPT: "5m"}, None),  # a duration is Karpenter's alone
        ({"karpenter.sh/do-not-evict": "true"}, 'karpenter.sh/do-not-evict: "true"'),
        # What gpufleet wrote itself is not the user's protection...
        ({SAFE_TO_EVICT: "false", DO_NOT_DISRUPT: "true",
          GUARD_ANNOTATION: f"{SAFE_TO_EVICT},{DO_NOT_DISRUPT}"}, None),
        # ...but what the user wrote beside it is.
        ({SAFE_TO_EVICT: "false", DO_NOT_DISRUPT: "true", GUARD_ANNOTATION: DO_NOT_DISRUPT},
         f'{SAFE_TO_EVICT}: "false"'),
    ],
    ids=[
        "none", "safe-to-evict-false", "safe-to-evict-true", "safe-to-evict-case",
        "do-not-disrupt", "do-not-disrupt-duration", "do-not-evict", "ours", "ours-and-theirs",
    ],
)  # fmt: skip
def test_protection(annotations: dict[str, str], expected: str | None) -> None:
    assert protection(annotations) == expected


@pytest.mark.parametrize(
    ("annotations", "added"),
    [
        ({}, {SAFE_TO_EVICT: "false", DO_NOT_DISRUPT: "true",
              GUARD_ANNOTATION: f"{SAFE_TO_EVICT},{DO_NOT_DISRUPT}"}),
        ({SAFE_TO_EVICT: "true"}, {DO_NOT_DISRUPT: "true", GUARD_ANNOTATION: DO_NOT_DISRUPT}),
        ({SAFE_TO_EVICT: "false", DO_NOT_DISRUPT: "true"}, {}),
    ],
    ids=["bare", "the-pods-own-word-stands", "nothing-to-add"],
)  # fmt: skip
def test_the_gang_guard_adds_only_what_the_pod_does_not_say(
    annotations: dict[str, str], added: dict[str, str]
) -> None:
    guard = gang_guard(annotations)
    assert guard == added
    assert protection({**annotations, **guard}) == protection(annotations)


@pytest.mark.parametrize(
    ("objects", "preemptible"),
    [
        ([pod("p", annotations={SAFE_TO_EVICT: "false"})], False),
        ([pod("p", annotations={DO_NOT_DISRUPT: "true"})], False),
        ([pod("p", annotations={SAFE_TO_EVICT: "true"})], True),
        # gpufleet's own word on preemption wins.
        ([pod("p", annotations={SAFE_TO_EVICT: "false", "gpufleet.dev/preemptible": "true"})],
         True),
        ([deployment("d", 2, pod_template=template(annotations={DO_NOT_DISRUPT: "true"}))],
         False),
        # One protected pod protects its gang.
        ([pod_group("g", 2), pod("a", labels={GROUP: "g"}),
          pod("b", labels={GROUP: "g"}, annotations={SAFE_TO_EVICT: "false"})], False),
        # gpufleet's own guard, read back from a pod it bound, protects nothing.
        ([pod("p", annotations=gang_guard({}))], True),
    ],
    ids=[
        "safe-to-evict", "do-not-disrupt", "safe-to-evict-true", "preemptible-wins",
        "template", "one-pod-of-a-gang", "our-guard",
    ],
)  # fmt: skip
def test_a_protected_workload_is_not_preemptible(
    write_file: WriteFile, objects: list[Obj], preemptible: bool
) -> None:
    workloads = read(write_file, *objects).workloads
    assert [w.workload.preemptible for w in workloads] == [preemptible] * len(workloads)
