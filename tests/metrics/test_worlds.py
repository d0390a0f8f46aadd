"""Every world serves the same metrics: a simulation's report, ``gpufleet serve`` (embedded and
on Kubernetes) and ``gpufleet scheduler`` expose the families of gpufleet/metrics/families.py
under the same names, and in the same small scenario their values are the core's state.

The scenario: one node of 4 H100; queues team-a and team-b of 2 GPUs each; a1 (team-a, 2 GPUs),
b1 (team-b, 1 GPU) and b2 (team-b, 2 GPUs), in that order. The core admits a1 and b1 and holds
b2 for quota (team-b would use 3 GPUs of its 2; the top cohort's 4 are its queues' nominal
quotas, all used or asked for)."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.api.app import create_app
from gpufleet.backends.kube.scheduler import SchedulerOptions
from gpufleet.backends.sim.run import run_workloads
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.io.readers import read_scenario
from gpufleet.kube_client.api import KubeApi, RateLimiter
from gpufleet.metrics import families
from gpufleet.metrics.endpoint import HealthServer
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.service.kube_plane import KubeControlPlane
from gpufleet.service.plane_book import ServeOptions, create_token
from gpufleet.service.store import Store
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.service import as_yaml, make_harness, pod_doc, queue_doc
from tests.backends.kube.harness import Harness, harness
from tests.fakes.kube_api import FakeApiServer

Obj = dict[str, Any]
#: Family name (as a scrape names it) -> its samples (``name{label="value"}`` -> value).
Families = dict[str, dict[str, float]]

NODE = ko.gpu_node("n1", gpus=4)
MODEL = "NVIDIA-H100-80GB-HBM3"
QUEUES = [
    ko.queue("team-a", {"nvidia.com/gpu": 2}, namespaces=["team-a"]),
    ko.queue("team-b", {"nvidia.com/gpu": 2}, namespaces=["team-b"]),
]
PODS = [("a1", "team-a", 2), ("b1", "team-b", 1), ("b2", "team-b", 2)]
EXPECTED = {
    'gpufleet_running_workloads{queue="team-a"}': 1,
    'gpufleet_running_workloads{queue="team-b"}': 1,
    'gpufleet_pending_workloads{queue="team-b",reason="quota"}': 1,
    'gpufleet_pending_pods{queue="team-b"}': 1,
    f'gpufleet_allocated_gpus{{model="{MODEL}",queue="team-a"}}': 2,
    f'gpufleet_allocated_gpus{{model="{MODEL}",queue="team-b"}}': 1,
    f'gpufleet_cluster_gpus{{model="{MODEL}"}}': 4,
    'gpufleet_queue_nominal_quota{queue="team-b",resource="nvidia.com/gpu"}': 2,
    'gpufleet_queue_resource_usage{queue="team-b",resource="nvidia.com/gpu"}': 1,
    'gpufleet_admitted_workloads_total{queue="team-a"}': 1,
    'gpufleet_admitted_workloads_total{queue="team-b"}': 1,
    "gpufleet_scheduled_pods_total": 2,
}


def scraped(text: str) -> Families:
    """A ``/metrics`` page as families of samples (families without samples included)."""
    out: Families = {}
    for metric in text_string_to_metric_families(text):
        name = f"{metric.name}_total" if metric.type == "counter" else metric.name
        found = out[name] = {}
        for sample in metric.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


# ----------------------------------------------------------------------------- the worlds
def simulation(tmp_path: Path) -> Families:
    """A simulated run's report (pods without a run time run until the end)."""
    scenario_file = tmp_path / "scenario.yaml"
    pods = [ko.gpu_pod(name, namespace, gpus=gpus) for name, namespace, gpus in PODS]
    scenario_file.write_text(yaml.safe_dump_all([*QUEUES, *pods]))
    scenario = read_scenario(scenario_file)
    nodes = [node_from_object(NODE, "test")]
    run = run_workloads(nodes, scenario.workloads, "bestfit", 0, scenario.queues)
    return run.replay.metrics


def serve_embedded(tmp_path: Path) -> Families:
    """``gpufleet serve``'s /metrics over the simulated cluster."""
    queues = [queue_doc(name, 2, namespaces=[name]) for name in ("team-a", "team-b")]
    served = make_harness(tmp_path, [node_from_object(NODE, "test")], queues)
    body = as_yaml(*(pod_doc(n, gpus, namespace=ns, runtime=None) for n, ns, gpus in PODS))
    admin = served.client("admin")
    response = admin.post(
        "/api/v1/workloads", content=body, headers={"Content-Type": "application/yaml"}
    )
    assert response.status_code == 201, response.text
    served.advance(1.0)
    try:
        return scraped(admin.get("/metrics").text)
    finally:
        served.close()


@contextmanager
def kube_cluster() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        for obj in [*ko.crds(), NODE, *QUEUES]:
            server.create(obj)
        yield server


def bound(server: FakeApiServer) -> int:
    return sum(1 for p in server.list("v1", "Pod") if p["spec"].get("nodeName"))


def waiting(core: SchedulerCore | None) -> int:
    return 0 if core is None else len(core.pending)


def create_pods(server: FakeApiServer) -> None:
    for name, namespace, gpus in PODS:
        server.create(ko.gpu_pod(name, namespace, gpus=gpus))


def serve_kubernetes(tmp_path: Path) -> Families:
    """``gpufleet serve --kubeconfig``'s /metrics (its scheduler turned by the test)."""
    with kube_cluster() as server:
        api = KubeApi(server.api_client(), RateLimiter(10_000, 10_000))
        options = SchedulerOptions(policy="bestfit", leader_elect=False, status_every_s=0.0)
        store = Store(tmp_path / "gpufleet.db")
        token = create_token(store, "prometheus", "metrics")  # /metrics is a scraper's only
        plane = KubeControlPlane(api, store, ServeOptions(policy="bestfit"), options)
        plane.scheduler.backend.start()
        turned = Harness(server, plane.scheduler)
        try:
            turned.until(lambda: plane.scheduler.core is not None, what="a core")
            create_pods(server)
            turned.until(lambda: bound(server) == 2, what="a1 and b1 bound")
            turned.until(lambda: waiting(plane.scheduler.core) == 1, what="b2 waiting")
            scraper = TestClient(create_app(plane), headers={"Authorization": f"Bearer {token}"})
            return scraped(scraper.get("/metrics").text)
        finally:
            plane.stop()
            turned.close()
            store.close()


def scheduler(tmp_path: Path) -> Families:
    """``gpufleet scheduler``'s /metrics (its HealthServer, as the command serves it)."""
    with harness(NODE, *QUEUES) as h:
        h.until(lambda: h.scheduler.core is not None, what="a core")
        create_pods(h.server)
        h.until(lambda: bound(h.server) == 2, what="a1 and b1 bound")
        h.until(lambda: waiting(h.scheduler.core) == 1, what="b2 waiting")
        server = HealthServer(h.scheduler.metrics, lambda: True, lambda: True, 0, "127.0.0.1")
        server.start()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as page:
                return scraped(page.read().decode())
        finally:
            server.stop()


SCHEDULER = {f.name for f in families.SCHEDULER}
KUBERNETES = {f.name for f in families.KUBERNETES}
SERVE = {f.name for f in families.SERVE}
#: The device families' own names (the DCGM_ ones: tests/metrics/test_dcgm.py).
DEVICES = {f.name for f in families.DEVICES if f.name.startswith("gpufleet_")}
WORLDS = [
    pytest.param(simulation, SCHEDULER, id="simulation-report"),
    pytest.param(serve_embedded, SCHEDULER | SERVE | DEVICES, id="serve-embedded"),
    pytest.param(serve_kubernetes, SCHEDULER | KUBERNETES | SERVE, id="serve-kubeconfig"),
    pytest.param(scheduler, SCHEDULER | KUBERNETES, id="gpufleet-scheduler"),
]


@pytest.mark.parametrize(("world", "names"), WORLDS)
def test_every_world_exposes_the_same_family_names(
    world: Callable[[Path], Families], names: set[str], tmp_path: Path
) -> None:
    exposed = {name for name in world(tmp_path) if name.startswith("gpufleet_")}
    assert exposed == names


@pytest.mark.parametrize(("world", "names"), WORLDS)
def test_the_values_are_the_cores_state(
    world: Callable[[Path], Families], names: set[str], tmp_path: Path
) -> None:
    samples = {k: v for family in world(tmp_path).values() for k, v in family.items()}
    assert {k: samples.get(k) for k in EXPECTED} == EXPECTED
    pending = {k: v for k, v in samples.items() if k.startswith("gpufleet_pending_workloads{")}
    assert pending == {'gpufleet_pending_workloads{queue="team-b",reason="quota"}': 1}
