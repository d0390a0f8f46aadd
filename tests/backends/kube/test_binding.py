"""The Kubernetes backend against the fake API server: binding, devices, conditions, events."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION, VISIBLE_DEVICES_ANNOTATION
from gpufleet.io.kube.binding_signature import (
    BINDING_SIGNATURE_ANNOTATION,
    BindingKey,
    binding_signature_problem,
)
from gpufleet.kube_client.api import PODS
from gpufleet.metrics.endpoint import HealthServer
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.agent_builders import TEST_BINDING_KEY
from tests.backends.kube.harness import harness


def test_binds_a_gpu_pod_through_the_binding_subresource_with_its_devices() -> None:
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_pod("train", gpus=2)) as h:
        h.until(lambda: h.node_of("train") == "n1", what="train bound")
        pod = h.pod("train")
        annotations = pod["metadata"]["annotations"]
        assert len(annotations[GPU_INDEX_ANNOTATION].split(",")) == 2
        assert annotations[VISIBLE_DEVICES_ANNOTATION] == annotations[GPU_INDEX_ANNOTATION]
        assert ("POST", "/api/v1/namespaces/default/pods/train/binding") in h.server.requests
        h.settle()
        assert [e["involvedObject"]["name"] for e in h.events("Scheduled")] == ["train"]
        exposed = h.scheduler.metrics.exposition().decode()
        assert "gpufleet_bind_calls_succeeded_total 1.0" in exposed
        assert "gpufleet_bind_calls_failed_total 0.0" in exposed


@pytest.mark.parametrize("new_core", [False, True], ids=["watch-first", "watch-and-new-core-first"])
def test_a_bind_seen_in_the_watch_before_its_answer_still_gets_its_scheduled_event(
    new_core: bool,
) -> None:
    """A loaded scheduler can take a pod's watch event (bound, by us) before its bind's own
    answer, and a new core may be built meanwhile: the pod is still told ``Scheduled``, once
    (a gang's member bound without it on a real API server under load)."""
    answered = threading.Event()
    with harness(ko.gpu_node("n1", gpus=8)) as h:
        h.server.answer_late("POST", r"/pods/train/binding$", answered)
        h.server.create(ko.gpu_pod("train", gpus=2))

        def turn_until(check: Callable[[], bool], what: str) -> None:
            """Turn while the bind stays unanswered (``h.until`` waits for every answer)."""
            deadline = time.monotonic() + 10
            while not check():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                h.scheduler.turn()
                h.backend.wait(h.backend.clock.now() + 0.05)

        cached = h.backend.objects[PODS]
        turn_until(
            lambda: bool(cached.get("default/train", {}).get("spec", {}).get("nodeName")),
            "the pod's watch event (bound) before its bind's answer",
        )
        h.scheduler.turn()  # the bound pod reconciled while its bind is still unanswered
        if new_core:
            built = h.scheduler.cores_built
            h.server.create(ko.priority_class("another", 10))
            turn_until(lambda: h.scheduler.cores_built > built, "a new core")
        assert not answered.is_set()
        assert h.events("Scheduled") == []
        answered.set()
        h.settle()
        assert [e["involvedObject"]["name"] for e in h.events("Scheduled")] == ["train"]


@pytest.mark.parametrize("key", [TEST_BINDING_KEY, None], ids=["with-a-key", "without"])
def test_the_binding_carries_a_signature_of_the_pod_node_and_devices(
    key: BindingKey | None,
) -> None:
    """The signature goes with the devices in the Binding's own annotations (one write, which
    the API server copies onto the pod) and verifies for the pod's UID on its node."""
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_pod("train", gpus=2), binding_key=key) as h:
        h.until(lambda: h.node_of("train") == "n1", what="train bound")
        pod = h.pod("train")
        annotations = pod["metadata"]["annotations"]
        if key is None:
            assert BINDING_SIGNATURE_ANNOTATION not in annotations
            return
        uid = pod["metadata"]["uid"]
        assert binding_signature_problem(key, uid, "n1", annotations) == ""
        assert "does not verify" in binding_signature_problem(key, "other-uid", "n1", annotations)


def test_a_cpu_only_pod_is_bound_without_a_signature() -> None:
    pod = ko.gpu_pod("web", gpus=0)
    with harness(ko.gpu_node("n1", gpus=8), pod, binding_key=TEST_BINDING_KEY) as h:
        h.until(lambda: h.node_of("web") == "n1", what="web bound")
        assert BINDING_SIGNATURE_ANNOTATION not in (
            h.pod("web")["metadata"].get("annotations") or {}
        )


def test_pods_of_other_schedulers_are_left_alone_but_count_against_capacity() -> None:
    other = ko.gpu_pod("theirs", gpus=6, node="n1", scheduler="default-scheduler")
    waiting_for_them = ko.gpu_pod("not-ours", gpus=1, scheduler="default-scheduler")
    with harness(ko.gpu_node("n1", gpus=8), other, waiting_for_them) as h:
        h.server.create(ko.gpu_pod("fits", gpus=2))
        h.server.create(ko.gpu_pod("too-big", gpus=4))
        h.until(lambda: h.node_of("fits") == "n1", what="fits bound")
        h.settle()
        assert h.node_of("too-big") is None
        assert h.node_of("not-ours") is None
        devices = {h.pod(n)["metadata"]["annotations"].get(GPU_INDEX_ANNOTATION) for n in ("fits",)}
        assert devices == {"6,7"}  # the first six are taken by the other scheduler's pod


def test_a_pod_that_never_fits_gets_a_condition_and_one_event_not_one_per_cycle() -> None:
    with harness(ko.gpu_node("n1", gpus=8), ko.gpu_node("n2", gpus=0)) as h:
        h.server.create(ko.gpu_pod("huge", gpus=16))
        h.until(
            lambda: any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in h.pod("huge").get("status", {}).get("conditions", [])
            ),
            what="PodScheduled=False",
        )
        for _ in range(20):
            h.scheduler.turn()
        h.settle()
        condition = next(
            c for c in h.pod("huge")["status"]["conditions"] if c["type"] == "PodScheduled"
        )
        assert condition["reason"] == "Unschedulable"
        assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in condition["message"]
        failed = h.events("FailedScheduling")
        assert len(failed) == 1
        assert failed[0]["message"] == condition["message"]


def test_unparsable_annotation_is_reported_and_the_rest_keeps_being_scheduled() -> None:
    bad = ko.gpu_pod("bad", gpus=0, annotations={"gpufleet.dev/gpu-milli": "lots"})
    with harness(ko.gpu_node("n1"), bad, ko.gpu_pod("good")) as h:
        h.until(lambda: h.node_of("good") == "n1", what="good bound")
        h.settle()
        invalid = h.events("InvalidSpec")
        assert [e["involvedObject"]["name"] for e in invalid] == ["bad"]
        assert "gpufleet.dev/gpu-milli" in invalid[0]["message"]
        assert h.node_of("bad") is None


def test_a_gpu_share_is_written_back_with_its_device() -> None:
    share = ko.gpu_pod("infer", gpus=0, annotations={"gpufleet.dev/gpu-milli": "250"})
    with harness(ko.gpu_node("n1", gpus=2), share) as h:
        h.until(lambda: h.node_of("infer") == "n1", what="share bound")
        annotations = h.pod("infer")["metadata"]["annotations"]
        assert annotations["gpufleet.dev/gpu-milli-per-device"] == "250"
        assert annotations[GPU_INDEX_ANNOTATION] in {"0", "1"}


def test_health_server_answers_probes_and_metrics() -> None:
    with harness(ko.gpu_node("n1")) as h:
        healthy = [True]
        server = HealthServer(
            h.scheduler.metrics, lambda: healthy[0], lambda: h.scheduler.ready, 0, "127.0.0.1"
        )
        server.start()
        base = f"http://127.0.0.1:{server.port}"
        try:
            assert _get(f"{base}/healthz") == 200
            assert _get(f"{base}/readyz") == 200
            assert _get(f"{base}/nope") == 404
            healthy[0] = False
            assert _get(f"{base}/healthz") == 503
            with urllib.request.urlopen(f"{base}/metrics") as response:
                assert b"gpufleet_scheduling_turn_seconds" in response.read()
        finally:
            server.stop()


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
