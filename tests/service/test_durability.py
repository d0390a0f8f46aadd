"""kill -9 the server during a burst of submissions: nothing accepted is lost, running pods come
back on the same devices, and no device is ever handed out twice.

Runs the real ``gpufleet serve`` as a subprocess on loopback (a free port, a temporary
database), so the crash is a real SIGKILL of a real process.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.service.plane_book import QUEUE, create_token
from gpufleet.service.store import Store
from gpufleet.testing.server_process import wait_until_ready
from gpufleet.testing.service import as_yaml, pod_doc, queue_doc
from gpufleet.testing.waiting import wait_until

CLUSTER = """\
apiVersion: gpufleet.dev/v1alpha1
kind: ClusterSpec
metadata: {name: durability}
spec:
  pools:
    - name: a100
      count: 6
      cpu: "64"
      memory: 512Gi
      gpu: {model: A100, count: 8, memory: 40Gi}
"""
GPUS = 48


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.db = tmp_path / "gpufleet.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (tmp_path / "cluster.yaml").write_text(CLUSTER)
        store = Store(self.db)
        store.put_object(QUEUE, "team", queue_doc("team", GPUS, namespaces=["default"]))
        self.token = create_token(store, "admin", "admin")
        store.set_meta("seeded", "1")
        store.close()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            str(Path(sys.executable).parent / "gpufleet"), "serve",
            "--db", str(self.db), "--port", str(self.port),
            "--cluster", str(self.tmp / "cluster.yaml"), "--speed", "1",
            "--log-level", "warning",
        ]  # fmt: skip
        log = (self.tmp / "server.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=log)
        wait_until_ready(self.url, self.process, self.tmp / "server.log")

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=10
        )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    found = Server(tmp_path)
    yield found
    found.stop()


def placements(client: httpx.Client) -> dict[str, tuple[str, tuple[int, ...], float | None]]:
    """Pod name -> (node, GPU indices, share) of every running pod."""
    out = {}
    for summary in client.get("/api/v1/workloads").json():
        path = f"/api/v1/workloads/{summary['namespace']}/{summary['name']}"
        detail = client.get(path, params={"kind": summary["kind"]}).json()
        for pod in detail["pod_views"]:
            if pod["state"] == "Running":
                out[pod["name"]] = (pod["node"], tuple(pod["gpu_indices"]), pod["gpu_share"])
    return out


def assert_no_device_twice(found: dict[str, tuple[str, tuple[int, ...], float | None]]) -> None:
    used: dict[tuple[str, int], float] = {}
    for node, indices, share in found.values():
        for index in indices:
            used[(node, index)] = used.get((node, index), 0.0) + (share or 1.0)
    over = {device: amount for device, amount in used.items() if amount > 1.0 + 1e-9}
    assert not over, f"devices handed out more than once: {over}"


@pytest.mark.slow  # two starts of a real server process
def test_kill_during_burst_loses_nothing_and_places_nothing_twice(server: Server) -> None:
    server.start()
    accepted: list[str] = []
    stop, enough = threading.Event(), threading.Event()

    def burst() -> None:
        with server.client() as client:
            for i in range(400):
                if stop.is_set():
                    return
                share = 500 if i % 3 == 0 else None
                body = as_yaml(pod_doc(f"p{i}", 1, "team", "default", "10h", gpu_milli=share))
                try:
                    response = client.post(
                        "/api/v1/workloads",
                        content=body,
                        headers={"Content-Type": "application/yaml"},
                    )
                except httpx.HTTPError:
                    return  # the server is gone
                if response.status_code == 201:
                    accepted.append(f"default/Pod/p{i}")
                    if len(accepted) == 30:
                        enough.set()

    submitter = threading.Thread(target=burst)
    submitter.start()
    assert enough.wait(30), "30 submissions not accepted"
    with server.client() as client:
        before = placements(client)
    assert before, "nothing ran before the kill"
    server.kill()
    stop.set()
    submitter.join(10)
    assert len(accepted) >= 30

    server.start()
    with server.client() as client:
        keys = {w["key"] for w in client.get("/api/v1/workloads").json()}
        assert set(accepted) <= keys, f"lost: {sorted(set(accepted) - keys)}"
        after = placements(client)
        for pod, where in before.items():
            assert after.get(pod) == where, f"{pod} moved from {where} to {after.get(pod)}"
        assert_no_device_twice(after)
        # What waited is placed after the restart, or waits for a reason the scheduler gave
        # (the cluster is full): asked of the server process until it holds.
        wait_until(
            lambda: all(
                w["state"] == "Running" or w["waiting_for"] in ("capacity", "quota")
                for w in client.get("/api/v1/workloads").json()
            ),
            "every waiting workload placed or explained",
            timeout_s=30,
            every_s=0.1,
        )
        final = placements(client)
        assert_no_device_twice(final)
        nodes: list[dict[str, Any]] = client.get("/api/v1/nodes").json()
        assert all(d["allocated"] <= 1.0 for n in nodes for d in n["devices"])
        assert {f"default/Pod/{p}" for p in final} >= set(accepted) & {  # lone pods
            w["key"] for w in client.get("/api/v1/workloads?state=running").json()
        }
