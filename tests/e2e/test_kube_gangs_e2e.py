"""End to end against a real API server (GPUFLEET_E2E_KUBECONFIG), issue 27 item 3: a gang
that waits (its nodes cordoned) loses a pod and its operator makes a replacement; the
survivors are told the gang lacks a pod, nothing starts short of minMember, and once the
nodes take pods again the survivors and the replacement bind together: never the replacement
alone with the survivors stranded."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpufleet.testing import kube_objects as ko
from tests.e2e.kube_cluster import KUBECONFIG_ENV, Cluster, Obj, stop, wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]

GROUP = "gpufleet.dev/pod-group"
#: How soon the scheduler must react to a pod deleted or made (it reacts within a turn).
PROMPTLY_S = 5.0


def _cordon(cluster: Cluster, cordon: bool) -> None:
    for node in cluster.nodes:
        cluster.core.patch_node(node, {"spec": {"unschedulable": cordon}})


def _scheduled_condition(cluster: Cluster, name: str) -> Obj | None:
    conditions = cluster.pod(name)["status"].get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def _told(cluster: Cluster, name: str, part: str = "") -> bool:
    condition = _scheduled_condition(cluster, name)
    return condition is not None and part in str(condition.get("message", ""))


def _bound(cluster: Cluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods() if p["spec"].get("nodeName")}


def _scheduled_at(cluster: Cluster) -> dict[str, datetime]:
    """When each pod's ``Scheduled`` Event says it was bound (to the second)."""
    return {
        e["involvedObject"]["name"]: datetime.fromisoformat(e["firstTimestamp"])
        for e in cluster.events("Scheduled")
    }


def _member(name: str) -> Obj:
    return ko.gpu_pod(name, gpus=2, labels={GROUP: "ddp"})


@pytest.mark.parametrize("replacement", ["ddp-4", "ddp-1"], ids=["new-name", "same-name"])
def test_a_waiting_gang_that_loses_a_pod_binds_whole_with_its_replacement(
    cluster: Cluster, tmp_path: Path, replacement: str
) -> None:
    for i in range(2):
        cluster.add_gpu_node(f"gang-{i}", gpus=4)
    _cordon(cluster, True)
    cluster.custom.create_namespaced_custom_object(
        "gpufleet.dev", "v1alpha1", cluster.namespace, "podgroups",
        {**ko.pod_group("ddp", 4), "metadata": {"name": "ddp"}},
    )  # fmt: skip
    scheduler = cluster.start_scheduler(tmp_path / "scheduler.log")
    try:
        for i in range(4):
            cluster.submit(_member(f"ddp-{i}"))
        wait_for(
            lambda: all(_told(cluster, f"ddp-{i}") for i in range(4)),
            what="the waiting gang told why",
        )
        cluster.kubelet_removes("ddp-1")
        survivors = ["ddp-0", "ddp-2", "ddp-3"]
        # Promptly: a new core (another run's Queue change on a shared API server makes one)
        # takes every waiting pod in again, which would hide a gang stranded meanwhile.
        wait_for(
            lambda: all(_told(cluster, n, "3/4 pods exist") for n in survivors),
            timeout=PROMPTLY_S,
            what="the survivors told the gang lacks a pod",
        )
        wait_for(lambda: "ddp-1" not in {p["metadata"]["name"] for p in cluster.pods()})
        cluster.submit(_member(replacement))
        wait_for(
            lambda: all(not _told(cluster, n, "pods exist") for n in survivors),
            timeout=PROMPTLY_S,
            what="the gang, whole again, told why it waits",
        )
        assert _bound(cluster) == set(), "nothing binds while the nodes are cordoned"
        _cordon(cluster, False)
        gang = {*survivors, replacement}
        wait_for(lambda: _bound(cluster) == gang, timeout=30, what="the gang bound whole")
        # Bound together, in one turn: not the replacement first and the survivors only when
        # something else (a new core, as another run's Queue change makes) took them in again.
        wait_for(lambda: _scheduled_at(cluster).keys() >= gang, what="Scheduled events")
        times = [_scheduled_at(cluster)[name] for name in gang]
        assert max(times) - min(times) <= timedelta(seconds=1), times
        assert scheduler.poll() is None, (tmp_path / "scheduler.log").read_text()[-3000:]
    finally:
        stop(scheduler)
