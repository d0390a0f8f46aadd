"""Pods read once per shape (backends/kube/readings.py): a replica's reading from its template's
is the reading of the replica itself, down to its name, labels and workload."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.backends.kube.readings import PLACEHOLDER, PodReadings, shape_of
from gpufleet.io.errors import InputError
from gpufleet.io.live_objects import LiveCatalog, timed_pod
from gpufleet.model.workload import TimedPod, Workload
from gpufleet.testing import kube_objects as ko

Obj = dict[str, Any]


def api_pod(name: str, **fields: Any) -> Obj:
    """A pod as the API server returns it: what the server adds differs from pod to pod."""
    pod = ko.gpu_pod(name, **fields)
    suffix = uuid.uuid4().hex[:5]
    pod["metadata"] |= {
        "uid": str(uuid.uuid4()),
        "resourceVersion": str(uuid.uuid4().int % 10**6),
        "creationTimestamp": "2026-11-24T10:00:00Z",
        "managedFields": [{"manager": "kubectl", "time": "2026-11-24T10:00:00Z"}],
    }
    pod["spec"]["volumes"] = [{"name": f"kube-api-access-{suffix}", "projected": {}}]
    for container in pod["spec"]["containers"]:
        container["volumeMounts"] = [{"name": f"kube-api-access-{suffix}", "mountPath": "/x"}]
    pod["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    return pod


def same_pod_reading(a: TimedPod, b: TimedPod) -> None:
    assert a == b
    # Fields a Pod's equality leaves out.
    assert (a.pod.name, a.pod.key, dict(a.pod.labels), dict(a.pod.annotations)) == (
        b.pod.name,
        b.pod.key,
        dict(b.pod.labels),
        dict(b.pod.annotations),
    )
    assert a.pod.signature == b.pod.signature


def same_workload(a: Workload, b: Workload) -> None:
    assert a == b
    assert (a.name, a.key, dict(a.labels)) == (b.name, b.key, dict(b.labels))
    for x, y in zip(a.pods, b.pods, strict=True):
        assert (x.name, x.key, dict(x.labels), dict(x.annotations), x.priority) == (
            y.name,
            y.key,
            dict(y.labels),
            dict(y.annotations),
            y.priority,
        )


@pytest.mark.parametrize(
    ("path", "present"),
    [
        (("metadata", "name"), PLACEHOLDER),
        (("metadata", "uid"), None),
        (("metadata", "resourceVersion"), None),
        (("metadata", "managedFields"), None),
        (("status",), None),
        (("spec", "volumes"), None),
        (("spec", "containers", 0, "volumeMounts"), None),
        (("metadata", "namespace"), "default"),
        (("spec", "schedulerName"), "gpufleet"),
    ],
    ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else str(v),
)
def test_a_shape_keeps_what_readers_read_and_nothing_that_differs_per_replica(
    path: tuple[str | int, ...], present: object
) -> None:
    node: Any = shape_of(api_pod("p-1"))
    for step in path[:-1]:
        node = node[step]
    assert node.get(path[-1]) == present


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.integers(0, 8),
    cpu=st.sampled_from(["1", "500m", "2.5"]),
    labels=st.dictionaries(
        st.sampled_from(["app", "team", "tier"]), st.sampled_from(["a", "b"]), max_size=2
    ),
    priority_class=st.sampled_from([None, "high", "low"]),
    replicas=st.integers(1, 5),
    bound=st.booleans(),
)
def test_replicas_read_from_one_reading_read_as_themselves(
    gpus: int,
    cpu: str,
    labels: dict[str, str],
    priority_class: str | None,
    replicas: int,
    bound: bool,
) -> None:
    catalog = LiveCatalog(
        priority_classes=[ko.priority_class("high", 1000), ko.priority_class("low", 10)]
    )
    readings = PodReadings()
    for i in range(replicas):
        obj = api_pod(
            f"replica-{i}",
            gpus=gpus,
            cpu=cpu,
            labels=labels,
            priority_class=priority_class,
            node="node-1" if bound else None,
        )
        same_pod_reading(readings.timed_pod(obj), timed_pod(obj))
        same_workload(readings.workload(catalog, obj), catalog.workload([obj]))
    assert readings.misses == 1


def test_a_changed_pod_is_read_again() -> None:
    readings = PodReadings()
    obj = api_pod("p")
    assert readings.timed_pod(obj).pod.gpu.count == 1
    changed = copy.deepcopy(obj)
    changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    changed["metadata"]["resourceVersion"] = "changed"
    assert readings.timed_pod(changed).pod.gpu.count == 2


def test_a_pod_that_does_not_read_is_told_by_its_own_name() -> None:
    readings = PodReadings()
    obj = api_pod("broken-7")
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(InputError) as error:
        readings.timed_pod(obj)
    assert "broken-7" in str(error.value)
    assert PLACEHOLDER not in str(error.value)


def test_a_new_catalog_makes_workloads_anew() -> None:
    """Queues and priority classes decide a workload: a reading is kept per catalog."""
    obj = api_pod("p", priority_class="high")
    readings = PodReadings()
    before = readings.workload(LiveCatalog(priority_classes=[ko.priority_class("high", 5)]), obj)
    after = readings.workload(LiveCatalog(priority_classes=[ko.priority_class("high", 9)]), obj)
    assert (before.priority, after.priority) == (5, 9)


def test_readings_kept_are_bounded() -> None:
    readings = PodReadings(max_shapes=3)
    for gpus in range(8):
        readings.timed_pod(api_pod(f"p{gpus}", gpus=gpus))
    assert len(readings._pods) <= 3


def test_the_shapes_of_replicas_make_the_target_their_pods_make() -> None:
    """A core's target workload from one pod per shape and its count is the target of every
    pod read one by one."""
    from gpufleet.control.factory import target_of

    objs = [api_pod(f"a{i}", gpus=1) for i in range(7)]
    objs += [api_pod(f"b{i}", gpus=4, cpu="8") for i in range(3)]
    objs += [api_pod("c", gpus=0, cpu="500m")]
    readings = PodReadings()
    pods, counts, broken = readings.shapes(objs)
    assert (len(pods), sorted(counts), broken) == (3, [1.0, 3.0, 7.0], [])
    assert target_of(pods, counts) == target_of([timed_pod(o).pod for o in objs])
