"""A Job of ``parallelism: 0`` is valid and runs nothing (Kubernetes keeps it active, paused,
until its parallelism is raised): every path that reads it says so and exits 0 (status 201),
alone or beside a workload that runs; a truly empty file is still refused on every path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cli.remote import use_http
from gpufleet.service.protocol import Plane
from gpufleet.testing.service import (
    ServiceHarness,
    as_yaml,
    job_doc,
    make_harness,
    pod_doc,
    queue_doc,
)

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
SMALL = str(REPO / "examples" / "clusters" / "small.yaml")
NOTE = (
    "Job team-a/held: parallelism 0 runs no pods (Kubernetes keeps it active until its "
    "parallelism is raised)"
)


def paused_job() -> dict[str, Any]:
    """A Job of 2 completions at parallelism 0, in tenant team-a's namespace."""
    job = job_doc("held", 2, namespace="team-a")
    job["spec"]["parallelism"] = 0
    return job


@dataclass(frozen=True)
class Outcome:
    """What a path answered: its exit code (or HTTP status) and all it printed (or sent)."""

    code: int
    text: str


@dataclass
class World:
    """Where a path runs: a directory for files, the real app in-process, serve's planes."""

    tmp_path: Path
    harness: ServiceHarness
    planes: list[Plane]

    def file(self, documents: list[dict[str, Any]], name: str = "input.yaml") -> Path:
        path = self.tmp_path / name
        path.write_text(as_yaml(*documents) if documents else "")
        return path


def _invoke(*args: str) -> Outcome:
    result = runner.invoke(app, list(args))
    return Outcome(result.exit_code, result.stdout + result.stderr)


def _submit(world: World, path: Path, *more: str) -> Outcome:
    return _invoke("submit", "-f", str(path), *more, "--token", world.harness.tokens["team-a"])


def _api(world: World, path: Path) -> Outcome:
    client = world.harness.client("team-a")
    response = client.post(
        "/api/v1/workloads", content=path.read_bytes(), headers={"Content-Type": "application/yaml"}
    )
    body = response.json()
    paused = body.get("paused", [])
    return Outcome(response.status_code, "\n".join(f"paused: {line}" for line in paused))


def _place_scenario(world: World, path: Path) -> Outcome:
    return _invoke("place", "--cluster", SMALL, "--scenario", str(path))


def _place_workload(world: World, path: Path) -> Outcome:
    return _invoke("place", "--cluster", SMALL, "--workload", str(path))


def _simulate(world: World, path: Path) -> Outcome:
    out = world.tmp_path / "out"
    args = ("--cluster", SMALL, "--scenario", str(path), "--out", str(out), "--workers", "1")
    return _invoke("simulate", *args)


def _serve(world: World, path: Path) -> Outcome:
    db = world.tmp_path / "serve.db"
    outcome = _invoke("serve", "--db", str(db), "--port", "0", "--scenario", str(path))
    if outcome.code == 0:
        assert len(world.planes) == 1  # it started, and would have served
    return outcome


Runner = Callable[[World, Path], Outcome]
PATHS = [
    pytest.param(_submit, id="submit"),
    pytest.param(lambda w, p: _submit(w, p, "--dry-run"), id="submit-dry-run"),
    pytest.param(_api, id="api"),
    pytest.param(_place_scenario, id="place-scenario"),
    pytest.param(_place_workload, id="place-workload"),
    pytest.param(_simulate, id="simulate-scenario"),
    pytest.param(_serve, id="serve-scenario"),
]


@pytest.fixture
def world(
    env: Path, tmp_path: Path, served: list[Plane], monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    """The real app (4 nodes x 4 A100, queues team-a and team-b) that ``submit`` reaches
    in-process, and ``serve`` patched to build everything and return."""
    monkeypatch.chdir(tmp_path)  # serve writes nothing beside the repository
    harness = make_harness(tmp_path)
    client = TestClient(harness.app)
    with use_http(lambda _: client):
        yield World(tmp_path, harness, served)
    client.close()
    harness.close()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("documents", "runs"),
    [
        pytest.param([paused_job()], False, id="only-a-paused-job"),
        pytest.param([paused_job(), pod_doc("one", 1)], True, id="beside-a-pod"),
    ],
)
def test_a_paused_job_is_said_and_is_not_an_error(
    world: World, path: Runner, documents: list[dict[str, Any]], runs: bool
) -> None:
    outcome = path(world, world.file(documents))
    assert outcome.code in (0, 201), outcome.text
    text = " ".join(outcome.text.split())
    assert f"paused: {NOTE}" in text, text
    assert "no workloads" not in text, text
    assert "error" not in text.lower(), text


def test_submit_shows_the_pod_accepted_beside_the_paused_job(world: World) -> None:
    outcome = _submit(world, world.file([paused_job(), pod_doc("one", 1)]))
    assert outcome.code == 0, outcome.text
    assert outcome.text.splitlines() == [
        "workload/team-a/one accepted: Pod, 1 pod(s), GPU request 1, queue team-a, Pending",
        f"paused: {NOTE}",
    ]
    assert list(world.harness.plane.records) == ["team-a/Pod/one"]


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        pytest.param(_submit, "empty, nothing to submit", id="submit"),
        pytest.param(_place_scenario, "found no objects", id="place-scenario"),
        pytest.param(_place_workload, "found no objects", id="place-workload"),
        pytest.param(_simulate, "found no objects", id="simulate-scenario"),
        pytest.param(_serve, "found no objects", id="serve-scenario"),
    ],
)
def test_a_truly_empty_file_is_still_refused(world: World, path: Runner, refusal: str) -> None:
    outcome = path(world, world.file([]))
    assert outcome.code == 2, outcome.text
    assert refusal in " ".join(outcome.text.split())
    assert "paused" not in outcome.text


def test_the_api_refuses_an_empty_body(world: World) -> None:
    outcome = _api(world, world.file([]))
    assert outcome.code == 422


def test_a_scenario_of_queues_alone_still_defines_no_workloads(world: World) -> None:
    outcome = _simulate(world, world.file([queue_doc("team-a", 8)]))
    assert outcome.code == 2, outcome.text
    assert "the files define no workloads" in " ".join(outcome.text.split())
