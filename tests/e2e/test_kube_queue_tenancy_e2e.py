"""End to end against a real API server (GPUFLEET_E2E_KUBECONFIG), issue 26 item 3: a pod in
another namespace that labels itself with this run's queue (which admits only the run's
namespace) stays pending with a FailedScheduling Event saying why; the run's own pod binds."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from gpufleet.model.queues import QUEUE_LABEL
from gpufleet.testing import kube_objects as ko
from tests.e2e.kube_cluster import KUBECONFIG_ENV, RUN_LABEL, Cluster, stop, wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(
        not os.environ.get(KUBECONFIG_ENV), reason=f"set {KUBECONFIG_ENV} to run against a cluster"
    ),
]


def test_a_pod_of_an_unadmitted_namespace_stays_pending_with_the_event(
    cluster: Cluster, tmp_path: Path
) -> None:
    other = f"{cluster.namespace}-b"
    core = cluster.core
    core.create_namespace({"metadata": {"name": other}})
    with contextlib.suppress(ApiException):  # no controller may make it on a bare API server
        core.create_namespaced_service_account(
            other, {"metadata": {"name": "default", "namespace": other}}
        )
    cluster.add_gpu_node("gpu-0", gpus=8)
    log = tmp_path / "scheduler.log"
    scheduler = cluster.start_scheduler(log)
    try:
        grab = ko.gpu_pod("grab", gpus=2, labels={QUEUE_LABEL: cluster.namespace})
        grab["metadata"]["namespace"] = other
        grab["spec"]["schedulerName"] = cluster.scheduler_name
        grab["spec"]["nodeSelector"] = {RUN_LABEL: cluster.run_id}
        core.create_namespaced_pod(other, grab)
        expected = f"namespace {other} is not admitted by queue {cluster.namespace}"

        def told() -> bool:
            response = core.list_namespaced_event(other, _preload_content=False)
            return any(
                e.get("reason") == "FailedScheduling" and expected in str(e.get("message"))
                for e in json.loads(response.data)["items"]
            )

        wait_for(told, what="the FailedScheduling event of the unadmitted pod")
        cluster.submit(ko.gpu_pod("own", gpus=2, labels={QUEUE_LABEL: cluster.namespace}))
        wait_for(lambda: bool(cluster.pod("own")["spec"].get("nodeName")), what="own pod bound")
        found = json.loads(core.read_namespaced_pod("grab", other, _preload_content=False).data)
        assert not found["spec"].get("nodeName")
    finally:
        stop(scheduler)
        with contextlib.suppress(ApiException):
            core.delete_namespace(other)
        print(log.read_text()[-4000:])
