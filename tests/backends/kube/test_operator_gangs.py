"""Pods that operators make for their jobs, grouped as the operators' gang-scheduling
integrations mark them: Volcano's group-name annotation and PodGroup (KubeRay, the Kubeflow
training and MPI operators), and pods that join a gang after it started (a Job's next
completion, a replacement for a failed pod)."""

from __future__ import annotations

import pytest

from gpufleet.testing import kube_objects as ko
from gpufleet.testing.job_objects import operator_crds, volcano_pod_group
from tests.backends.kube.harness import harness


@pytest.mark.parametrize(
    "annotation", ["scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"]
)
def test_pods_of_a_volcano_pod_group_start_together(annotation: str) -> None:
    nodes = (ko.gpu_node("n1", gpus=4), ko.gpu_node("n2", gpus=4))
    with harness(*nodes, *operator_crds()) as h:
        # As KubeRay makes a RayCluster's pods with its Volcano integration: a head and workers.
        notes = {annotation: "ray-rc-pg"}
        pods = [
            ko.gpu_pod("rc-head", gpus=0, annotations=notes, labels={"ray.io/cluster": "rc"}),
            *(ko.gpu_pod(f"rc-gpu-worker-{i}", gpus=4, annotations=notes) for i in range(2)),
        ]
        for pod in pods[:2]:
            h.server.create(pod)
        h.server.create(volcano_pod_group("ray-rc-pg", min_member=3))
        h.settle()
        assert h.bound() == {}, "2 of 3 members must not start"
        assert "2/3 pods exist" in h.pod("rc-head")["status"]["conditions"][0]["message"]
        h.server.create(pods[2])
        h.until(lambda: len(h.bound()) == 3, what="the whole gang bound")


def test_a_pod_that_joins_a_running_gang_is_admitted_on_its_own() -> None:
    with harness(ko.gpu_node("n1", gpus=4), ko.pod_group("j", min_member=2)) as h:
        labels = {"gpufleet.dev/pod-group": "j"}
        for i in range(2):
            h.server.create(ko.gpu_pod(f"j-{i}", gpus=1, labels=labels))
        h.until(lambda: len(h.bound()) == 2, what="the gang bound")
        # The Job controller's pod for the next completion (or a failed pod's replacement).
        h.server.create(ko.gpu_pod("j-2", gpus=1, labels=labels))
        h.until(lambda: h.node_of("j-2") == "n1", what="the late pod bound")
