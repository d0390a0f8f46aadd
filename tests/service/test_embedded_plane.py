"""The control plane's parts: the live simulated world, the store, tenants and admission
rules, restarts, and the event stream."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.backends.sim import live
from gpufleet.backends.sim.live import LiveSimCluster, ScaledClock
from gpufleet.control.factory import target_of
from gpufleet.io.errors import InputError
from gpufleet.model import GFD_LABELS, Placement
from gpufleet.model.actions import Bind, Evict
from gpufleet.model.events import PodBound, PodDeleted, PodEnd, WorkloadAdded, WorkloadReleased
from gpufleet.model.queues import Queue
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.service.auth import (
    AdmissionRules,
    Principal,
    TenantRules,
    hash_token,
    rules_from_object,
)
from gpufleet.service.plane_book import Change
from gpufleet.service.states import ChangeKind
from gpufleet.service.store import Store, StoreError
from gpufleet.testing.builders import make_pod
from gpufleet.testing.service import (
    FakeWall,
    ServiceHarness,
    as_yaml,
    gpu_nodes,
    job_doc,
    make_harness,
    pod_doc,
    priority_class_doc,
    queue_doc,
)

YAML = {"Content-Type": "application/yaml"}
HOSTNAME = GFD_LABELS.HOSTNAME


def timed(name: str, gpus: int = 1, duration: float | None = 100.0, pods: int = 1) -> TimedWorkload:
    members = tuple(make_pod(f"{name}-{i}" if pods > 1 else name, gpus=gpus) for i in range(pods))
    return TimedWorkload(Workload(name, "default", members, "default"), 0.0, duration)


# ---------------------------------------------------------------------------------- clock
@pytest.mark.parametrize(
    ("speed", "wall_seconds", "expected"),
    [(1.0, 10.0, 10.0), (60.0, 10.0, 600.0), (0.5, 10.0, 5.0)],
    ids=["real-time", "a-minute-a-second", "slow-motion"],
)
def test_scaled_clock(speed: float, wall_seconds: float, expected: float) -> None:
    wall = FakeWall(100.0)
    clock = ScaledClock(speed, start=50.0, wall=wall)
    wall.now += wall_seconds
    assert clock.now() == pytest.approx(50.0 + expected)
    assert clock.seconds_until(50.0 + expected + speed) == pytest.approx(1.0)


@pytest.mark.parametrize("speed", [0.0, -1.0, float("inf")], ids=["zero", "negative", "inf"])
def test_scaled_clock_refuses_bad_speeds(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        ScaledClock(speed)


# ---------------------------------------------------------------------------------- world
def live_world(wall: FakeWall) -> LiveSimCluster:
    return LiveSimCluster(gpu_nodes(2, 4), target_of(()), speed=10.0, wall=wall)


def test_live_world_runs_submitted_work_for_its_duration() -> None:
    wall = FakeWall()
    world = live_world(wall)
    job = timed("a", duration=100.0)
    world.submit(job)
    assert [type(e) for e in world.poll_events()] == [WorkloadAdded]
    world.apply([Bind(job.workload.pods[0], Placement("a100-0", (1,)))])
    assert world.poll_events() == [PodBound(job.workload.pods[0], Placement("a100-0", (1,)))]
    assert world.work_of("default/a") == (0.0, 100.0)
    wall.now += 9.9  # 99 simulated seconds
    assert world.poll_events() == []
    wall.now += 0.2
    assert world.poll_events() == [PodDeleted("default/a", PodEnd.SUCCEEDED)]
    assert world.placement("default/a") is None


def test_live_world_eviction_keeps_work_since_checkpoint() -> None:
    wall = FakeWall()
    world = live_world(wall)
    pod = make_pod("b", gpus=1)
    job = TimedWorkload(
        Workload("b", "default", (pod,), "default", checkpoint_interval=30.0), 0.0, 100.0
    )
    world.submit(job)
    world.poll_events()
    world.apply([Bind(pod, Placement("a100-1", (0,)))])
    wall.now += 7.0  # 70 s ran; the checkpoint at 60 s keeps 60
    world.apply([Evict(pod, "preempted", "default/x")])
    bound, evicted = world.poll_events()
    assert isinstance(bound, PodBound)
    assert evicted == PodDeleted("default/b", PodEnd.EVICTED, "preempted")
    work = world.work_of("default/b")
    assert work is not None
    assert work[1] == pytest.approx(40.0)


def test_live_world_cancel_and_restore() -> None:
    wall = FakeWall()
    world = live_world(wall)
    job = timed("c", gpus=2)
    world.submit(job)
    assert world.cancel(["default/c"]) == []  # not arrived yet: dropped from the schedule
    assert world.poll_events() == []
    pod = make_pod("d", gpus=2)
    world.restore(pod, Placement("a100-0", (0, 1)), 50.0, None, False, started=0.0)
    with pytest.raises(ValueError, match="already in the cluster"):
        world.restore(pod, Placement("a100-0", (2, 3)), 50.0, None, False, started=0.0)
    other = make_pod("e", gpus=1)
    with pytest.raises(ValueError, match="0 milli free"):
        world.restore(other, Placement("a100-0", (1,)), 50.0, None, False, started=0.0)
    [(running, placement)] = world.list_state().running
    assert running.key == "default/d"
    assert placement.gpu_indices == (0, 1)
    assert world.cancel(["default/d"]) == ["default/d"]
    assert world.poll_events() == [PodDeleted("default/d")]
    assert world.list_state().running == []


def gated(name: str, gates: tuple[str, ...]) -> TimedWorkload:
    pod = make_pod(name, gpus=1, gates=gates)
    return TimedWorkload(Workload(name, "default", (pod,), "default"), 0.0, 100.0)


def test_a_released_workload_waits_in_its_new_form() -> None:
    world = live_world(FakeWall())
    world.submit(gated("g", ("example.com/q",)))
    [added] = world.poll_events()
    assert isinstance(added, WorkloadAdded)
    released = gated("g", ())
    world.release(released)
    assert world.poll_events() == [WorkloadReleased(released.workload)]
    assert world.pending["default/g"].scheduling_gates == ()


def test_a_workload_released_before_it_arrived_arrives_released() -> None:
    world = live_world(FakeWall())
    world.submit(gated("g", ("example.com/q",)))
    released = gated("g", ())
    world.release(released)
    assert world.poll_events() == [WorkloadAdded(released.workload)]


def test_live_world_wait_is_cut_short_by_wake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "MAX_SLEEP_S", 3600.0)  # only a wake ends this wait in time
    world = LiveSimCluster(gpu_nodes(1, 1), target_of(()), speed=1.0)
    waiting = threading.Thread(target=world.wait, args=(1e9,), daemon=True)
    waiting.start()
    world.wake()  # before or during the wait: either way it returns at once
    waiting.join(timeout=30)  # a bound for the failure only
    assert not waiting.is_alive(), "wait() was not cut short by wake()"


# ---------------------------------------------------------------------------------- store
def test_store_round_trips_workloads_and_refuses_foreign_files(tmp_path: Path) -> None:
    store = Store(tmp_path / "a.db")
    job = timed("g", gpus=2, pods=2)
    store.add_workload(1, "team", "Job", job, 5.0)
    store.set_pod("default/g-0", "Running", Placement("n", (0, 1), 500), 6.0, 94.0)
    [found] = store.workloads()
    assert found.timed == job
    assert [p.placement for p in found.pods] == [Placement("n", (0, 1), 500), None]
    assert store.workloads(active_only=True) == [found]
    store.set_workload_state("default/g", "Succeeded", finished=9.0)
    assert store.workloads(active_only=True) == []
    store.close()
    bad = tmp_path / "not.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a usable gpufleet database"):
        Store(bad)


def test_store_transaction_is_all_or_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "a.db")

    def crash_midway() -> None:
        with store.transaction():
            store.add_workload(1, "team", "Pod", timed("x"), 0.0)
            raise RuntimeError("crash in the middle")

    with pytest.raises(RuntimeError):
        crash_midway()
    assert store.workloads() == []


def test_tokens_are_stored_hashed(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    token = harness.tokens["team-a"]
    raw = (tmp_path / "gpufleet.db").read_bytes()
    assert token.encode() not in raw
    assert harness.store.token(hash_token(token)) is not None


# ---------------------------------------------------------------------------------- tenants
@given(
    st.lists(st.sampled_from(["org", "a", "b", "a1", "b1"]), unique=True, max_size=3),
    st.sampled_from(["a", "b", "c"]),
)
@settings(max_examples=200, deadline=None)
def test_allowed_queues_are_the_named_subtrees(extra: list[str], tenant: str) -> None:
    queues = {
        "org": Queue("org"),
        "a": Queue("a", "org"),
        "b": Queue("b", "org"),
        "a1": Queue("a1", "a"),
        "b1": Queue("b1", "b"),
    }
    allowed = Principal(tenant, "tenant", tuple(extra)).allowed_queues(queues)
    roots = {tenant, *extra}
    for name in queues:
        chain: list[str] = []
        current: str | None = name
        while current is not None:
            chain.append(current)
            current = queues[current].parent
        assert (name in allowed) == bool(roots & set(chain))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"requireGpuToleration": "yes"}, "expected true or false"),
        ({"maxGpusPerWorkload": {"a": -1}}, "expected a number of GPUs >= 0"),
        ({"tenants": {"a": {"queue": ["x"]}}}, "unknown field"),
        ({"tenants": {"a": {"gpuModels": [3]}}}, "expected a name"),
        ({"extra": 1}, "unknown field"),
        (
            {"tenants": {"a": {"namespaces": ["ml"]}, "b": {"namespaces": ["x", "ml"]}}},
            r"spec.tenants.b.namespaces\[1\]: namespace 'ml' is listed for tenant 'a' already",
        ),
    ],
    ids=[
        "toleration-not-bool", "negative-limit", "tenant-typo", "model-not-text", "spec-typo",
        "namespace-of-two-tenants",
    ],
)  # fmt: skip
def test_bad_admission_policies_name_the_field(spec: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        rules_from_object({"kind": "AdmissionPolicy", "spec": spec}, "rules.yaml")


def test_admission_policy_is_read() -> None:
    rules = rules_from_object(
        {
            "kind": "AdmissionPolicy",
            "spec": {
                "requireGpuToleration": True,
                "maxGpusPerWorkload": {"*": 16, "a": 4},
                "tenants": {"a": {"queues": ["x"], "gpuModels": ["T4"]}},
            },
        },
        "rules.yaml",
    )
    assert rules == AdmissionRules(
        True, {"*": 16.0, "a": 4.0}, {"a": TenantRules(("x",), None, frozenset({"T4"}))}
    )


def test_the_namespace_map_names_each_listed_namespaces_tenant() -> None:
    rules = AdmissionRules(
        tenants={"a": TenantRules(namespaces=("a", "ml")), "b": TenantRules(queues=("b",))}
    )
    assert rules.namespace_tenants() == {"a": "a", "ml": "a"}


# ---------------------------------------------------------------------------------- restart
def test_restart_puts_running_pods_back_and_requeues_the_rest(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    client = harness.client("team-a")
    client.post("/api/v1/workloads", content=as_yaml(job_doc("run", 2, 4)), headers=YAML)
    harness.advance(1)
    client.post("/api/v1/workloads", content=as_yaml(job_doc("wait", 3, 4)), headers=YAML)
    harness.advance(1)
    before = client.get("/api/v1/workloads/team-a/run").json()["pod_views"]
    assert client.get("/api/v1/workloads/team-a/wait").json()["state"] == "Pending"
    harness.restart()
    client = harness.client("team-a")
    assert client.get("/api/v1/workloads/team-a/run").json()["pod_views"] == before
    harness.advance(1)
    assert client.get("/api/v1/workloads/team-a/wait").json()["state"] == "Pending"
    harness.advance(601)  # "run" ends after 10 minutes; "wait" then starts
    assert client.get("/api/v1/workloads/team-a/run").json()["state"] == "Succeeded"
    assert client.get("/api/v1/workloads/team-a/wait").json()["state"] == "Running"


def test_restart_keeps_the_clock_and_history(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    harness.client("team-a").post("/api/v1/workloads", content=as_yaml(pod_doc("p")), headers=YAML)
    harness.advance(120)
    harness.advance(120)
    time_before = harness.plane.world.clock.now()
    points = len(harness.client().get("/api/v1/history").json()["points"])
    harness.restart()
    assert harness.plane.world.clock.now() >= time_before - 120
    assert len(harness.client().get("/api/v1/history").json()["points"]) == points


# ---------------------------------------------------------------------------------- stream
def test_event_stream_delivers_changes_of_visible_workloads(tmp_path: Path) -> None:
    harness = make_harness(tmp_path)
    reader = harness.client("team-a")
    received: list[dict[str, object]] = []
    with reader.stream("GET", "/api/v1/stream") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        writer_a, writer_b = harness.client("team-a"), harness.client("team-b")
        writer_b.post("/api/v1/workloads", content=as_yaml(pod_doc("hidden")), headers=YAML)
        writer_a.post("/api/v1/workloads", content=as_yaml(pod_doc("seen")), headers=YAML)
        for line in lines:
            if line.startswith("data: "):
                received.append(json.loads(line.removeprefix("data: ")))
            if any(c.get("key") == "team-a/Pod/seen" and c["kind"] == "event" for c in received):
                break
    assert received[0]["data"] == {"hello": True}
    keys = {c.get("key") for c in received}
    assert "team-a/Pod/seen" in keys
    assert "team-b/Pod/hidden" not in keys
    assert [c["seq"] for c in received] == sorted(c["seq"] for c in received)  # type: ignore[type-var]


def test_event_stream_shows_a_tenant_alerts_only_on_its_own_pods(tmp_path: Path) -> None:
    """An alert on a pod gpufleet does not own goes to its namespace's tenant only (as ``GET
    /alerts`` shows it); one on a device nobody holds, to everyone."""
    harness = make_harness(tmp_path)

    def alert(rule: str, **labels: str) -> Change:
        data: dict[str, object] = {"rule": rule, "state": "firing", "labels": labels}
        return Change(ChangeKind.ALERT, None, 0.0, data)

    received: list[dict[str, object]] = []
    with harness.client("team-a").stream("GET", "/api/v1/stream") as response:
        lines = response.iter_lines()
        harness.plane.publish(
            [
                alert("Theirs", namespace="team-b", pod="their-pod"),
                alert("Ours", namespace="team-a", pod="our-pod"),
                alert("Device", gpu="3"),
                Change(ChangeKind.CLUSTER, None, 0.0, {"end": True}),
            ],
            [],
        )
        for line in lines:
            if line.startswith("data: "):
                received.append(json.loads(line.removeprefix("data: ")))
            if any(c["data"] == {"end": True} for c in received):
                break
    rules = [c["data"]["rule"] for c in received if c["kind"] == "alert"]  # type: ignore[index]
    assert rules == ["Ours", "Device"]


@pytest.mark.parametrize(
    ("preemptor_tenant", "named"),
    [("team-a", True), ("team-b", False)],
    ids=["own-namespace-named", "other-tenant-not-named"],
)
def test_a_preempted_workload_is_told_its_preemptor_only_within_its_namespace(
    tmp_path: Path, preemptor_tenant: str, named: bool
) -> None:
    """Two tenants share a queue; a higher priority preempts. The victim's event names the
    preemptor only when it is of the victim's own namespace (as kube-scheduler's)."""
    shared = queue_doc("shared", 4, namespaces=["team-a", "team-b"])
    shared["spec"]["preemption"] = {"withinQueue": "LowerPriority"}
    harness = make_harness(
        tmp_path,
        nodes=gpu_nodes(1, 4),
        queues=[shared],
        priority_classes=[priority_class_doc("low", 10), priority_class_doc("high", 1000)],
    )
    admin = harness.client()
    for tenant in ("team-a", "team-b"):
        made = admin.post("/api/v1/tokens", params={"tenant": tenant, "queue": "shared"}).json()
        harness.tokens[tenant] = made["token"]
    victim = pod_doc("victim", gpus=4, queue="shared", priority_class="low")
    assert (
        harness.client("team-a")
        .post("/api/v1/workloads", content=as_yaml(victim), headers=YAML)
        .is_success
    )
    harness.advance(1)
    harness.advance(180)  # past the minimum run time before preemption
    preemptor = pod_doc("urgent", gpus=4, queue="shared", priority_class="high")
    assert (
        harness.client(preemptor_tenant)
        .post("/api/v1/workloads", content=as_yaml(preemptor), headers=YAML)
        .is_success
    )
    harness.advance(60)
    events = harness.client("team-a").get("/api/v1/workloads/team-a/victim").json()["events"]
    told = [e["message"] for e in events if e["reason"] == "Preempted"]
    assert told, events
    assert (f"{preemptor_tenant}/" in told[0]) is named, told[0]
    assert ("urgent" in told[0]) is named, told[0]


# ---------------------------------------------------------------------------------- placement rules
def anti_affine(kind: str, name: str, replicas: int = 1) -> dict[str, object]:
    """A Pod or Deployment (``app: web``) whose pods must not share a node with another."""
    spec = dict(pod_doc(name)["spec"])
    spec["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}
            ]
        }
    }
    if kind == "Pod":
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": spec,
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec},
        },
    }


def test_anti_affine_replicas_land_apart_and_still_count_after_a_restart(tmp_path: Path) -> None:
    harness = make_harness(tmp_path, nodes=gpu_nodes(3, 4))
    client = harness.client("team-a")
    client.post(
        "/api/v1/workloads", content=as_yaml(anti_affine("Deployment", "web", 2)), headers=YAML
    )
    harness.advance(1)
    nodes = {
        name: client.get(f"/api/v1/workloads/team-a/{name}").json()["pod_views"][0]["node"]
        for name in ("web-0", "web-1")
    }
    assert len(set(nodes.values())) == 2
    harness.restart()  # the restored pods must count for the rules of new ones
    client = harness.client("team-a")
    for name in ("extra", "one-too-many"):
        client.post("/api/v1/workloads", content=as_yaml(anti_affine("Pod", name)), headers=YAML)
    harness.advance(1)
    extra = client.get("/api/v1/workloads/team-a/extra").json()
    assert extra["pod_views"][0]["node"] not in nodes.values()
    waiting = client.get("/api/v1/workloads/team-a/one-too-many").json()
    assert waiting["state"] == "Pending"
    assert waiting["message"].startswith(
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )


def _restart(harness: ServiceHarness) -> None:
    harness.restart()


def _new_queue(harness: ServiceHarness) -> None:
    put = harness.client("admin").put("/api/v1/queues", json=queue_doc("team-z", 2))
    assert put.status_code in (200, 201), put.text


@pytest.mark.parametrize(
    "retell",
    [pytest.param(_restart, id="restart"), pytest.param(_new_queue, id="a-queue-added")],
)
def test_running_replicas_keep_their_queue_when_the_core_is_told_again(
    tmp_path: Path, retell: Callable[[ServiceHarness], None]
) -> None:
    # Bug (2026-12-02): replicas told again to a new core (a restart, or a rebuild for a
    # changed queue) came back as bare pods in queue 'default', not their tenant's queue, so a
    # later equal-priority pod of the tenant could preempt them.
    harness = make_harness(tmp_path, nodes=gpu_nodes(3, 4))
    client = harness.client("team-a")
    client.post(
        "/api/v1/workloads", content=as_yaml(anti_affine("Deployment", "web", 2)), headers=YAML
    )
    harness.advance(1)
    before = {k: r.workload.queue for k, r in harness.plane.core.running.items()}
    assert set(before.values()) == {"team-a"}
    retell(harness)
    after = {k: r.workload.queue for k, r in harness.plane.core.running.items()}
    assert after == before
