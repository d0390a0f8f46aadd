"""The fake Kubernetes API server, driven through the official ``kubernetes`` python client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from gpufleet.kube_client.api import ApiError as KubeApiError
from gpufleet.kube_client.api import KubeApi
from gpufleet.kube_client.writer import ObjectWriter
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.fake_nodes import register_fake_node
from tests.fakes.kube_api import ApiError, FakeApiServer
from tests.fakes.kube_api.patch import json_patch, merge_patch, strategic_merge_patch

Obj = dict[str, Any]
NS = "default"
GROUP, VERSION = "gpufleet.io", "v1alpha1"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[Any]:
    with api.api_client() as api_client:
        yield api_client


@pytest.fixture
def core(client: Any) -> Any:
    return kubernetes.client.CoreV1Api(client)


@pytest.fixture
def custom(client: Any) -> Any:
    return kubernetes.client.CustomObjectsApi(client)


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


def body_of(exc: ApiException) -> Obj:
    body: Obj = json.loads(exc.body)
    return body


def raw(response: Any) -> Obj:
    """The JSON of a ``_preload_content=False`` answer."""
    data: Obj = json.loads(response.data)
    return data


def events(
    func: Callable[..., Any], *args: Any, count: int, timeout: int = 5, **kwargs: Any
) -> list[tuple[str, str]]:
    """The first ``count`` (type, name) events of a watch (ends after ``timeout`` seconds)."""
    out: list[tuple[str, str]] = []
    w = watch.Watch()
    for event in w.stream(func, *args, timeout_seconds=timeout, **kwargs):
        out.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if len(out) >= count:
            w.stop()
            break
    return out


def bind(core: Any, name: str, node: str, annotations: dict[str, str] | None = None) -> Any:
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "annotations": annotations or {}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return core.create_namespaced_pod_binding(name, NS, binding, _preload_content=False)


# ---- client setup ------------------------------------------------------------------------


def test_kubeconfig_and_configuration(api: FakeApiServer, tmp_path: Path) -> None:
    path = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    from_file = kubernetes.config.new_client_from_config(config_file=str(path))
    names = [n.metadata.name for n in kubernetes.client.CoreV1Api(from_file).list_node().items]
    assert names == ["n1"]
    assert api.url.startswith("http://127.0.0.1:")
    assert api.configuration().host == api.url


def test_unknown_paths_are_404(core: Any, custom: Any) -> None:
    with pytest.raises(ApiException) as exc:
        custom.list_namespaced_custom_object(GROUP, VERSION, NS, "gpujobs")
    assert exc.value.status == 404
    assert body_of(exc.value)["reason"] == "NotFound"


# ---- CRUD --------------------------------------------------------------------------------

CRUD_CASES = [
    ("CoreV1Api", "node", False, {"metadata": {"name": "x"}, "status": {"capacity": {"cpu": "8"}}}),
    ("CoreV1Api", "namespaced_pod", True, pod("x")),
    ("CoreV1Api", "namespace", False, {"metadata": {"name": "x"}}),
    (
        "CoreV1Api",
        "namespaced_event",
        True,
        {"metadata": {"name": "x"}, "involvedObject": {"kind": "Pod", "name": "p"}, "count": 1},
    ),
    ("CoreV1Api", "namespaced_resource_quota", True, {"metadata": {"name": "x"}}),
    ("CoreV1Api", "namespaced_config_map", True, {"metadata": {"name": "x"}, "data": {"a": "b"}}),
    (
        "EventsV1Api",
        "namespaced_event",
        True,
        {"metadata": {"name": "x"}, "eventTime": "2024-01-01T00:00:00.000000Z", "reason": "R"},
    ),
    ("SchedulingV1Api", "priority_class", False, {"metadata": {"name": "x"}, "value": 100}),
    (
        "PolicyV1Api",
        "namespaced_pod_disruption_budget",
        True,
        {"metadata": {"name": "x"}, "spec": {"minAvailable": 1, "selector": {}}},
    ),
    ("CoordinationV1Api", "namespaced_lease", True, {"metadata": {"name": "x"}, "spec": {}}),
]


@pytest.mark.parametrize(
    ("api_class", "suffix", "namespaced", "body"),
    CRUD_CASES,
    ids=[f"{c[0]}.{c[1]}" for c in CRUD_CASES],
)
def test_crud(client: Any, api_class: str, suffix: str, namespaced: bool, body: Obj) -> None:
    group_api = getattr(kubernetes.client, api_class)(client)
    ns_args: tuple[str, ...] = (NS,) if namespaced else ()

    def call(verb: str, *args: Any, **kwargs: Any) -> Any:
        info = "_with_http_info" if kwargs.pop("_with_http_info", False) else ""
        return getattr(group_api, f"{verb}_{suffix}{info}")(*args, **kwargs)

    created, code, _ = call("create", *ns_args, body, _with_http_info=True)
    assert code == 201
    assert created.metadata.resource_version.isdigit()
    assert created.metadata.uid
    assert created.metadata.creation_timestamp
    with pytest.raises(ApiException) as exc:
        call("create", *ns_args, body)
    assert exc.value.status == 409
    assert body_of(exc.value)["reason"] == "AlreadyExists"

    assert call("read", "x", *ns_args).metadata.uid == created.metadata.uid
    listing = raw(call("list", *ns_args, _preload_content=False))
    assert listing["kind"].endswith("List")
    assert listing["metadata"]["resourceVersion"] == created.metadata.resource_version
    [item] = listing["items"]
    assert item["metadata"]["name"] == "x"
    assert item["kind"]
    assert item["apiVersion"]

    replaced = call("replace", "x", *ns_args, {**body, "metadata": {"name": "x"}})
    assert int(replaced.metadata.resource_version) >= int(created.metadata.resource_version)
    call("delete", "x", *ns_args)
    for verb in ("read", "delete"):
        with pytest.raises(ApiException) as exc:
            call(verb, "x", *ns_args)
        assert exc.value.status == 404
        assert body_of(exc.value)["reason"] == "NotFound"


def test_resource_versions_generation_and_defaults(core: Any) -> None:
    first = core.create_namespaced_pod(NS, pod("a", priorityClassName="none"))
    assert first.status.phase == "Pending"
    assert first.spec.scheduler_name == "default-scheduler"
    assert first.metadata.generation == 1
    labelled = core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"k": "v"}}})
    assert int(labelled.metadata.resource_version) > int(first.metadata.resource_version)
    assert labelled.metadata.generation == 1
    respec = core.patch_namespaced_pod("a", NS, {"spec": {"activeDeadlineSeconds": 5}})
    assert respec.metadata.generation == 2
    same = core.patch_namespaced_pod("a", NS, {"spec": {"activeDeadlineSeconds": 5}})
    assert same.metadata.resource_version == respec.metadata.resource_version


def test_priority_class_sets_pod_priority(api: FakeApiServer, core: Any) -> None:
    scheduling = kubernetes.client.SchedulingV1Api(core.api_client)
    scheduling.create_priority_class({"metadata": {"name": "high"}, "value": 1000})
    created = core.create_namespaced_pod(NS, pod("p", priorityClassName="high"))
    assert created.spec.priority == 1000


# ---- selectors ---------------------------------------------------------------------------

SELECTOR_CASES = [
    ("app=web", None, ["a", "b"]),
    ("app==web", None, ["a", "b"]),
    ("app!=web", None, ["c", "d"]),
    ("app in (web,db)", None, ["a", "b", "c"]),
    ("app notin (web)", None, ["c", "d"]),
    ("tier", None, ["a", "c"]),
    ("!tier", None, ["b", "d"]),
    ("app=web,tier=front", None, ["a"]),
    (None, "spec.nodeName=n1", ["a", "c"]),
    (None, "spec.nodeName=", ["b", "d"]),
    (None, "spec.nodeName!=n1", ["b", "d"]),
    (None, "status.phase==Running", ["a"]),
    (None, "spec.schedulerName=gpufleet", ["b"]),
    (None, "metadata.name=c", ["c"]),
    ("app=web", "spec.nodeName=n1,status.phase=Running", ["a"]),
]


@pytest.fixture
def labelled_pods(api: FakeApiServer) -> None:
    specs: list[tuple[str, dict[str, str], Obj, str]] = [
        ("a", {"app": "web", "tier": "front"}, {"nodeName": "n1"}, "Running"),
        ("b", {"app": "web"}, {"schedulerName": "gpufleet"}, "Pending"),
        ("c", {"app": "db", "tier": "back"}, {"nodeName": "n1"}, "Pending"),
        ("d", {}, {}, "Pending"),
    ]
    for name, labels, spec, phase in specs:
        obj = pod(name, labels, **spec)
        obj["status"] = {"phase": phase}
        api.create(obj)
    elsewhere = pod("e", {"app": "web"})
    elsewhere["metadata"]["namespace"] = "other"
    api.create(elsewhere)


@pytest.mark.usefixtures("labelled_pods")
@pytest.mark.parametrize(
    ("label_selector", "field_selector", "expected"),
    SELECTOR_CASES,
    ids=[f"{c[0]}|{c[1]}" for c in SELECTOR_CASES],
)
def test_list_selectors(
    core: Any, label_selector: str | None, field_selector: str | None, expected: list[str]
) -> None:
    kwargs = {
        k: v
        for k, v in (("label_selector", label_selector), ("field_selector", field_selector))
        if v
    }
    names = [p.metadata.name for p in core.list_namespaced_pod(NS, **kwargs).items]
    assert names == expected


@pytest.mark.usefixtures("labelled_pods")
def test_list_all_namespaces_and_bad_field(core: Any) -> None:
    everywhere = core.list_pod_for_all_namespaces(label_selector="app=web")
    assert sorted(p.metadata.name for p in everywhere.items) == ["a", "b", "e"]
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS, field_selector="spec.hostname=x")
    assert exc.value.status == 400


# ---- watch -------------------------------------------------------------------------------


def test_watch_from_resource_version_in_order(api: FakeApiServer, core: Any) -> None:
    core.create_namespaced_pod(NS, pod("before"))
    since = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod("p"))
    core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("p", NS)
    seen = events(core.list_namespaced_pod, NS, resource_version=since, count=3)
    assert seen == [("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p")]


@pytest.mark.parametrize("resource_version", [None, "0"], ids=["absent", "zero"])
def test_watch_without_resource_version_lists_first(
    api: FakeApiServer, core: Any, resource_version: str | None
) -> None:
    for name in ("a", "b"):
        api.create(pod(name))
    kwargs: dict[str, Any] = {"resource_version": resource_version} if resource_version else {}
    got: list[tuple[str, str]] = []

    def run() -> None:
        got.extend(events(core.list_pod_for_all_namespaces, count=3, **kwargs))

    thread = threading.Thread(target=run)
    thread.start()
    api.wait_for_request("GET", "/api/v1/pods", timeout=5)
    api.create(pod("c"))  # whether it lands before or after the watch opens, it is ADDED
    thread.join(timeout=5)
    assert got == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def test_watch_selector_sees_objects_leave_and_enter(api: FakeApiServer, core: Any) -> None:
    since = core.list_namespaced_pod(NS).metadata.resource_version
    api.create(pod("p", {"role": "gpu"}))
    api.create(pod("q", {"role": "cpu"}))
    core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"role": "cpu"}}})
    core.patch_namespaced_pod("q", NS, {"metadata": {"labels": {"role": "gpu"}}})
    seen = events(
        core.list_namespaced_pod, NS, resource_version=since, label_selector="role=gpu", count=3
    )
    assert seen == [("ADDED", "p"), ("DELETED", "p"), ("ADDED", "q")]


def test_direct_store_writes_are_watched(api: FakeApiServer, core: Any) -> None:
    since = core.list_node().metadata.resource_version
    node = api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    node["status"] = {"allocatable": {"nvidia.com/gpu": "8"}}
    api.update(node)
    api.delete("v1", "Node", "n")
    assert api.get("v1", "Node", "n") is None
    seen = events(core.list_node, resource_version=since, count=3)
    assert seen == [("ADDED", "n"), ("MODIFIED", "n"), ("DELETED", "n")]


def test_watch_after_compact_raises_410(api: FakeApiServer, core: Any) -> None:
    since = core.list_namespaced_pod(NS).metadata.resource_version
    api.create(pod("p"))
    api.compact()
    # With timeout_seconds the client does not retry: the ERROR event raises at once.
    with pytest.raises(ApiException) as exc:
        events(core.list_namespaced_pod, NS, resource_version=since, count=1)
    assert exc.value.status == 410
    assert exc.value.reason.startswith("Expired: too old resource version")
    watches = [r for r in api.requests if r == ("GET", f"/api/v1/namespaces/{NS}/pods")]
    assert len(watches) == 2  # the list, then one watch


def test_watch_after_compact_without_timeout_retries_once_then_raises(
    api: FakeApiServer, core: Any
) -> None:
    since = core.list_namespaced_pod(NS).metadata.resource_version
    api.create(pod("p"))
    api.compact()
    w = watch.Watch()
    with pytest.raises(ApiException) as exc:
        for _ in w.stream(core.list_namespaced_pod, NS, resource_version=since):
            pass
    assert exc.value.status == 410
    watches = [r for r in api.requests if r == ("GET", f"/api/v1/namespaces/{NS}/pods")]
    assert len(watches) == 3  # the list, the watch and the client's one retry


def test_watch_after_compact_from_current_version_is_fine(api: FakeApiServer, core: Any) -> None:
    api.create(pod("p"))
    api.compact()
    since = core.list_namespaced_pod(NS).metadata.resource_version
    api.create(pod("q"))
    assert events(core.list_namespaced_pod, NS, resource_version=since, count=1) == [("ADDED", "q")]


def test_timeout_seconds_ends_the_stream(core: Any) -> None:
    since = core.list_namespaced_pod(NS).metadata.resource_version
    started = time.monotonic()
    assert events(core.list_namespaced_pod, NS, resource_version=since, count=1, timeout=1) == []
    assert 0.9 <= time.monotonic() - started < 4


def test_close_watches_ends_streams(api: FakeApiServer, core: Any) -> None:
    since = core.list_namespaced_pod(NS).metadata.resource_version
    done = threading.Event()

    def run() -> None:
        events(core.list_namespaced_pod, NS, resource_version=since, count=1, timeout=60)
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    api.wait_for(lambda: api.store.watches_open > 0, timeout=5, what="the watch open")
    api.close_watches()
    assert done.wait(timeout=5)


def test_concurrent_watchers_see_the_same_sequence(api: FakeApiServer, core: Any) -> None:
    since = core.list_namespaced_pod(NS).metadata.resource_version
    results: list[list[tuple[str, str]]] = [[] for _ in range(4)]

    def run(slot: int) -> None:
        results[slot] = events(core.list_namespaced_pod, NS, resource_version=since, count=10)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    writers = [threading.Thread(target=lambda i=i: api.create(pod(f"p{i}"))) for i in range(10)]
    for thread in writers:
        thread.start()
    for thread in writers + threads:
        thread.join(timeout=10)
    assert len(results[0]) == 10
    assert {kind for kind, _ in results[0]} == {"ADDED"}
    assert all(r == results[0] for r in results)


# ---- pods: binding, graceful deletion, eviction -------------------------------------------


def test_binding(api: FakeApiServer, core: Any) -> None:
    core.create_namespaced_pod(NS, pod("p", {}, schedulerName="gpufleet"))
    response = bind(core, "p", "node-1", {"gpufleet.io/devices": "0,1"})
    assert response.status == 201
    assert raw(response)["status"] == "Success"
    bound = core.read_namespaced_pod("p", NS)
    assert bound.spec.node_name == "node-1"
    assert bound.metadata.annotations == {"gpufleet.io/devices": "0,1"}
    [scheduled] = [c for c in bound.status.conditions if c.type == "PodScheduled"]
    assert scheduled.status == "True"
    with pytest.raises(ApiException) as exc:
        bind(core, "p", "node-2")
    assert exc.value.status == 409
    assert "already assigned" in body_of(exc.value)["message"]


def test_binding_through_the_bindings_collection(core: Any) -> None:
    core.create_namespaced_pod(NS, pod("p"))
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n"}}
    response = core.create_namespaced_binding(NS, binding, _preload_content=False)
    assert response.status == 201
    assert core.read_namespaced_pod("p", NS).spec.node_name == "n"


def test_binding_answer_does_not_deserialize_as_v1_binding(core: Any) -> None:
    """The real server answers a Status, which the client cannot read as V1Binding."""
    core.create_namespaced_pod(NS, pod("p"))
    binding = kubernetes.client.V1Binding(
        metadata=kubernetes.client.V1ObjectMeta(name="p"),
        target=kubernetes.client.V1ObjectReference(kind="Node", name="n"),
    )
    with pytest.raises(ValueError, match="target"):
        core.create_namespaced_pod_binding("p", NS, binding)
    assert core.read_namespaced_pod("p", NS).spec.node_name == "n"


def test_binding_a_pod_being_deleted_is_409(core: Any) -> None:
    core.create_namespaced_pod(NS, pod("p", {}, nodeName="n"))
    core.delete_namespaced_pod("p", NS)
    with pytest.raises(ApiException) as exc:
        bind(core, "p", "m")
    assert exc.value.status == 409


GRACE_CASES = [
    ("bound-default-grace", "n", None, True),
    ("bound-grace-5", "n", 5, True),
    ("bound-grace-0", "n", 0, False),
    ("unbound", None, None, False),
]


@pytest.mark.parametrize(
    ("node", "grace", "kept"), [c[1:] for c in GRACE_CASES], ids=[c[0] for c in GRACE_CASES]
)
def test_pod_delete_grace(
    api: FakeApiServer, core: Any, node: str | None, grace: int | None, kept: bool
) -> None:
    core.create_namespaced_pod(NS, pod("p", {}, **({"nodeName": node} if node else {})))
    since = core.list_namespaced_pod(NS).metadata.resource_version
    kwargs = {"grace_period_seconds": grace} if grace is not None else {}
    answer = core.delete_namespaced_pod("p", NS, **kwargs)
    assert answer.metadata.name == "p"
    left = api.get("v1", "Pod", "p", NS)
    if not kept:
        assert left is None
        assert events(core.list_namespaced_pod, NS, resource_version=since, count=1) == [
            ("DELETED", "p")
        ]
        return
    assert left is not None
    assert left["metadata"]["deletionTimestamp"]
    assert left["metadata"]["deletionGracePeriodSeconds"] == (30 if grace is None else grace)
    core.delete_namespaced_pod("p", NS, grace_period_seconds=0)  # the kubelet's part
    assert api.get("v1", "Pod", "p", NS) is None
    seen = events(core.list_namespaced_pod, NS, resource_version=since, count=2)
    assert seen == [("MODIFIED", "p"), ("DELETED", "p")]


@pytest.mark.parametrize(
    ("kind", "api_version", "obj"),
    [
        pytest.param("Pod", "v1", pod("p"), id="pod"),
        pytest.param(
            "Deployment", "apps/v1",
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "p", "namespace": NS}, "spec": {"replicas": 1}},
            id="deployment",
        ),
    ],
)  # fmt: skip
def test_delete_with_a_uid_precondition_deletes_only_that_object(
    api: FakeApiServer, client: Any, kind: str, api_version: str, obj: Obj
) -> None:
    """As the API server: DeleteOptions.preconditions.uid of another object is a 409 that
    deletes nothing; the object's own UID deletes it."""
    writer = ObjectWriter(KubeApi(client))
    uid = writer.create(obj)["metadata"]["uid"]
    with pytest.raises(KubeApiError) as refused:
        writer.delete(kind, NS, "p", uid="not-" + uid)
    assert refused.value.status == 409
    assert "Precondition failed: uid" in refused.value.message
    assert api.get(api_version, kind, "p", NS) is not None
    assert writer.delete(kind, NS, "p", uid=uid)
    assert api.get(api_version, kind, "p", NS) is None


EVICTION_CASES = [
    ("no-pdb", None, 201),
    ("min-available-ok", {"minAvailable": 1}, 201),
    ("min-available-blocks", {"minAvailable": 2}, 429),
    ("min-available-percent-blocks", {"minAvailable": "100%"}, 429),
    ("max-unavailable-ok", {"maxUnavailable": 1}, 201),
    ("max-unavailable-blocks", {"maxUnavailable": 0}, 429),
    ("other-selector", {"minAvailable": 2, "selector": {"matchLabels": {"app": "other"}}}, 201),
]


@pytest.mark.parametrize(
    ("pdb_spec", "expected"), [c[1:] for c in EVICTION_CASES], ids=[c[0] for c in EVICTION_CASES]
)
def test_eviction(api: FakeApiServer, core: Any, pdb_spec: Obj | None, expected: int) -> None:
    for name in ("a", "b"):
        obj = pod(name, {"app": "train"}, nodeName="n")
        obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        api.create(obj)
    if pdb_spec is not None:
        spec = {"selector": {"matchLabels": {"app": "train"}}, **pdb_spec}
        kubernetes.client.PolicyV1Api(core.api_client).create_namespaced_pod_disruption_budget(
            NS, {"metadata": {"name": "budget"}, "spec": spec}
        )
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}}
    if expected == 429:
        with pytest.raises(ApiException) as exc:
            core.create_namespaced_pod_eviction("a", NS, eviction)
        assert exc.value.status == 429
        body = body_of(exc.value)
        assert body["reason"] == "TooManyRequests"
        assert "disruption budget" in body["message"]
        assert not api.get("v1", "Pod", "a", NS)["metadata"].get("deletionTimestamp")  # type: ignore[index]
    else:
        _, code, _ = core.create_namespaced_pod_eviction_with_http_info("a", NS, eviction)
        assert code == 201
        evicted = api.get("v1", "Pod", "a", NS)
        assert evicted is not None
        assert evicted["metadata"]["deletionTimestamp"]


def test_evictions_count_pods_being_deleted_as_gone(api: FakeApiServer, core: Any) -> None:
    for name in ("a", "b", "c"):
        obj = pod(name, {"app": "t"}, nodeName="n")
        obj["status"] = {"phase": "Running"}
        api.create(obj)
    policy = kubernetes.client.PolicyV1Api(core.api_client)
    spec = {"selector": {"matchLabels": {"app": "t"}}, "maxUnavailable": 1}
    policy.create_namespaced_pod_disruption_budget(NS, {"metadata": {"name": "b"}, "spec": spec})
    core.create_namespaced_pod_eviction("a", NS, {"metadata": {"name": "a"}})
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("b", NS, {"metadata": {"name": "b"}})
    assert exc.value.status == 429


# ---- status subresource and patches ------------------------------------------------------


def test_pod_status_only_through_status(api: FakeApiServer, core: Any) -> None:
    core.create_namespaced_pod(NS, pod("p"))
    current = raw(core.read_namespaced_pod("p", NS, _preload_content=False))
    current["status"] = {"phase": "Running"}
    current["metadata"]["labels"] = {"changed": "yes"}
    core.replace_namespaced_pod("p", NS, current)
    after = core.read_namespaced_pod("p", NS)
    assert after.status.phase == "Pending"
    assert after.metadata.labels == {"changed": "yes"}

    current = raw(core.read_namespaced_pod("p", NS, _preload_content=False))
    current["status"] = {"phase": "Running"}
    current["metadata"]["labels"] = {"changed": "again"}
    core.replace_namespaced_pod_status("p", NS, current)
    after = core.read_namespaced_pod("p", NS)
    assert after.status.phase == "Running"
    assert after.metadata.labels == {"changed": "yes"}


def test_strategic_merge_patch_of_conditions_by_type(api: FakeApiServer, core: Any) -> None:
    core.create_namespaced_pod(NS, pod("p"))
    bind(core, "p", "n")
    core.patch_namespaced_pod_status(
        "p", NS, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    core.patch_namespaced_pod_status(
        "p", NS, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    got = {c.type: c.status for c in core.read_namespaced_pod("p", NS).status.conditions}
    assert got == {"PodScheduled": "True", "Ready": "True"}
    patch_request = [r for r in api.requests if r[0] == "PATCH"]
    assert patch_request == [("PATCH", f"/api/v1/namespaces/{NS}/pods/p/status")] * 2


def test_strategic_merge_patch_of_containers_by_name(core: Any) -> None:
    body = pod("p")
    body["spec"]["containers"].append({"name": "side", "image": "a"})
    core.create_namespaced_pod(NS, body)
    core.patch_namespaced_pod("p", NS, {"spec": {"containers": [{"name": "side", "image": "b"}]}})
    containers = core.read_namespaced_pod("p", NS).spec.containers
    assert [(c.name, c.image) for c in containers] == [("main", "busybox"), ("side", "b")]


def test_merge_patch_replaces_lists(client: Any, core: Any) -> None:
    core.create_namespaced_pod(NS, pod("p", {"a": "1", "b": "2"}))
    core.patch_namespaced_pod_status(
        "p", NS, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    patch = {
        "metadata": {"labels": {"a": None}},
        "status": {"conditions": [{"type": "Initialized", "status": "True"}]},
    }
    client.call_api(
        f"/api/v1/namespaces/{NS}/pods/p/status",
        "PATCH",
        header_params={"Content-Type": "application/merge-patch+json"},
        body=patch,
        auth_settings=["BearerToken"],
    )
    after = core.read_namespaced_pod("p", NS)
    assert [c.type for c in after.status.conditions] == ["Initialized"]
    assert after.metadata.labels == {"a": "1", "b": "2"}  # /status ignores metadata


def test_json_patch(core: Any) -> None:
    core.create_namespaced_pod(NS, pod("p", {"a": "1"}))
    operations = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "3"},
    ]
    patched = core.patch_namespaced_pod("p", NS, operations)
    assert patched.metadata.labels == {"a": "3", "b/c": "2"}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, [{"op": "test", "path": "/metadata/name", "value": "x"}])
    assert exc.value.status == 422


def test_patch_with_stale_resource_version_conflicts(core: Any) -> None:
    created = core.create_namespaced_pod(NS, pod("p"))
    core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"x": "1"}}})
    stale = {"metadata": {"resourceVersion": created.metadata.resource_version, "labels": {}}}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, stale)
    assert exc.value.status == 409


PATCH_UNIT_CASES = [
    ("merge-null-removes", merge_patch, {"a": 1, "b": 2}, {"a": None}, {"b": 2}),
    ("merge-nested", merge_patch, {"a": {"x": 1}}, {"a": {"y": 2}}, {"a": {"x": 1, "y": 2}}),
    ("merge-list-replaces", merge_patch, {"l": [1, 2]}, {"l": [3]}, {"l": [3]}),
    (
        "smp-owner-refs-by-uid",
        strategic_merge_patch,
        {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}},
        {"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}},
        {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]}},
    ),
    (
        "smp-delete-directive",
        strategic_merge_patch,
        {"status": {"conditions": [{"type": "A"}, {"type": "B"}]}},
        {"status": {"conditions": [{"type": "A", "$patch": "delete"}]}},
        {"status": {"conditions": [{"type": "B"}]}},
    ),
    (
        "json-remove-and-append",
        json_patch,
        {"l": [1, 2], "k": 1},
        [{"op": "remove", "path": "/k"}, {"op": "add", "path": "/l/-", "value": 3}],
        {"l": [1, 2, 3]},
    ),
]


@pytest.mark.parametrize(
    ("apply", "target", "patch", "expected"),
    [c[1:] for c in PATCH_UNIT_CASES],
    ids=[c[0] for c in PATCH_UNIT_CASES],
)
def test_patch_functions(
    apply: Callable[[Any, Any], Any], target: Obj, patch: Any, expected: Obj
) -> None:
    assert apply(target, patch) == expected


# ---- leases ------------------------------------------------------------------------------


def test_lease_optimistic_concurrency(core: Any) -> None:
    leases = kubernetes.client.CoordinationV1Api(core.api_client)
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15}
    created = leases.create_namespaced_lease(NS, {"metadata": {"name": "leader"}, "spec": spec})
    mine = raw(leases.read_namespaced_lease("leader", NS, _preload_content=False))
    theirs = dict(mine, spec={**spec, "holderIdentity": "b"})
    leases.replace_namespaced_lease("leader", NS, theirs)
    mine["spec"]["holderIdentity"] = "c"
    with pytest.raises(ApiException) as exc:
        leases.replace_namespaced_lease("leader", NS, mine)
    assert exc.value.status == 409
    assert body_of(exc.value)["reason"] == "Conflict"
    assert leases.read_namespaced_lease("leader", NS).spec.holder_identity == "b"
    del mine["metadata"]["resourceVersion"]
    forced = leases.replace_namespaced_lease("leader", NS, mine)
    assert forced.spec.holder_identity == "c"
    assert int(forced.metadata.resource_version) > int(created.metadata.resource_version)


# ---- CRDs and custom objects -------------------------------------------------------------


def crd(scope: str, plural: str, kind: str, status: bool = True) -> Obj:
    version: Obj = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "spec": {"type": "object", "properties": {"gpus": {"type": "integer"}}}
                },
            }
        },
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "plural": plural,
                "singular": plural[:-1],
                "kind": kind,
                "listKind": f"{kind}List",
            },
            "versions": [version],
        },
    }


def test_crd_registration_and_namespaced_custom_objects(
    api: FakeApiServer, client: Any, custom: Any
) -> None:
    extensions = kubernetes.client.ApiextensionsV1Api(client)
    created = extensions.create_custom_resource_definition(crd("Namespaced", "gpujobs", "GpuJob"))
    assert {c.type for c in created.status.conditions} == {"Established", "NamesAccepted"}
    since = custom.list_namespaced_custom_object(GROUP, VERSION, NS, "gpujobs")["metadata"][
        "resourceVersion"
    ]
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GpuJob",
        "metadata": {"name": "j", "labels": {"team": "a"}},
        "spec": {"gpus": 2, "anything": "goes"},
        "status": {"phase": "Ignored"},
    }
    made = custom.create_namespaced_custom_object(GROUP, VERSION, NS, "gpujobs", job)
    assert "status" not in made
    assert made["metadata"]["generation"] == 1
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "gpujobs", job)
    assert exc.value.status == 409

    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "gpujobs", "j", {"spec": {"gpus": 4}, "status": {"phase": "No"}}
    )
    assert patched["spec"] == {"gpus": 4, "anything": "goes"}
    assert "status" not in patched
    assert patched["metadata"]["generation"] == 2
    status = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, "gpujobs", "j", {"status": {"phase": "Running"}, "spec": {"gpus": 9}}
    )
    assert status["status"] == {"phase": "Running"}
    assert status["spec"]["gpus"] == 4
    assert status["metadata"]["generation"] == 2

    current = custom.get_namespaced_custom_object(GROUP, VERSION, NS, "gpujobs", "j")
    current["status"] = {"phase": "Done"}
    replaced = custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, NS, "gpujobs", "j", current
    )
    assert replaced["status"] == {"phase": "Done"}

    listed = custom.list_namespaced_custom_object(
        GROUP, VERSION, NS, "gpujobs", label_selector="team=a"
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == ["j"]
    assert listed["kind"] == "GpuJobList"
    assert listed["items"][0]["kind"] == "GpuJob"
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "gpujobs", "j")
    seen = events(
        custom.list_cluster_custom_object,
        GROUP,
        VERSION,
        "gpujobs",
        resource_version=since,
        count=5,
    )
    assert [kind for kind, _ in seen] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    patch_types = [r for r in api.requests if r[0] == "PATCH"]
    assert patch_types[-1] == ("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/gpujobs/j/status")


def test_cluster_scoped_custom_objects_without_status_subresource(client: Any, custom: Any) -> None:
    extensions = kubernetes.client.ApiextensionsV1Api(client)
    extensions.create_custom_resource_definition(
        crd("Cluster", "gpupools", "GpuPool", status=False)
    )
    pool = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GpuPool", "metadata": {"name": "p"}}
    custom.create_cluster_custom_object(GROUP, VERSION, "gpupools", {**pool, "status": {"ok": 1}})
    assert custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", "p")["status"] == {"ok": 1}
    with pytest.raises(ApiException) as exc:
        custom.patch_cluster_custom_object_status(GROUP, VERSION, "gpupools", "p", {"status": {}})
    assert exc.value.status == 404
    extensions.delete_custom_resource_definition(f"gpupools.{GROUP}")
    with pytest.raises(ApiException) as exc:
        custom.list_cluster_custom_object(GROUP, VERSION, "gpupools")
    assert exc.value.status == 404


def test_cluster_custom_object_status_patch(client: Any, custom: Any) -> None:
    extensions = kubernetes.client.ApiextensionsV1Api(client)
    extensions.create_custom_resource_definition(crd("Cluster", "gpupools", "GpuPool"))
    pool = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GpuPool", "metadata": {"name": "p"}}
    custom.create_cluster_custom_object(GROUP, VERSION, "gpupools", pool)
    got = custom.patch_cluster_custom_object_status(
        GROUP, VERSION, "gpupools", "p", {"status": {"free": 3}}
    )
    assert got["status"] == {"free": 3}


# ---- events ------------------------------------------------------------------------------


def test_core_event_create_and_patch(core: Any) -> None:
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": NS},
        "reason": "Scheduled",
        "count": 1,
    }
    core.create_namespaced_event(NS, event)
    core.patch_namespaced_event("e", NS, {"count": 2, "lastTimestamp": "2024-01-01T00:00:00Z"})
    got = core.list_namespaced_event(NS, field_selector="involvedObject.name=p,reason=Scheduled")
    assert [(e.metadata.name, e.count) for e in got.items] == [("e", 2)]


# ---- fault injection ---------------------------------------------------------------------

FAULT_CASES = [
    ("500", 500, "InternalError"),
    ("429", 429, "TooManyRequests"),
    ("409", 409, "Conflict"),
]


@pytest.mark.parametrize(
    ("status", "reason"), [c[1:] for c in FAULT_CASES], ids=[c[0] for c in FAULT_CASES]
)
def test_fail_next_then_success(api: FakeApiServer, core: Any, status: int, reason: str) -> None:
    api.fail_next("POST", r"/pods$", status, times=2)
    api.fail_next("GET", r"/nodes", 503)
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            core.create_namespaced_pod(NS, pod("p"))
        assert exc.value.status == status
        assert body_of(exc.value)["reason"] == reason
    assert core.create_namespaced_pod(NS, pod("p")).metadata.name == "p"
    assert core.list_namespaced_pod(NS).items  # other methods and paths are not affected


def test_direct_update_conflict_and_missing(api: FakeApiServer) -> None:
    created = api.create(pod("p"))
    api.update(dict(created, spec={**created["spec"], "nodeName": "n"}))
    with pytest.raises(ApiError) as exc:
        api.update(created)
    assert exc.value.code == 409
    with pytest.raises(ApiError):
        api.delete("v1", "Pod", "absent", NS)
    assert [p["metadata"]["name"] for p in api.list("v1", "Pod")] == ["p"]


@pytest.mark.parametrize(
    ("taints", "left"),
    [
        ([], []),
        ([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}], []),
        (
            [
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            ],
            [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        ),
    ],
    ids=["untainted", "admission-not-ready", "keeps-other-taints"],
)
def test_a_fake_node_is_left_ready_and_without_the_condition_taints(
    taints: list[dict[str, str]], left: list[dict[str, str]]
) -> None:
    """A stock API server's TaintNodesByCondition plugin taints every new Node not-ready;
    a fake node is created as if it had (the taints given) and must end schedulable."""
    with FakeApiServer() as server:
        core = kubernetes.client.CoreV1Api(server.api_client())
        name = register_fake_node(core, ko.gpu_node("gpu-1", taints=taints))
        node = server.get("v1", "Node", name)
        assert node is not None
        assert node["spec"]["taints"] == left
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert {"type": "Ready", "status": "True"} in [
            {k: c[k] for k in ("type", "status")} for c in node["status"]["conditions"]
        ]


# ---- the scale subresource of the apps kinds ---------------------------------------------


@pytest.mark.parametrize("kind", ["deployments", "statefulsets", "replicasets"])
def test_scale_subresource_reads_and_sets_replicas(
    api: FakeApiServer, client: Any, kind: str
) -> None:
    singular = {"deployments": "Deployment", "statefulsets": "StatefulSet"}.get(kind, "ReplicaSet")
    api.create(
        {
            "apiVersion": "apps/v1",
            "kind": singular,
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    path = f"/apis/apps/v1/namespaces/{NS}/{kind}/web/scale"

    def call(method: str, body: Any = None, content_type: str = "application/json") -> Any:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        response = client.call_api(
            path, method, header_params=headers, body=body, _return_http_data_only=True,
            _preload_content=False,
        )  # fmt: skip
        return json.loads(response.data)

    scale = call("GET")
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert (scale["spec"]["replicas"], scale["status"]["selector"]) == (3, "app=web")
    patched = call("PATCH", {"spec": {"replicas": 0}}, "application/merge-patch+json")
    assert patched["spec"]["replicas"] == 0
    assert api.get("apps/v1", singular, "web", NS)["spec"]["replicas"] == 0  # type: ignore[index]
    assert call("PUT", {**scale, "spec": {"replicas": 2}})["spec"]["replicas"] == 2
    with pytest.raises(ApiException) as refused:
        call("PATCH", {"spec": {"replicas": -1}}, "application/merge-patch+json")
    assert refused.value.status == 422
