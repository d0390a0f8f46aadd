"""Queues and PriorityClasses are checked the same way on every path, and loading a scenario
into a database is all or nothing (issue 11, item 14).

The paths: scenario files (``place``, ``simulate``), ``serve --scenario``, ``PUT
/api/v1/queues`` and ``/api/v1/priorityclasses``, the objects a database already holds (as an
older version may have written them) and the objects an API server holds (what the Kubernetes
scheduler reads, and reports as Valid=False).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.catalog import PRIORITY_CLASS, QUEUE
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.model.queues import validate_queue_tree
from gpufleet.service.auth import ADMIN, Principal
from gpufleet.service.embedded_plane import EmbeddedControlPlane
from gpufleet.service.plane_book import ConflictError, NotFoundError, ServeOptions
from gpufleet.service.store import Store
from gpufleet.testing.service import (
    as_yaml,
    gpu_nodes,
    make_harness,
    pod_doc,
    priority_class_doc,
    queue_doc,
)

REPO = Path(__file__).resolve().parents[2]
SMALL = str(REPO / "examples" / "clusters" / "small.yaml")
runner = CliRunner()
Obj = dict[str, Any]
ADMIN_CALLER = Principal("admin", ADMIN)


def queue(name: str, gpus: float | None = None, parent: str | None = None, **spec: Any) -> Obj:
    doc = queue_doc(name, gpus, parent)
    doc["spec"].update(spec)
    return doc


def global_class(name: str, value: int) -> Obj:
    return {**priority_class_doc(name, value), "globalDefault": True}


@dataclass(frozen=True, slots=True)
class Invalid:
    """A valid catalog (``setup``), and a change to it that is refused everywhere with
    ``message`` (the object named, the field, why)."""

    setup: tuple[Obj, ...]
    change: Obj
    message: str

    @property
    def objects(self) -> list[Obj]:
        """The catalog the change would make (the change replaces a setup object of its name)."""
        name = (self.change["kind"], self.change["metadata"]["name"])
        kept = [o for o in self.setup if (o["kind"], o["metadata"]["name"]) != name]
        return [*kept, self.change]


INVALID = {
    "missing-parent": Invalid(
        (queue("org", 8),),
        queue("team", 2, parent="nowhere"),
        "Queue team: spec.parent: parent 'nowhere' is not defined",
    ),
    "cycle": Invalid(
        (queue("a", 2), queue("b", 2, parent="a")),
        queue("a", 2, parent="b"),
        "Queue a: spec.parent: parents form a cycle: a -> b -> a",
    ),
    "children-above-parent": Invalid(
        (queue("org", 8), queue("a", 6, parent="org")),
        queue("b", 4, parent="org"),
        "Queue org: spec.quota[nvidia.com/gpu]: children's nvidia.com/gpu quotas add up to 10, "
        "more than its own 8 (a, b)",
    ),
    "negative-quota": Invalid(
        (queue("org", 8),),
        queue("team", -2, parent="org"),
        "Queue team: spec.quota[nvidia.com/gpu]: must not be negative, got -2",
    ),
    "negative-borrowing-limit": Invalid(
        (queue("org", 8),),
        queue("team", 2, parent="org", borrowingLimit={"cpu": "-1"}),
        "Queue team: spec.borrowingLimit[cpu]: CPU must not be negative",
    ),
    "zero-weight": Invalid(
        (queue("org", 8),),
        queue("team", 2, parent="org", weight=0),
        "Queue team: spec.weight: expected a positive number, got 0",
    ),
    "unknown-field": Invalid(
        (queue("org", 8),),
        queue("team", 2, parent="org", wieght=3),
        "Queue team: spec.wieght: unknown field; did you mean 'weight'?",
    ),
    "kueue-field": Invalid(
        (queue("org", 8),),
        queue("team", parent="org", nominalQuota={"nvidia.com/gpu": 2}),
        "Queue team: spec.nominalQuota: unknown field; Kueue's nominalQuota is spec.quota here",
    ),
    "namespace-default-twice": Invalid(
        (queue("a", 2, namespaces=["ml"]),),
        queue("b", 2, namespaces=["ml"]),
        "Queue b: spec.namespaces[0]: namespace 'ml' already has a default queue: 'a'",
    ),
    "two-global-default-classes": Invalid(
        (global_class("batch", 10),),
        global_class("urgent", 100),
        "PriorityClass urgent: globalDefault: two global default priority classes: 'urgent' "
        "and 'batch'",
    ),
    "class-bad-preemption-policy": Invalid(
        (),
        {**priority_class_doc("urgent", 100), "preemptionPolicy": "Always"},
        "PriorityClass urgent: preemptionPolicy: expected PreemptLowerPriority or Never",
    ),
}


@pytest.fixture
def fake_uvicorn(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """``serve`` builds everything, then returns where it would serve (the apps it made)."""
    served: list[object] = []

    def run(server: uvicorn.Server, **_: object) -> None:
        served.append(server.config.app)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return served


def scenario_file(tmp_path: Path, objects: list[Obj]) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(as_yaml(*objects))
    return path


def refused_by_cli(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    return " ".join(result.output.split())


# ------------------------------------------------------------------------------- the paths
def by_place(tmp_path: Path, case: Invalid) -> str:
    file = scenario_file(tmp_path, case.objects)
    return refused_by_cli(["place", "--cluster", SMALL, "--scenario", str(file)])


def by_simulate(tmp_path: Path, case: Invalid) -> str:
    file = scenario_file(tmp_path, case.objects)
    return refused_by_cli(["simulate", "--scenario", str(file), "--cluster", SMALL])


def by_serve_scenario(tmp_path: Path, case: Invalid) -> str:
    file = scenario_file(tmp_path, case.objects)
    db = tmp_path / "z.db"
    text = refused_by_cli(["serve", "--db", str(db), "--scenario", str(file), "--port", "0"])
    store = Store(db)
    assert store.objects(QUEUE) == store.objects(PRIORITY_CLASS) == []
    assert store.meta("seeded") is None
    store.close()
    return text


def by_put(tmp_path: Path, case: Invalid) -> str:
    harness = make_harness(tmp_path, queues=[queue("unrelated", 1)], tenants=())
    client = harness.client("admin")
    for obj in case.setup:
        assert client.put(_route(obj), json=obj).status_code == 200
    before = client.get("/api/v1/queues").json(), client.get("/api/v1/priorityclasses").json()
    response = client.put(_route(case.change), json=case.change)
    assert response.status_code == 422, response.text
    after = client.get("/api/v1/queues").json(), client.get("/api/v1/priorityclasses").json()
    assert after == before, "a refused change changed something"
    harness.close()
    body = response.json()
    assert body["field"] in body["message"]
    return str(body["message"])


def by_stored(tmp_path: Path, case: Invalid) -> str:
    """A database that holds the bad catalog already (an older version accepted it): the plane
    starts, sets the bad objects aside, says why, and keeps the others."""
    store = Store(tmp_path / "old.db")
    for obj in case.objects:
        store.put_object(obj["kind"], obj["metadata"]["name"], obj)
    plane = EmbeddedControlPlane(store, gpu_nodes(1), ServeOptions())
    assert plane.catalog.rejected, "nothing set aside"
    validate_queue_tree(plane.catalog.queues)
    store.close()
    return " | ".join(r.message for r in plane.catalog.rejected)


def by_api_server(_: Path, case: Invalid) -> str:
    """What the Kubernetes scheduler makes of these objects on an API server (each set-aside
    one becomes a Valid=False condition, or an InvalidSpec event, with this message)."""
    objects = copy.deepcopy(case.objects)
    for i, obj in enumerate(objects):
        obj["metadata"]["resourceVersion"] = str(i + 1)
    catalog = LiveCatalog(
        [o for o in objects if o["kind"] == QUEUE],
        [o for o in objects if o["kind"] == PRIORITY_CLASS],
    )
    return " | ".join(r.message for r in catalog.rejected)


def _route(obj: Obj) -> str:
    return "/api/v1/queues" if obj["kind"] == QUEUE else "/api/v1/priorityclasses"


PATHS: dict[str, Callable[[Path, Invalid], str]] = {
    "place": by_place,
    "simulate": by_simulate,
    "serve-scenario": by_serve_scenario,
    "put": by_put,
    "stored": by_stored,
    "api-server": by_api_server,
}


@pytest.mark.usefixtures("fake_uvicorn")
@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("case", INVALID.values(), ids=INVALID.keys())
def test_an_invalid_catalog_is_refused_identically_on_every_path(
    tmp_path: Path, case: Invalid, path: Callable[[Path, Invalid], str]
) -> None:
    assert case.message in path(tmp_path, case)


# --------------------------------------------------------------- serve --scenario, the repro
BAD_QUEUE = queue("team", -2)


def test_a_bad_scenario_stores_nothing_and_the_next_start_works(
    tmp_path: Path, fake_uvicorn: list[object]
) -> None:
    """The repro: a Queue of negative quota with a workload; serve exits 2 having stored
    nothing; the next start (no --scenario) starts as on a new database."""
    db = tmp_path / "z.db"
    bad = scenario_file(tmp_path, [BAD_QUEUE, pod_doc("job", queue="team", namespace="ml")])
    args = ["serve", "--db", str(db), "--port", "0"]
    refused = runner.invoke(app, [*args, "--scenario", str(bad)])
    assert refused.exit_code == 2
    assert "Queue team: spec.quota[nvidia.com/gpu]: must not be negative" in refused.output
    store = Store(db)
    assert (store.objects(QUEUE), store.workloads(), store.meta("seeded")) == ([], [], None)
    store.close()
    started = runner.invoke(app, args)
    assert started.exit_code == 0, started.output
    assert fake_uvicorn, "the second start did not get to serving"
    store = Store(db)
    assert {q["metadata"]["name"] for q in store.objects(QUEUE)} >= {"org", "research"}
    store.close()


def test_a_scenario_with_a_bad_workload_stores_none_of_its_queues(
    tmp_path: Path, fake_uvicorn: list[object]
) -> None:
    """Queues fine, a workload naming a queue that does not exist: nothing at all is stored."""
    db = tmp_path / "z.db"
    file = scenario_file(tmp_path, [queue("team", 4), pod_doc("job", queue="nope")])
    result = runner.invoke(app, ["serve", "--db", str(db), "--port", "0", "--scenario", str(file)])
    assert result.exit_code == 2
    assert "queue 'nope' is not defined" in result.output
    store = Store(db)
    assert (store.objects(QUEUE), store.workloads()) == ([], [])
    store.close()
    assert not fake_uvicorn


def test_a_good_scenario_is_stored_in_one_go_with_its_workloads(
    tmp_path: Path, fake_uvicorn: list[object]
) -> None:
    db = tmp_path / "z.db"
    file = scenario_file(
        tmp_path,
        [queue("team", 4, namespaces=["ml"]), pod_doc("a", namespace="ml"), pod_doc("b")],
    )
    result = runner.invoke(app, ["serve", "--db", str(db), "--port", "0", "--scenario", str(file)])
    assert result.exit_code == 0, result.output
    store = Store(db)
    stored = {w.key: (w.tenant, w.timed.workload.queue) for w in store.workloads()}
    # b names no queue in a namespace no queue is the default for: the implicit default queue
    assert stored == {"ml/Pod/a": ("operator", "team"), "default/Pod/b": ("operator", "default")}
    store.close()


# ------------------------------------------------------------- a database that is bad already
def test_a_database_with_a_bad_queue_starts_says_which_and_how_to_fix_it(
    tmp_path: Path, fake_uvicorn: list[object]
) -> None:
    """A database whose Queue names a parent that does not exist (an older gpufleet accepted
    it), with a workload in it: the server starts, names the object and the fix; the workload
    waits; fixing the queue through the API lets it run."""
    team = queue("team", 4, parent="org", namespaces=["ml"])  # it admits ml
    harness = make_harness(tmp_path, queues=[queue("org", 8), team])
    submitted = harness.client("admin").post(
        "/api/v1/workloads", content=as_yaml(pod_doc("job", queue="team", namespace="ml"))
    )
    assert submitted.status_code == 201, submitted.text
    harness.advance(1)
    stale = queue("team", 4, parent="gone", namespaces=["ml"])  # as stored by an older gpufleet
    harness.store.put_object(QUEUE, "team", stale)
    harness.store.set_meta("seeded", "1")
    harness.close()

    result = runner.invoke(app, ["serve", "--db", str(harness.db), "--port", "0"])
    assert result.exit_code == 0, result.output
    assert fake_uvicorn
    text = " ".join(result.output.split())
    assert (
        "stored Queue team is set aside (spec.parent: parent 'gone' is not defined). Fix it "
        "with PUT /api/v1/queues" in text
    )
    assert "or delete it with DELETE /api/v1/queues/team" in text
    assert "workload ml/Pod/job waits until queue team is fixed" in text

    harness.open()
    plane = harness.plane
    assert plane.held == {"ml/Pod/job": "team"}
    assert plane.records["ml/Pod/job"].events[-1].reason == "QueueInvalid"
    fixed = harness.client("admin").put("/api/v1/queues", json=team)
    assert fixed.status_code == 200, fixed.text
    harness.advance(1)
    assert plane.held == {}
    assert plane.records["ml/Pod/job"].state.value == "Running"
    harness.close()


# --------------------------------------------------------------------------------- DELETE
def test_deleting_a_parent_with_children_is_a_conflict_naming_a_child(tmp_path: Path) -> None:
    harness = make_harness(tmp_path, queues=[queue("org", 8), queue("a", 4, parent="org")])
    response = harness.client("admin").delete("/api/v1/queues/org")
    assert response.status_code == 409
    assert response.json()["message"] == (
        "cannot delete Queue org: it would set aside Queue a (spec.parent: parent 'org' is not "
        "defined); change or delete that first"
    )
    assert harness.client("admin").delete("/api/v1/queues/a").status_code == 204
    assert harness.client("admin").delete("/api/v1/queues/org").status_code == 204
    harness.close()


def test_a_bad_stored_queue_can_be_deleted(tmp_path: Path) -> None:
    harness = make_harness(tmp_path, queues=[queue("org", 8), queue("team", 2, parent="gone")])
    assert [r.key for r in harness.plane.catalog.rejected] == ["team"]
    assert harness.client("admin").delete("/api/v1/queues/team").status_code == 204
    assert harness.plane.catalog.rejected == []
    harness.close()


def test_a_change_is_not_blamed_for_an_object_that_was_bad_already(tmp_path: Path) -> None:
    harness = make_harness(tmp_path, queues=[queue("org", 8), queue("team", 2, parent="gone")])
    response = harness.client("admin").put("/api/v1/queues", json=queue("other", 1))
    assert response.status_code == 200, response.text
    harness.close()


# ---------------------------------------------------------------------- every change, checked
QUEUE_NAMES = ("org", "a", "b", "c")
change_strategy = st.tuples(
    st.sampled_from(("put", "delete")),
    st.sampled_from(QUEUE_NAMES),
    st.one_of(st.none(), st.sampled_from(QUEUE_NAMES)),  # parent
    st.integers(-1, 10),  # GPUs
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(changes=st.lists(change_strategy, max_size=8))
def test_no_sequence_of_accepted_changes_stores_a_catalog_a_restart_would_refuse(
    tmp_path_factory: pytest.TempPathFactory, changes: list[tuple[str, str, str | None, int]]
) -> None:
    """Whatever admins put and delete, what the store holds is a valid catalog: a restart sets
    nothing aside, and a refused change changes nothing."""
    tmp = tmp_path_factory.mktemp("changes")
    store = Store(tmp / "db")
    plane = EmbeddedControlPlane(store, gpu_nodes(1), ServeOptions())
    for action, name, parent, gpus in changes:
        before = store.objects(QUEUE)
        try:
            if action == "put":
                plane.put_object(ADMIN_CALLER, QUEUE, queue(name, gpus, parent))
            else:
                plane.delete_object(ADMIN_CALLER, QUEUE, name)
        except (InputError, ConflictError, NotFoundError):
            assert store.objects(QUEUE) == before
        assert plane.catalog.rejected == []
    restarted = EmbeddedControlPlane(store, gpu_nodes(1), ServeOptions())
    assert restarted.catalog.rejected == []
    validate_queue_tree(restarted.catalog.queues)
    store.close()
