"""The fault suite's invariant monitor: what must hold on a real API server whatever fails.

Every 2 s in a thread, and once more at the end, from the run's pods and nodes (and from the API
server's audit log where GPUFLEET_E2E_AUDIT_LOG names it):

* no node's GPUs over-allocated: a pod seen bound for the first time leaves its node within
  the GPUs it advertises (a node that shrinks under pods already there is not a scheduler's
  doing, so only new bindings are judged);
* no GPU given beyond itself: per node and device index, the running pods' shares
  (``gpufleet.dev/gpu-milli-per-device``, a whole GPU otherwise) add up to at most 1000;
* no pod bound twice: two Binding creates answered 2xx for one pod in the audit log;
* no gang partly bound for longer than ``gang_timeout_s``;
* no ``Overcommitted`` Event (the scheduler saw a pod bound beyond its node);
* at the end (:meth:`InvariantMonitor.settle`), every pod of the run bound or told why
  (``PodScheduled=False``).

API calls that fail while a fault is in effect are skipped: the next sample judges again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION, GPU_SHARE_ANNOTATION
from tests.e2e.kube_cluster import Cluster

Obj = dict[str, Any]
AUDIT_LOG_ENV = "GPUFLEET_E2E_AUDIT_LOG"
GANG_LABEL = "gpufleet.dev/pod-group"
FULL_GPU_MILLI = 1000
SAMPLE_PERIOD_S = 2.0


def _gpus_of(pod: Obj) -> int:
    total = 0
    for container in pod["spec"]["containers"]:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get("nvidia.com/gpu", 0))
    return total


def _annotations(pod: Obj) -> dict[str, str]:
    found: dict[str, str] = pod["metadata"].get("annotations") or {}
    return found


def _holds_gpus(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def _told_why(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)


class AuditBindings:
    """Binding creates answered 2xx per pod of one namespace, read incrementally from the API
    server's audit log (from where it ended when this was made; a rotated file is read anew)."""

    def __init__(self, path: Path, namespace: str) -> None:
        self.path = path
        self.namespace = namespace
        self.offset = path.stat().st_size if path.exists() else 0
        self.inode = path.stat().st_ino if path.exists() else 0
        self.bindings: Counter[str] = Counter()
        self.evictions: Counter[str] = Counter()
        self._partial = b""

    def read(self) -> None:
        if not self.path.exists():
            return
        stat = self.path.stat()
        if stat.st_ino != self.inode or stat.st_size < self.offset:  # rotated
            self.offset, self.inode, self._partial = 0, stat.st_ino, b""
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        self.offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        marker = f'"namespace":"{self.namespace}"'.encode()
        for line in lines:
            if marker not in line or b'"verb":"create"' not in line:
                continue
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            code = int((event.get("responseStatus") or {}).get("code", 0))
            if event.get("stage") != "ResponseComplete" or not 200 <= code < 300:
                continue
            if ref.get("subresource") == "binding":
                self.bindings[ref["name"]] += 1
            elif ref.get("subresource") == "eviction":
                self.evictions[ref["name"]] += 1


class InvariantMonitor:
    """Samples the invariants every 2 s in a thread; :meth:`settle` waits for the burst to be
    bound or told why and checks once more; the violations found are in ``violations``."""

    def __init__(self, cluster: Cluster, gang_timeout_s: float = 60.0) -> None:
        self.cluster = cluster
        self.gang_timeout_s = gang_timeout_s
        self.violations: list[str] = []
        self.samples = 0
        self.bind_times: dict[str, float] = {}
        self._seen_bound: set[str] = set()
        self._partly_since: dict[str, float] = {}
        audit = os.environ.get(AUDIT_LOG_ENV)
        self.audit = AuditBindings(Path(audit), cluster.namespace) if audit else None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="invariants", daemon=True)

    def __enter__(self) -> InvariantMonitor:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_PERIOD_S):
            self.check()

    def _violate(self, text: str) -> None:
        if text not in self.violations:
            self.violations.append(text)

    # ------------------------------------------------------------------------------ sampling
    def check(self) -> bool:
        """One sample; False when the API server did not answer (nothing judged)."""
        with self._lock:
            try:
                # Pods before nodes: a node read after its pods is at least as new as the
                # binds it is judged by (read the other way, a pod bound a moment after the
                # node was read, to a node re-created or grown meanwhile, reads as bound
                # beyond what the node had then).
                pods = self.cluster.pods()
                on_nodes = {n: self._pods_on(n) for n in self.cluster.nodes}
                nodes = {n: self._node(n) for n in self.cluster.nodes}
                overcommitted = self.cluster.events("Overcommitted")
            except Exception:
                return False
            self.samples += 1
            now = time.monotonic()
            for pod in pods:
                if pod["spec"].get("nodeName") and pod["metadata"]["name"] not in self.bind_times:
                    self.bind_times[pod["metadata"]["name"]] = now
            self._check_nodes(nodes, on_nodes)
            self._check_gangs(pods, now)
            for event in overcommitted:
                self._violate(f"Overcommitted: {event['involvedObject']['name']}")
            if self.audit is not None:
                self.audit.read()
                for name, count in self.audit.bindings.items():
                    if count > 1:
                        self._violate(f"pod {name} bound {count} times (audit log)")
            return True

    def _node(self, name: str) -> Obj | None:
        try:
            response = self.cluster.core.read_node(name, _preload_content=False)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        found: Obj = json.loads(response.data)
        return found

    def _pods_on(self, node: str) -> list[Obj]:
        response = self.cluster.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False
        )
        return [p for p in json.loads(response.data)["items"] if _holds_gpus(p)]

    def _check_nodes(self, nodes: dict[str, Obj | None], on_nodes: dict[str, list[Obj]]) -> None:
        for name, pods in on_nodes.items():
            node = nodes[name]
            keys = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods}
            new = keys - self._seen_bound
            self._seen_bound |= keys
            if node is not None and new:
                allocatable = int(node["status"].get("allocatable", {}).get("nvidia.com/gpu", 0))
                used = sum(_gpus_of(p) for p in pods)
                if used > allocatable:
                    self._violate(
                        f"node {name}: {used} GPUs bound of {allocatable} after {sorted(new)}"
                    )
            milli: Counter[str] = Counter()
            for pod in pods:
                annotations = _annotations(pod)
                share = int(annotations.get(GPU_SHARE_ANNOTATION, FULL_GPU_MILLI))
                for index in filter(None, annotations.get(GPU_INDEX_ANNOTATION, "").split(",")):
                    milli[index] += share
            for index, total in milli.items():
                if total > FULL_GPU_MILLI:
                    self._violate(f"node {name} GPU {index}: {total}/1000 given")

    def _check_gangs(self, pods: list[Obj], now: float) -> None:
        members: dict[str, list[Obj]] = {}
        for pod in pods:
            gang = (pod["metadata"].get("labels") or {}).get(GANG_LABEL)
            if gang and not pod["metadata"].get("deletionTimestamp"):
                members.setdefault(gang, []).append(pod)
        for gang, group in members.items():
            bound = sum(1 for p in group if p["spec"].get("nodeName"))
            if 0 < bound < len(group):
                since = self._partly_since.setdefault(gang, now)
                if now - since > self.gang_timeout_s:
                    self._violate(
                        f"gang {gang}: {bound}/{len(group)} bound for over {self.gang_timeout_s} s"
                    )
            else:
                self._partly_since.pop(gang, None)

    # ------------------------------------------------------------------------------ the end
    def settle(self, timeout: float = 120.0) -> list[str]:
        """Wait until every pod of the run is bound or told why (PodScheduled=False), then
        sample once more; the violations found, that one included if it never happened."""
        deadline = time.monotonic() + timeout
        waiting: list[str] = []
        while time.monotonic() < deadline:
            try:
                pods = self.cluster.pods()
            except Exception:
                time.sleep(1)
                continue
            waiting = [
                p["metadata"]["name"]
                for p in pods
                if not p["spec"].get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
                and not _told_why(p)
            ]
            if not waiting:
                break
            time.sleep(1)
        if waiting:
            self._violate(f"pending and not told why after {timeout:.0f} s: {sorted(waiting)}")
        for _ in range(10):
            if self.check():
                break
            time.sleep(1)
        return list(self.violations)
