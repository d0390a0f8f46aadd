"""Pods with ``spec.schedulingGates`` against the fake API server: never bound while gated
(told ``SchedulingGated``, as kube-scheduler tells them), a gang with one gated pod waits whole,
and each is picked up when its owner's update removes the last gate (issue 28 item 2)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.testing import kube_objects as ko
from tests.backends.kube.harness import Harness, harness

Obj = dict[str, Any]
GROUP = "gpufleet.dev/pod-group"


def gated(pod: Obj, *gates: str) -> Obj:
    pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return pod


def ungate(h: Harness, name: str) -> None:
    pod = h.pod(name)
    pod["spec"].pop("schedulingGates", None)
    h.server.update(pod)


def condition(h: Harness, name: str) -> Obj | None:
    conditions = h.pod(name)["status"].get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def gang(gated_members: int) -> list[Obj]:
    pods = [ko.gpu_pod(f"ddp-{i}", gpus=1, labels={GROUP: "ddp"}) for i in range(2)]
    for pod in pods[:gated_members]:
        gated(pod, "example.com/data")
    return pods


CASES = [
    pytest.param([gated(ko.gpu_pod("one", gpus=1), "example.com/quota")], ["one"], id="lone-pod"),
    pytest.param(gang(1), ["ddp-0"], id="gang-one-gated"),
    pytest.param(gang(2), ["ddp-0", "ddp-1"], id="gang-all-gated"),
]


@pytest.mark.parametrize(("pods", "gated_names"), CASES)
def test_gated_pods_wait_whole_and_run_once_their_gates_are_removed(
    pods: list[Obj], gated_names: list[str]
) -> None:
    with harness(ko.gpu_node("n1", gpus=4)) as h:
        h.server.create(ko.pod_group("ddp", 2))
        for pod in pods:
            h.server.create(pod)
        h.settle()
        assert h.bound() == {}
        names = [p["metadata"]["name"] for p in pods]
        for name in names:
            told = condition(h, name)
            assert told is not None, f"{name} was told nothing"
            assert (told["status"], told["reason"]) == ("False", "SchedulingGated")
        assert not {e["involvedObject"]["name"] for e in h.events("FailedScheduling")}
        for name in gated_names:
            ungate(h, name)
        h.settle()
        assert set(h.bound()) == {f"default/{name}" for name in names}
