"""Idle policies on Kubernetes (the fake API server): Stop posts policy/v1 Evictions of the
workload's pods, retried next round while a PodDisruptionBudget forbids one; ScaleToZero patches
the scale subresource of the Deployment that owns the pods' ReplicaSet; Checkpoint and
Preemptible annotate and label the pods; none of them touches a workload the node autoscalers
are told to leave running."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from gpufleet.io.kube.disruption import gang_guard
from gpufleet.model.idle import (
    CHECKPOINT_REQUESTED_ANNOTATION,
    PREEMPTIBLE_LABEL,
    IdleAction,
    IdlePolicy,
    IdleScope,
    IdleStep,
)
from gpufleet.model.queues import TENANT_LABEL
from gpufleet.service.idle_actions import IdleReclaimer, reclaimer_for
from gpufleet.service.store import StoredEvent
from gpufleet.telemetry.idle import WORKLOAD_UTIL
from gpufleet.telemetry.series_layout import Labels
from gpufleet.testing.service import pod_doc
from tests.service.test_kube_plane import Cluster, cluster  # noqa: F401  (fixture)


class LowUtil:
    """Every pod's ``gpufleet_workload_gpu_util`` is 2% over any window."""

    def __init__(self, pods: Sequence[tuple[str, str]]) -> None:
        self.pods = list(pods)

    def query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None = None,
        quantile: float | None = None,
        *,
        by: Sequence[str] | None = None,
        across: str = "sum",
    ) -> dict[Labels, float]:
        if metric != WORKLOAD_UTIL:
            return {}
        return {(("namespace", ns), ("pod", pod)): 2.0 for ns, pod in self.pods}


def policy(name: str, action: IdleAction, reclaim: str) -> IdlePolicy:
    return IdlePolicy(
        name=name,
        steps=(IdleStep(action),),
        scope=IdleScope(labels=(("reclaim", reclaim),)),
        threshold_pct=10.0,
        window_s=600.0,
        grace_s=0.0,
    )


def pod(name: str, reclaim: str, owner: tuple[str, str] | None = None) -> dict[str, Any]:
    doc = pod_doc(name, 1, namespace="team-a")
    doc["metadata"]["labels"].update({"reclaim": reclaim, TENANT_LABEL: "team-a", "app": name})
    doc["spec"]["schedulerName"] = "gpufleet"
    if owner is not None:
        doc["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u-" + owner[1],
             "controller": True}
        ]  # fmt: skip
    return doc


def apps(kind: str, name: str, owner: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner, "uid": "u-" + owner,
             "controller": True}
        ]  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "nb"}}, "template": {}},
    }


def idle_events(on: Cluster, key: str) -> list[StoredEvent]:
    return [e for e in on.plane.store.events(key) if e.reason.startswith("IdleReclaim")]


def start(on: Cluster, *docs: dict[str, Any]) -> None:
    for doc in docs:
        on.server.create(doc)
    keys = [f"team-a/Pod/{d['metadata']['name']}" for d in docs if d["kind"] == "Pod"]

    def running() -> bool:
        records = on.plane.records
        return all(k in records and records[k].state.value == "Running" for k in keys)

    on.until(running, "the pods running")
    for key in keys:  # the kubelet's part: running and ready (disruption budgets count them)
        obj = on.server.get("v1", "Pod", key.rpartition("/")[2], "team-a")
        assert obj is not None
        obj["status"]["phase"] = "Running"
        obj["status"]["conditions"].append({"type": "Ready", "status": "True"})
        on.server.update(obj)


def reclaimer(on: Cluster, pods: Sequence[str], *policies: IdlePolicy) -> IdleReclaimer:
    observatory = on.plane.observe_with(LowUtil([("team-a", p) for p in pods]))
    observatory.replace_rules([])
    found = reclaimer_for(on.plane, policies)
    assert found is not None
    return found


def test_stop_evicts_and_a_disruption_budget_is_retried_next_round(
    cluster: Cluster,  # noqa: F811
) -> None:
    start(cluster, pod("lone", "stop"), pod("guarded", "stop"))
    cluster.server.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep", "namespace": "team-a"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        }
    )
    reclaimer(cluster, ["lone", "guarded"], policy("stop", IdleAction.STOP, "stop"))
    observatory = cluster.plane.observatory
    assert observatory is not None
    now = time.time() + 60
    observatory.observe(now)
    evictions = sorted(p for _, p in cluster.server.requests if p.endswith("/eviction"))
    assert evictions == [
        "/api/v1/namespaces/team-a/pods/guarded/eviction",
        "/api/v1/namespaces/team-a/pods/lone/eviction",
    ]
    lone = cluster.server.get("v1", "Pod", "lone", "team-a")
    assert lone is None or lone["metadata"].get("deletionTimestamp")
    (stopped,) = idle_events(cluster, "team-a/Pod/lone")
    assert stopped.reason == "IdleReclaimStop"
    assert "mean GPU utilisation 2.0% over 10m00s (threshold 10%)" in stopped.message
    assert stopped.message.endswith("; evicted lone")
    (refused,) = idle_events(cluster, "team-a/Pod/guarded")
    assert "a PodDisruptionBudget forbids it now" in refused.message
    assert refused.message.endswith("tried again next round")
    # Refused again: tried, not told twice. Once the budget allows it, evicted.
    observatory.observe(now + 15)
    assert len(idle_events(cluster, "team-a/Pod/guarded")) == 1
    cluster.server.delete("policy/v1", "PodDisruptionBudget", "keep", "team-a")
    observatory.observe(now + 30)
    refused, evicted = idle_events(cluster, "team-a/Pod/guarded")
    assert evicted.message.endswith("; evicted guarded")
    guarded_evictions = [p for _, p in cluster.server.requests if p.endswith("guarded/eviction")]
    assert len(guarded_evictions) == 3
    observatory.observe(now + 45)
    assert len(idle_events(cluster, "team-a/Pod/guarded")) == 2, "nothing after the last step"


def test_scale_to_zero_patches_the_deployments_scale(cluster: Cluster) -> None:  # noqa: F811
    cluster.server.create(apps("Deployment", "nb"))
    cluster.server.create(apps("ReplicaSet", "nb-5d8f", owner="nb"))
    start(cluster, pod("nb-5d8f-x2x", "scale", owner=("ReplicaSet", "nb-5d8f")))
    reclaimer(cluster, ["nb-5d8f-x2x"], policy("scale", IdleAction.SCALE_TO_ZERO, "scale"))
    observatory = cluster.plane.observatory
    assert observatory is not None
    observatory.observe(time.time() + 60)
    assert ("PATCH", "/apis/apps/v1/namespaces/team-a/deployments/nb/scale") in (
        cluster.server.requests
    )
    deployment = cluster.server.get("apps/v1", "Deployment", "nb", "team-a")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 0
    replica_set = cluster.server.get("apps/v1", "ReplicaSet", "nb-5d8f", "team-a")
    assert replica_set is not None
    assert replica_set["spec"]["replicas"] == 1
    (event,) = idle_events(cluster, "team-a/Pod/nb-5d8f-x2x")
    assert event.reason == "IdleReclaimScaleToZero"
    assert event.message.endswith("; Deployment nb scaled from 1 to 0 replicas")
    assert not [p for _, p in cluster.server.requests if p.endswith("/eviction")]


def test_checkpoint_and_preemptible_mark_the_pods(cluster: Cluster) -> None:  # noqa: F811
    start(cluster, pod("nb", "lower"))
    lower = IdlePolicy(
        name="lower",
        steps=(IdleStep(IdleAction.CHECKPOINT), IdleStep(IdleAction.PREEMPTIBLE, 30.0)),
        scope=IdleScope(labels=(("reclaim", "lower"),)),
        grace_s=0.0,
    )
    reclaimer(cluster, ["nb"], lower)
    observatory = cluster.plane.observatory
    assert observatory is not None
    now = time.time() + 60
    for step in range(4):
        observatory.observe(now + 15 * step)
    written = cluster.server.get("v1", "Pod", "nb", "team-a")
    assert written is not None
    assert CHECKPOINT_REQUESTED_ANNOTATION in written["metadata"]["annotations"]
    assert written["metadata"]["labels"][PREEMPTIBLE_LABEL] == "true"
    events = idle_events(cluster, "team-a/Pod/nb")
    assert [e.reason for e in events] == ["IdleReclaimCheckpoint", "IdleReclaimPreemptible"]
    assert events[1].time - events[0].time == 30.0


def test_a_dry_run_on_kubernetes_writes_nothing(cluster: Cluster) -> None:  # noqa: F811
    start(cluster, pod("lone", "stop"))
    observatory = cluster.plane.observe_with(LowUtil([("team-a", "lone")]))
    observatory.replace_rules([])
    assert reclaimer_for(cluster.plane, [policy("stop", IdleAction.STOP, "stop")], True)
    before = len(cluster.server.requests)
    observatory.observe(time.time() + 60)
    writes = [r for r in cluster.server.requests[before:] if r[0] != "GET"]
    assert writes == []
    (event,) = idle_events(cluster, "team-a/Pod/lone")
    assert (event.type, event.message[:18]) == ("Normal", "dry run: would sto")


@pytest.mark.parametrize(
    ("action", "annotations", "acted"),
    [
        (IdleAction.STOP, {}, True),
        (IdleAction.STOP, {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}, False),
        (IdleAction.STOP, {"karpenter.sh/do-not-disrupt": "true"}, False),
        (IdleAction.SCALE_TO_ZERO, {"karpenter.sh/do-not-disrupt": "true"}, False),
        (IdleAction.PREEMPTIBLE, {"karpenter.sh/do-not-disrupt": "true"}, False),
        # What gpufleet writes on the gangs it binds is not the user's protection.
        (IdleAction.STOP, gang_guard({}), True),
    ],
    ids=["plain", "safe-to-evict", "do-not-disrupt", "scale-to-zero", "preemptible", "our-guard"],
)
def test_a_workload_the_autoscalers_must_leave_running_is_left_running(
    cluster: Cluster,  # noqa: F811
    action: IdleAction,
    annotations: dict[str, str],
    acted: bool,
) -> None:
    doc = pod("nb", "idle")
    doc["metadata"]["annotations"].update(annotations)
    start(cluster, doc)
    reclaimer(cluster, ["nb"], policy("idle", action, "idle"))
    observatory = cluster.plane.observatory
    assert observatory is not None
    before = len(cluster.server.requests)
    observatory.observe(time.time() + 60)
    writes = [r for r in cluster.server.requests[before:] if r[0] != "GET"]
    assert bool(writes) is acted
    (event,) = idle_events(cluster, "team-a/Pod/nb")
    if not acted:
        protecting = next(iter(annotations))
        assert f"pod nb is annotated {protecting}" in event.message
        assert event.message.split("; ")[-1].startswith("not ")
