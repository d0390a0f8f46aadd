"""A scenario's SpotInterruption and NodeFailure objects (their defaults and the published rates
behind them, bad fields named with their file and object, the check against the cluster), a
GpuFault's crashPods, the checkpoint-on-notice annotation and a Job's podFailurePolicy."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.faults import gpu_fault_from_object
from gpufleet.io.fleet.node_faults import check_node_faults, node_fault_from_object, selected
from gpufleet.io.readers import read_scenario
from gpufleet.model.capacity import CAPACITY_TYPE_LABEL
from gpufleet.model.jobs import PodFailureAction, PodFailureRule
from gpufleet.model.node_faults import (
    LLAMA3_FAILURES_PER_NODE_HOUR,
    NodeFault,
    NodeFaultKind,
    NodeSelection,
    band_rate,
)
from gpufleet.testing.builders import make_node
from gpufleet.testing.job_objects import batch_job
from tests.io.conftest import WriteFile

WHERE = "faults.yaml:document 1 (line 1)"


def fault_object(kind: str = "SpotInterruption", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "f"},
        "spec": spec,
    }


def read(kind: str = "SpotInterruption", **spec: Any) -> NodeFault:
    return node_fault_from_object(fault_object(kind, **spec), "faults.yaml", "document 1 (line 1)")


def test_the_defaults_are_aws_notice_and_top_band_and_llama3_failures() -> None:
    spot = read()
    assert spot.selection == NodeSelection(capacity_type="spot")
    assert (spot.notice, spot.back_after, spot.times) == (120.0, 300.0, ())
    # AWS's >20% band: a 20% chance a month (730 h) of a reclaim, as a Poisson rate.
    assert spot.rate_per_node_hour == pytest.approx(-math.log(0.8) / 730)
    assert spot.rate_per_node_hour == pytest.approx(3.06e-4, rel=2e-3)
    failure = read("NodeFailure")
    assert failure.selection == NodeSelection()  # every node
    assert (failure.notice, failure.back_after) == (0.0, None)
    assert failure.rate_per_node_hour == LLAMA3_FAILURES_PER_NODE_HOUR
    assert pytest.approx(1.58e-4, rel=1e-2) == LLAMA3_FAILURES_PER_NODE_HOUR


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"at": "1h"}, ((3600.0,), None)),
        ({"at": ["2h", 60, "1h", 60]}, ((60.0, 3600.0, 7200.0), None)),
        ({"ratePerNodeHour": 0.5}, ((), 0.5)),
        ({"frequency": "5-10%"}, ((), band_rate("5-10%"))),
    ],
    ids=["one-time", "times-sorted-once-each", "rate", "aws-band"],
)
def test_when_a_fault_strikes(spec: dict[str, Any], expected: tuple[Any, Any]) -> None:
    fault = read(**spec)
    assert (fault.times, fault.rate_per_node_hour) == expected


@pytest.mark.parametrize(
    ("kind", "spec", "expected"),
    [
        ("SpotInterruption", {"nodes": ["a", "b"]}, NodeSelection(names=("a", "b"))),
        ("SpotInterruption", {"nodes": "a"}, NodeSelection(names=("a",))),
        ("SpotInterruption", {"nodeSelector": {"pool": "x"}},
         NodeSelection(labels={"pool": "x"}, capacity_type="spot")),
        ("SpotInterruption", {"capacityType": "any"}, NodeSelection()),
        ("NodeFailure", {"capacityType": "on-demand"}, NodeSelection(capacity_type="on-demand")),
    ],
    ids=["names", "one-name", "labels-narrow-spot", "any-capacity", "failure-on-demand"],
)  # fmt: skip
def test_which_nodes_a_fault_strikes(kind: str, spec: dict[str, Any], expected: Any) -> None:
    assert read(kind, **spec).selection == expected


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        ("SpotInterruption", {"recoverAfter": "5m"},
         "spec.recoverAfter: unknown field; a spot node is replaced: it is replaceAfter"),
        ("NodeFailure", {"notice": "2m"},
         "spec.notice: unknown field; a node failure gives no notice"),
        ("NodeFailure", {"replaceAfter": "2m"},
         "spec.replaceAfter: unknown field; a failed node recovers: it is recoverAfter"),
        ("SpotInterruption", {"nodez": ["a"]}, "spec.nodez: unknown field; did you mean 'nodes'?"),
        ("SpotInterruption", {"at": "1h", "ratePerNodeHour": 1},
         "spec.ratePerNodeHour: give one of at, ratePerNodeHour or frequency, not at too"),
        ("SpotInterruption", {"nodes": ["a"], "nodeSelector": {"x": "y"}},
         "spec.nodeSelector: give nodes by name or by nodeSelector/capacityType, not both"),
        ("SpotInterruption", {"nodes": []}, "spec.nodes: expected at least one node name"),
        ("SpotInterruption", {"at": []}, "spec.at: expected at least one time"),
        ("SpotInterruption", {"at": ["soon"]}, "spec.at[0]: expected seconds or a duration"),
        ("SpotInterruption", {"ratePerNodeHour": 0},
         "spec.ratePerNodeHour: expected a number above 0"),
        ("SpotInterruption", {"ratePerNodeHour": "1"}, "spec.ratePerNodeHour: expected a number"),
        ("SpotInterruption", {"frequency": "30%"},
         "spec.frequency: unknown interruption frequency"),
        ("SpotInterruption", {"notice": "-1m"}, "spec.notice: expected seconds or a duration"),
        ("SpotInterruption", {"replaceAfter": 0},
         "spec.replaceAfter: expected more than 0 s or 'never'"),
        ("SpotInterruption", {"capacityType": "cheap"}, "spec.capacityType: expected one of spot"),
        ("SpotInterruption", {"nodeSelector": {"bad key!": "x"}}, "spec.nodeSelector[bad key!]"),
    ],
    ids=[
        "spot-recovers", "failure-notice", "failure-replaced", "typo", "two-timings",
        "names-and-selector", "no-names", "no-times", "bad-time", "zero-rate", "text-rate",
        "unknown-band", "negative-notice", "zero-replacement", "bad-capacity", "bad-label",
    ],
)  # fmt: skip
def test_bad_node_faults_name_the_file_object_and_field(
    kind: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError) as raised:
        read(kind, **spec)
    text = str(raised.value)
    assert f"{WHERE}, {kind} f" in text
    assert message in text


def test_never_means_not_back() -> None:
    assert read(replaceAfter="never").back_after is None
    assert read("NodeFailure", recoverAfter="30m").back_after == 1800.0


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (read(nodes=["n9"]), "spec.nodes: no node 'n9' in the cluster"),
        (read(), "spec.capacityType: spot nodes: none in the cluster (spot nodes carry a label"),
        (read(nodeSelector={"pool": "z"}, capacityType="any"),
         "spec.nodeSelector: nodes labelled pool=z: none in the cluster"),
    ],
    ids=["unknown-node", "no-spot-node", "selector-matches-nothing"],
)  # fmt: skip
def test_a_fault_must_strike_nodes_of_the_cluster(fault: NodeFault, message: str) -> None:
    with pytest.raises(InputError) as raised:
        check_node_faults([fault], [make_node("n1")])
    assert str(raised.value).startswith(f"{WHERE}, SpotInterruption f: {message}")


def test_spot_nodes_are_found_by_any_capacity_label() -> None:
    nodes = [
        make_node("a", labels={CAPACITY_TYPE_LABEL: "spot"}),
        make_node("b", labels={"karpenter.sh/capacity-type": "spot"}),
        make_node("c", labels={"cloud.google.com/gke-spot": "true"}),
        make_node("d"),
    ]
    check_node_faults([read()], nodes)  # no error
    assert [n.name for n in selected(read(), nodes)] == ["a", "b", "c"]


def test_a_scenario_reads_node_faults_and_refuses_a_name_twice(write_file: WriteFile) -> None:
    body = """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: SpotInterruption
        metadata: {name: reclaim}
        spec: {at: 1h}
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: NodeFailure
        metadata: {name: reclaim}
        spec: {at: 2h, nodes: [n1]}
        """
    scenario = read_scenario(write_file("scenario.yaml", body))
    assert [(f.kind, f.times) for f in scenario.node_faults] == [
        (NodeFaultKind.SPOT_INTERRUPTION, (3600.0,)),
        (NodeFaultKind.NODE_FAILURE, (7200.0,)),
    ]
    twice = (
        body
        + """
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: SpotInterruption
        metadata: {name: reclaim}
        spec: {at: 3h}
        """
    )
    with pytest.raises(InputError, match="SpotInterruption reclaim appears twice"):
        read_scenario(write_file("twice.yaml", twice))


# ----------------------------------------------------------------------------- GpuFault
@pytest.mark.parametrize(
    ("xid", "crash", "crashes"),
    [(79, None, True), (48, None, True), (63, None, False), (92, None, False), (63, True, True),
     (79, False, False)],
    ids=["79", "48", "63-runs-on", "92-runs-on", "told-to-crash", "told-not-to"],
)  # fmt: skip
def test_a_gpu_fault_crashes_pods_unless_its_xid_leaves_them_running(
    xid: int, crash: bool | None, crashes: bool
) -> None:
    spec: dict[str, Any] = {"at": 0, "node": "n1", "gpu": 0, "xid": xid}
    if crash is not None:
        spec["crashPods"] = crash
    obj = fault_object("GpuFault", **spec)
    assert gpu_fault_from_object(obj, "f.yaml").crashes_pods is crashes


def test_crash_pods_is_true_or_false() -> None:
    obj = fault_object("GpuFault", at=0, node="n1", gpu=0, xid=79, crashPods="yes")
    with pytest.raises(InputError, match=r"GpuFault f: spec\.crashPods: expected true or false"):
        gpu_fault_from_object(obj, "f.yaml")


# ------------------------------------------------------------------ workloads and Jobs
def pod_yaml(name: str, note: str) -> str:
    return f"""
        apiVersion: v1
        kind: Pod
        metadata:
          name: {name}
          labels: {{gpufleet.dev/pod-group: g}}
          annotations: {{gpufleet.dev/checkpoint-on-notice: "{note}"}}
        spec:
          containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]
        """


def test_checkpoint_on_notice_is_read_and_a_gang_agrees_on_it(write_file: WriteFile) -> None:
    both = pod_yaml("a", "true") + "---" + pod_yaml("b", "true")
    (timed,) = read_scenario(write_file("ok.yaml", both)).workloads
    assert timed.workload.checkpoint_on_notice is True
    with pytest.raises(InputError, match='expected "true" or "false", got \'maybe\''):
        read_scenario(write_file("bad.yaml", pod_yaml("a", "maybe")))
    split = pod_yaml("a", "true") + "---" + pod_yaml("b", "false")
    with pytest.raises(InputError, match=r"must agree on gpufleet\.dev/checkpoint-on-notice"):
        read_scenario(write_file("split.yaml", split))


def job_with(policy: Any, restart: str = "Never", **spec: Any) -> dict[str, Any]:
    return batch_job("j", restart_policy=restart, podFailurePolicy=policy, **spec)


def test_a_pod_failure_policy_is_read_rule_by_rule(write_file: WriteFile) -> None:
    policy = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In",
                                                  "values": [1, 42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0, 137]}},
        ]
    }  # fmt: skip
    path = write_file("job.yaml", yaml.safe_dump(job_with(policy)))
    (timed,) = read_scenario(path).workloads
    (spec,) = timed.jobs
    assert spec.pod_failure_policy == (
        PodFailureRule(PodFailureAction.FAIL_JOB, (1, 42), True),
        PodFailureRule(PodFailureAction.IGNORE, conditions=(("DisruptionTarget", "True"),)),
        PodFailureRule(PodFailureAction.COUNT, (0, 137), False),
    )
    disrupted = frozenset({"DisruptionTarget"})
    assert spec.failure_rule(42, frozenset()) == (0, spec.pod_failure_policy[0])
    assert spec.failure_rule(None, disrupted) == (1, spec.pod_failure_policy[1])
    assert spec.failure_rule(3, frozenset()) == (2, spec.pod_failure_policy[2])
    assert spec.failure_rule(137, frozenset()) is None


@pytest.mark.parametrize(
    ("policy", "restart", "extra", "message"),
    [
        ({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
         "OnFailure", {}, "spec.podFailurePolicy: requires restartPolicy Never"),
        ({"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}]},
         "Never", {},
         "spec.podFailurePolicy.rules[0].action: FailIndex requires backoffLimitPerIndex"),
        ({"rules": [{"action": "Retry", "onExitCodes": {"operator": "In", "values": [1]}}]},
         "Never", {}, "spec.podFailurePolicy.rules[0].action: expected 'FailJob'"),
        ({"rules": [{"action": "Ignore"}]}, "Never", {},
         "spec.podFailurePolicy.rules[0]: give one of onExitCodes or onPodConditions: neither"),
        ({"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [0, 1]}}]},
         "Never", {}, "values: the In operator may not list exit code 0"),
        ({"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [3, 2]}}]},
         "Never", {}, "values[1]: expected exit codes in increasing order"),
        ({"rules": [{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget",
                                                             "status": "Maybe"}]}]},
         "Never", {}, "onPodConditions[0].status: expected 'True', 'False' or 'Unknown'"),
        ({"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}}] * 21},
         "Never", {}, "spec.podFailurePolicy.rules: expected at most 20 rules, got 21"),
        ({"rulez": []}, "Never", {}, "spec.podFailurePolicy.rulez: unknown field"),
    ],
    ids=["needs-never", "failindex-needs-per-index", "unknown-action", "no-requirement",
         "in-zero", "unordered", "bad-status", "too-many", "typo"],
)  # fmt: skip
def test_bad_pod_failure_policies_name_the_field(
    write_file: WriteFile, policy: Any, restart: str, extra: dict[str, Any], message: str
) -> None:
    path = write_file("job.yaml", yaml.safe_dump(job_with(policy, restart, **extra)))
    with pytest.raises(InputError) as raised:
        read_scenario(path)
    text = str(raised.value)
    assert "Job default/j" in text
    assert message in text
