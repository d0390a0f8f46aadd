"""A leader paused past its lease, against a real API server (GPUFLEET_E2E_KUBECONFIG): two
``gpufleet scheduler`` replicas with leader election; the leader is stopped with SIGSTOP in the
middle of a burst (a long GC pause, a frozen VM) for longer than its 15 s lease, the standby takes
over and binds, then the old leader resumes. It must send nothing it had queued: no node ends
over its GPUs, no device is given to two pods, and the resumed replica stands by."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import urllib3

from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION
from gpufleet.testing import kube_objects as ko
from tests.e2e.kube_cluster import KUBECONFIG_ENV, Cluster, stop, wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]

NODES, GPUS = 4, 8
LEASE_S = 15  # the scheduler's default lease duration


def _holder(cluster: Cluster) -> str:
    coordination = kubernetes.client.CoordinationV1Api(cluster.client)
    try:
        lease = coordination.read_namespaced_lease("gpufleet-scheduler", cluster.namespace)
    except (kubernetes.client.rest.ApiException, urllib3.exceptions.HTTPError):
        return ""  # none yet, or the API server is away a moment
    return str(lease.spec.holder_identity or "")


def _bound(cluster: Cluster) -> list[dict[str, Any]]:
    return [p for p in cluster.pods() if p["spec"].get("nodeName")]


def _gpus_of(pod: dict[str, Any]) -> int:
    container = pod["spec"]["containers"][0]
    limits = (container.get("resources") or {}).get("limits") or {}
    return int(limits.get("nvidia.com/gpu", 0))


def test_a_leader_paused_past_its_lease_binds_nothing_when_it_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    for i in range(NODES):
        cluster.add_gpu_node(f"pause-{cluster.run_id}-{i}", gpus=GPUS)
    replicas = {
        name: cluster.start_scheduler(tmp_path / f"{name}.log", identity=f"{name}-{cluster.run_id}")
        for name in ("a", "b")
    }
    try:
        wait_for(lambda: bool(_holder(cluster)), timeout=60, what="a leader")
        leader_identity = _holder(cluster)
        leader = next(p for n, p in replicas.items() if leader_identity.startswith(f"{n}-"))
        # A burst of more single-GPU pods than the cluster holds: the leader's binder queue
        # is busy when it stops.
        for i in range(NODES * GPUS + 16):
            cluster.submit(ko.gpu_pod(f"burst-{i}", gpus=1))
            if i == NODES * GPUS // 2:
                wait_for(lambda: bool(_bound(cluster)), timeout=60, what="binding under way")
                leader.send_signal(signal.SIGSTOP)
        paused_at = time.monotonic()
        bound_at_pause = len(_bound(cluster))
        wait_for(
            lambda: _holder(cluster) not in ("", leader_identity),
            timeout=LEASE_S * 3,
            what="the standby taking the lease",
        )
        wait_for(
            lambda: len(_bound(cluster)) > bound_at_pause, timeout=90, what="the standby binding"
        )
        time.sleep(max(0.0, LEASE_S + 10 - (time.monotonic() - paused_at)))
        leader.send_signal(signal.SIGCONT)
        time.sleep(8)  # the resumed replica's queue, had it been sent, lands by now
        # Every pod on the run's nodes (other runs' schedulers may bind there too).
        everyone = [
            cluster.client.sanitize_for_serialization(p)
            for p in cluster.core.list_pod_for_all_namespaces().items
        ]
        ours = {f"pause-{cluster.run_id}-{i}" for i in range(NODES)}
        bound = [p for p in everyone if p["spec"].get("nodeName") in ours]
        used = Counter(str(p["spec"]["nodeName"]) for p in bound for _ in range(_gpus_of(p)))
        assert all(n <= GPUS for n in used.values()), f"a node over its GPUs: {used}"
        devices: Counter[tuple[str, str]] = Counter()
        for pod in bound:
            annotations = pod["metadata"].get("annotations") or {}
            for index in filter(None, annotations.get(GPU_INDEX_ANNOTATION, "").split(",")):
                devices[(str(pod["spec"]["nodeName"]), index)] += 1
        assert all(n == 1 for n in devices.values()), f"a device given twice: {devices}"
        assert not cluster.events("Overcommitted")
        assert leader.poll() is None, "the resumed replica is still running (standing by)"
        assert _holder(cluster) != leader_identity
    finally:
        for process in replicas.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
            stop(process)
        for name in replicas:
            print(name, (tmp_path / f"{name}.log").read_text()[-3000:])
