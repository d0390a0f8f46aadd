"""Every command's instants in each world's one format (issue 29 item 17).

A simulated cluster's clock counts seconds from its start: its instants read ``t=39m09s``, and
a date (``1970-01-02``) is a bug. ``serve --local`` and Kubernetes run on the wall clock (Unix
seconds): their instants read as UTC dates, and a simulated instant (``t=20788d22h``: 57 years
since the epoch) is a bug. Each world here has a budgeted queue, a workload running and one
that its spent budget holds back; ``describe``, ``explain``, ``get workloads`` and ``get
queues`` (the CLI, as people read it) and the API's explain and events (the budget's Warning
events) are read in each world, and checked for the other world's format.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.api.schemas import ClusterSummary
from gpufleet.cli.main import app
from gpufleet.cli.remote import use_http
from gpufleet.cli.remote_render import Clock
from gpufleet.model.inventory import NodeInventory
from gpufleet.model.times import TimeFormat, simulated_time, wall_clock_time
from gpufleet.service.embedded_plane import EmbeddedControlPlane
from gpufleet.service.kube_plane import KubeControlPlane
from gpufleet.service.local_plane import LocalControlPlane
from gpufleet.testing.local_service import TENANT, LocalHarness
from gpufleet.testing.service import as_yaml, make_harness, pod_doc, queue_doc
from tests.backends.local.conftest import eight_gpus, no_process_left, state_root

__all__ = ["eight_gpus", "no_process_left", "state_root"]

runner = CliRunner()
YAML = {"Content-Type": "application/yaml"}
HOUR = 3600.0
#: A budget a 10-hour, 1-GPU workload spends as it is admitted (its hours are committed).
BUDGET = {"gpuHours": 1, "period": "day", "action": "Block"}

#: A simulated instant (any), one more than a year after its start, a date before 2000.
SIMULATED_INSTANT = re.compile(r"\bt=\d")
FAR_SIMULATED_INSTANT = re.compile(r"\bt=\d{3,}d")
OLD_DATE = re.compile(r"\b19\d\d-\d\d-\d\d")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d")


@dataclass(frozen=True)
class World:
    """A served world: the workload ``long`` runs, ``waits`` is held back by the budget."""

    simulated: bool
    namespace: str
    token: str
    admin: TestClient


def budget_queue(name: str) -> dict[str, Any]:
    queue = queue_doc(name, 8, namespaces=[name])
    queue["spec"]["budget"] = dict(BUDGET)
    return queue


@pytest.fixture
def simulated(env: Path, tmp_path: Path) -> Iterator[World]:
    """``serve``: the embedded simulated cluster, its clock moved by the test."""
    harness = make_harness(tmp_path, queues=[budget_queue("team-a"), queue_doc("team-b", 8)])
    tenant = harness.client("team-a")
    for name in ("long", "waits"):
        document = as_yaml(pod_doc(name, 1, runtime="10h"))
        assert tenant.post("/api/v1/workloads", content=document, headers=YAML).status_code == 201
        harness.advance(60)
    harness.advance(HOUR)
    client = TestClient(harness.app)
    with use_http(lambda _: client):
        yield World(True, "team-a", harness.tokens["team-a"], harness.client("admin"))
    client.close()
    harness.close()


def local_pod(name: str) -> dict[str, Any]:
    sleep = [sys.executable, "-c", "import time; time.sleep(300)"]
    container = {"name": "main", "command": sleep, "resources": {"limits": {"nvidia.com/gpu": 1}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gpufleet.dev/expected-runtime": "10h"}},
        "spec": {"containers": [container]},
    }


@pytest.fixture
def local(env: Path, eight_gpus: NodeInventory, state_root: Path) -> Iterator[World]:
    """``serve --local``: this machine (fake GPUs, real processes), on the wall clock."""
    harness = LocalHarness.start(eight_gpus, state_root)
    try:
        admin = harness.client("admin")
        put = admin.put("/api/v1/queues", content=as_yaml(budget_queue(TENANT)), headers=YAML)
        assert put.status_code == 200, put.text
        assert harness.submit(local_pod("long"))["status"] == 201
        harness.run_until(harness.state_is("long", "Running"))
        assert harness.submit(local_pod("waits"))["status"] == 201
        explain = f"/api/v1/workloads/{TENANT}/waits/explain"
        harness.run_until(lambda: admin.get(explain).json().get("waiting_for") == "budget")
        client = TestClient(harness.app)
        with use_http(lambda _: client):
            yield World(False, TENANT, harness.tokens[TENANT], admin)
        client.close()
    finally:
        harness.shut_down()


@pytest.fixture(params=["serve", "serve-local"])
def world(request: pytest.FixtureRequest) -> World:
    found: World = request.getfixturevalue("simulated" if request.param == "serve" else "local")
    return found


def gpufleet(world: World, *args: str) -> str:
    result = runner.invoke(app, [*args, "--token", world.token])
    assert result.exit_code == 0, result.stderr
    return result.stdout


#: (what is read, how): every command whose output has instants, and the API's messages.
READS: list[tuple[str, Any]] = [
    ("get workloads -o wide", lambda w: gpufleet(w, "get", "workloads", "-o", "wide")),
    ("get queues -o wide", lambda w: gpufleet(w, "get", "queues", "-o", "wide")),
    ("describe a running workload", lambda w: gpufleet(w, "describe", "workload", "long")),
    ("describe a waiting workload", lambda w: gpufleet(w, "describe", "workload", "waits")),
    ("explain a running workload", lambda w: gpufleet(w, "explain", "long")),
    ("explain a waiting workload", lambda w: gpufleet(w, "explain", "waits")),
    (
        "the API's explain",
        lambda w: "\n".join(
            w.admin.get(f"/api/v1/workloads/{w.namespace}/{name}/explain").json()["message"]
            for name in ("long", "waits")
        ),
    ),
    (
        "the API's events",
        lambda w: "\n".join(e["message"] for e in w.admin.get("/api/v1/events").json()),
    ),
]


def test_every_command_reads_instants_in_its_worlds_format(world: World) -> None:
    texts = {what: read(world) for what, read in READS}
    for what, text in texts.items():
        assert not OLD_DATE.search(text), f"{what}: a date before 2000:\n{text}"
        if world.simulated:
            assert not DATE.search(text), f"{what}: a date in a simulated cluster:\n{text}"
        else:
            assert not FAR_SIMULATED_INSTANT.search(text), f"{what}: t= on the wall clock:\n{text}"
            assert not SIMULATED_INSTANT.search(text), f"{what}: t= on the wall clock:\n{text}"
    instant = r"t=\d\S*" if world.simulated else r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    assert re.search(f"running since {instant}", texts["explain a running workload"])
    resets = r"t=1d00h" if world.simulated else r"20\d\d-\d\d-\d\d 00:00:00 UTC"
    assert re.search(f"resets {resets}", texts["explain a waiting workload"])
    assert re.search(f"resets {resets}: budget spent", texts["the API's events"])


@pytest.mark.parametrize(
    ("plane", "backend", "instants"),
    [
        (EmbeddedControlPlane, "simulated", simulated_time),
        (LocalControlPlane, "local", wall_clock_time),
        (KubeControlPlane, "kubernetes", wall_clock_time),
    ],
    ids=["serve", "serve-local", "kubernetes"],
)
def test_each_plane_and_the_cli_agree_on_its_worlds_format(
    plane: type[EmbeddedControlPlane | LocalControlPlane | KubeControlPlane],
    backend: str,
    instants: TimeFormat,
) -> None:
    """Every plane says which clock it runs on; the CLI, which knows only the backend's name,
    reads its instants the same way (a new plane that says nothing fails here)."""
    assert plane.backend_name == backend
    assert plane.simulated_clock is (instants is simulated_time)
    summary = ClusterSummary(
        backend=backend, time=0.0, nodes=0, gpus=0, gpus_allocated=0.0, gpu_allocation=0.0,
        workloads_pending=0, workloads_running=0, policy="bestfit",
    )  # fmt: skip
    moment = 1_795_000_000.0
    assert Clock.of(summary).at(moment) == instants(moment)
