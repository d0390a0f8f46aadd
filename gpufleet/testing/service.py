"""Builders for tests of the control plane: a plane on a fake wall clock, its app, tokens.

:class:`ServiceHarness` holds an :class:`EmbeddedControlPlane` over a small cluster whose clock
moves only when the test says (:meth:`ServiceHarness.advance`, which also runs a scheduling
turn), the FastAPI app over it, and tokens for an admin and two tenants. Tests drive the loop
themselves, so nothing sleeps and every run is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.model import Node
from gpufleet.model.node import Taint, TaintEffect
from gpufleet.service.embedded_plane import EmbeddedControlPlane
from gpufleet.service.plane_book import PRIORITY_CLASS, QUEUE, ServeOptions, create_token
from gpufleet.service.store import Store
from gpufleet.testing.builders import make_node

GPU_TAINT = Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE)


@dataclass(slots=True)
class FakeWall:
    """A wall clock for the plane that moves only when told."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu_nodes(count: int = 4, gpus: int = 4, model: str = "A100") -> list[Node]:
    return [
        make_node(f"{model.lower()}-{i}", gpus=gpus, model=model, taints=(GPU_TAINT,))
        for i in range(count)
    ]


def queue_doc(
    name: str,
    gpus: float | None = None,
    parent: str | None = None,
    borrowing: float | None = None,
    namespaces: Sequence[str] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parent"] = parent
    if gpus is not None:
        spec["quota"] = {"nvidia.com/gpu": gpus}
    if borrowing is not None:
        spec["borrowingLimit"] = {"nvidia.com/gpu": borrowing}
    if namespaces:
        spec["namespaces"] = list(namespaces)
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def priority_class_doc(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def pod_doc(
    name: str,
    gpus: int = 1,
    queue: str | None = None,
    namespace: str | None = None,
    runtime: str | None = "10m",
    priority_class: str | None = None,
    gpu_milli: int | None = None,
    tolerate: bool = True,
    gates: Sequence[str] = (),
) -> dict[str, Any]:
    labels = {"gpufleet.dev/queue": queue} if queue else {}
    annotations: dict[str, str] = {}
    if runtime:
        annotations["gpufleet.dev/expected-runtime"] = runtime
    if gpu_milli is not None:
        annotations["gpufleet.dev/gpu-milli"] = str(gpu_milli)
    metadata: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
    if namespace:
        metadata["namespace"] = namespace
    container: dict[str, Any] = {
        "name": "main",
        "image": "cuda",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    if gpus and gpu_milli is None:
        container["resources"]["limits"] = {"nvidia.com/gpu": gpus}
    spec: dict[str, Any] = {"containers": [container]}
    if tolerate:
        spec["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    if priority_class:
        spec["priorityClassName"] = priority_class
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def job_doc(
    name: str,
    pods: int,
    gpus: int = 1,
    queue: str | None = None,
    namespace: str | None = None,
    runtime: str = "10m",
    suspend: bool = False,
    gates: Sequence[str] = (),
) -> dict[str, Any]:
    template = pod_doc("x", gpus, queue, runtime=runtime, gates=gates)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            **({"namespace": namespace} if namespace else {}),
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"]["annotations"],
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {"spec": template["spec"]},
            **({"suspend": True} if suspend else {}),
        },
    }


def as_yaml(*documents: dict[str, Any]) -> str:
    return yaml.safe_dump_all(list(documents), sort_keys=False)


def alias_bomb(levels: int = 9) -> bytes:
    """A Pod whose container args are ``9 ** levels`` strings through nested YAML aliases, in
    under a kilobyte (a billion at 9 levels once anything expands it)."""
    lines = ["apiVersion: v1", "kind: Pod", "metadata: {name: bomb}",
             "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]  # fmt: skip
    for level in range(1, levels + 1):
        lines.append(f"x{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]")
    lines.append(f"spec: {{containers: [{{name: c, image: i, args: *a{levels}}}]}}")
    return "\n".join(lines).encode()


@dataclass
class ServiceHarness:
    """See the module docstring."""

    db: Path
    nodes: list[Node]
    options: ServeOptions
    wall: FakeWall = field(default_factory=FakeWall)
    tokens: dict[str, str] = field(default_factory=dict)
    plane: EmbeddedControlPlane = field(init=False)
    app: FastAPI = field(init=False)
    store: Store = field(init=False)

    def __post_init__(self) -> None:
        self.open()

    def open(self) -> None:
        """(Re)open the plane on the database, as a restarted server would."""
        self.store = Store(self.db)
        self.plane = EmbeddedControlPlane(self.store, self.nodes, self.options, wall=self.wall)
        self.app = create_app(self.plane)

    def close(self) -> None:
        self.store.close()

    def restart(self) -> None:
        """Drop the plane without stopping it cleanly (as a kill would) and open it again."""
        self.store.close()
        self.open()

    def client(self, who: str = "admin") -> TestClient:
        client = TestClient(self.app)
        if who in self.tokens:
            client.headers["Authorization"] = f"Bearer {self.tokens[who]}"
        return client

    def advance(self, seconds: float = 0.0) -> None:
        """Move the simulated clock by ``seconds`` and run scheduling turns until idle."""
        self.wall.now += seconds / self.options.speed
        for _ in range(10):
            self.plane.turn()
            if not self.plane.world.events_waiting:
                break


def make_harness(
    tmp_path: Path,
    nodes: Sequence[Node] | None = None,
    queues: Sequence[dict[str, Any]] = (),
    priority_classes: Sequence[dict[str, Any]] = (),
    options: ServeOptions | None = None,
    tenants: Sequence[str] = ("team-a", "team-b"),
) -> ServiceHarness:
    """A plane on ``nodes`` (default: 4 nodes of 4 A100) with ``queues`` (default: one queue
    of 8 GPUs per tenant, under no parent), an admin token and one token per tenant."""
    db = tmp_path / "gpufleet.db"
    store = Store(db)
    for queue in queues or [queue_doc(t, 8) for t in tenants]:
        store.put_object(QUEUE, queue["metadata"]["name"], queue)
    for pc in priority_classes:
        store.put_object(PRIORITY_CLASS, pc["metadata"]["name"], pc)
    tokens = {"admin": create_token(store, "admin", "admin")}
    tokens["metrics"] = create_token(store, "prometheus", "metrics")  # /metrics only
    for tenant in tenants:
        tokens[tenant] = create_token(store, tenant, "tenant")
    store.close()
    harness = ServiceHarness(db, list(nodes or gpu_nodes()), options or ServeOptions(speed=60.0))
    harness.tokens = tokens
    return harness
