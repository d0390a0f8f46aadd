"""Directories of real application manifests: kinds with no scheduling meaning are set aside and
counted (said once per read), kinds that make pods are read or refused, never skipped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.io.errors import InputError
from gpufleet.io.kinds import Skipped, pod_template_path, triage
from gpufleet.io.readers import read_cluster, read_scenario, read_workload
from tests.io.conftest import WriteFile

Obj = dict[str, Any]


def obj(api: str, kind: str, name: str, **fields: Any) -> Obj:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, **fields}


TEMPLATE = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
POD = obj("v1", "Pod", "train", spec=TEMPLATE["spec"])
#: What an application's directory holds beside its workloads.
APP = [
    obj("v1", "ConfigMap", "config", data={"a": "b"}),
    obj("v1", "Service", "svc", spec={"selector": {"app": "x"}, "ports": [{"port": 80}]}),
    obj(
        "v1", "PersistentVolumeClaim", "data", spec={"resources": {"requests": {"storage": "1Gi"}}}
    ),
    obj("networking.k8s.io/v1", "NetworkPolicy", "deny", spec={"podSelector": {}}),
    obj("monitoring.coreos.com/v1", "PrometheusRule", "alerts", spec={"groups": []}),
    obj("v1", "Secret", "token", stringData={"t": "x"}),
    obj("v1", "ServiceAccount", "runner"),
    obj("networking.k8s.io/v1", "Ingress", "web", spec={"rules": []}),
    obj("autoscaling/v2", "HorizontalPodAutoscaler", "hpa", spec={"scaleTargetRef": {}}),
    obj("policy/v1", "PodDisruptionBudget", "pdb", spec={"minAvailable": 1}),
    obj("rbac.authorization.k8s.io/v1", "Role", "r", rules=[]),
    obj("rbac.authorization.k8s.io/v1", "RoleBinding", "rb", subjects=[]),
    # A CRD's schema may well name templates and containers: it makes no pods.
    obj(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "trainers.example.com",
        spec={"versions": [{"schema": {"properties": {"template": {"type": "object"}}}}]},
    ),
    obj("v1", "ConfigMap", "config-2"),
]
APP_NOTE = (
    "skipped 14 objects of kinds with no scheduling meaning: ConfigMap (2), "
    "CustomResourceDefinition (1), HorizontalPodAutoscaler (1), Ingress (1), NetworkPolicy (1), "
    "PersistentVolumeClaim (1), PodDisruptionBudget (1), PrometheusRule (1), Role (1), "
    "RoleBinding (1), Secret (1), Service (1), ServiceAccount (1)"
)


def write_all(write_file: WriteFile, name: str, *objects: Obj) -> Path:
    return write_file(name, yaml.safe_dump_all(list(objects), sort_keys=False))


def test_an_applications_directory_reads_as_its_workloads(
    write_file: WriteFile, tmp_path: Path
) -> None:
    write_all(write_file, "app/a-config.yaml", *APP[:5])
    write_all(write_file, "app/b-train.yaml", POD, *APP[5:])
    skipped = Skipped()
    pods = read_workload(tmp_path / "app", skipped)
    assert [t.pod.name for t in pods] == ["train"]
    assert skipped.note() == APP_NOTE


@pytest.mark.parametrize(
    "reader",
    [
        pytest.param(lambda path, skipped: read_scenario(path, skipped).workloads, id="scenario"),
        pytest.param(read_workload, id="workload"),
    ],
)
def test_every_workload_reader_skips_the_same(
    write_file: WriteFile, reader: Callable[[Path, Skipped], list[Any]]
) -> None:
    path = write_all(write_file, "mixed.yaml", APP[0], POD, APP[1], APP[-1])
    skipped = Skipped()
    assert len(reader(path, skipped)) == 1
    assert skipped.note() == (
        "skipped 3 objects of kinds with no scheduling meaning: ConfigMap (2), Service (1)"
    )


NODE = obj("v1", "Node", "n1", status={"allocatable": {"cpu": "8", "memory": "32Gi"}})


def test_the_cluster_reader_skips_too(write_file: WriteFile) -> None:
    # The device plugin's time-slicing ConfigMap often sits beside the nodes.
    path = write_all(write_file, "cluster.yaml", APP[0], NODE)
    skipped = Skipped()
    assert [n.name for n in read_cluster(path, skipped)] == ["n1"]
    assert skipped.counts == {"ConfigMap": 1}


def test_nothing_but_skipped_kinds_is_an_error(write_file: WriteFile) -> None:
    path = write_all(write_file, "config.yaml", APP[0], APP[1])
    with pytest.raises(InputError) as raised:
        read_workload(path)
    assert str(raised.value) == (
        f"{path}: expected Pod, Job, Deployment, StatefulSet or ReplicaSet objects (or an "
        "Alibaba pod-list .csv), found none: skipped 2 objects of kinds with no scheduling "
        "meaning: ConfigMap (1), Service (1)"
    )


def template_of(**spec: Any) -> Obj:
    return {"replicas": 2, "template": TEMPLATE, **spec}


REFUSED = {
    "daemonset": (
        obj("apps/v1", "DaemonSet", "agent", spec={"template": TEMPLATE}),
        "gpufleet does not read kind DaemonSet: it makes a pod on each node",
    ),
    "cronjob": (
        obj(
            "batch/v1", "CronJob", "nightly", spec={"jobTemplate": {"spec": {"template": TEMPLATE}}}
        ),
        "gpufleet does not read kind CronJob: it makes Jobs on a schedule; give one run",
    ),
    "tfjob": (
        obj("kubeflow.org/v1", "TFJob", "tf", spec={"tfReplicaSpecs": {}}),
        "gpufleet does not read kind TFJob: it makes pods",
    ),
    "kueue-cluster-queue": (
        obj("kueue.x-k8s.io/v1beta1", "ClusterQueue", "cq", spec={}),
        "gpufleet does not read kind ClusterQueue: Kueue's quota",
    ),
    "knative-service-is-not-a-core-service": (
        obj("serving.knative.dev/v1", "Service", "fn", spec={"template": TEMPLATE}),
        "kind Service ('serving.knative.dev/v1') has a pod template at spec.template, so it may "
        "make pods, but gpufleet does not read it (supported: Pod, Job",
    ),
    "custom-resource-with-containers": (
        obj("example.com/v1", "Runner", "r", spec={"pods": [{"containers": [{"name": "c"}]}]}),
        "kind Runner ('example.com/v1') has a pod template at spec.pods[0].containers",
    ),
    "no-kind": ({"apiVersion": "v1", "metadata": {"name": "x"}}, "got nothing (not a Kubernetes"),
    "queue-given-as-a-workload": (
        obj("gpufleet.dev/v1alpha1", "Queue", "q"),
        "got kind Queue (read with queues and quotas: place or simulate --scenario",
    ),
}


@pytest.mark.parametrize(("document", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_kinds_that_may_make_pods_are_never_skipped(
    write_file: WriteFile, document: Obj, message: str
) -> None:
    path = write_all(write_file, "app.yaml", POD, document)
    with pytest.raises(InputError) as raised:
        read_workload(path)
    assert str(raised.value).startswith(f"{path}:document 2 (line "), raised.value
    assert raised.value.field == "kind"
    assert message in str(raised.value), raised.value


def test_custom_resources_without_pods_are_skipped(write_file: WriteFile) -> None:
    certificate = obj("cert-manager.io/v1", "Certificate", "tls", spec={"secretName": "tls"})
    unknown = obj("example.com/v1", "Dashboard", "d", spec={"panels": [{"title": "GPUs"}]})
    path = write_all(write_file, "app.yaml", POD, certificate, unknown)
    skipped = Skipped()
    read_workload(path, skipped)
    assert skipped.counts == {"Certificate": 1, "Dashboard": 1}


@pytest.mark.parametrize(
    ("spec", "found"),
    [
        pytest.param({"template": {}}, "spec.template", id="template"),
        pytest.param({"jobTemplate": {}}, "spec.jobTemplate", id="job-template"),
        pytest.param({"workers": {"podTemplate": {}}}, "spec.workers.podTemplate", id="nested"),
        pytest.param({"groups": [{"containers": []}]}, "spec.groups[0].containers", id="list"),
        pytest.param({"template": "a string"}, None, id="not-a-template"),
        pytest.param({"replicas": 3}, None, id="none"),
    ],
)
def test_pod_template_path(spec: Obj, found: str | None) -> None:
    assert pod_template_path({"kind": "X", "spec": spec}) == found


def test_statefulsets_and_replicasets_are_read_like_deployments(write_file: WriteFile) -> None:
    stateful = obj("apps/v1", "StatefulSet", "db", spec=template_of())
    replicas = obj("apps/v1", "ReplicaSet", "web", spec=template_of(replicas=3))
    path = write_all(write_file, "apps.yaml", stateful, replicas)
    assert [t.pod.name for t in read_workload(path)] == [
        "db-0", "db-1", "web-0", "web-1", "web-2",
    ]  # fmt: skip
    workloads = read_scenario(path).workloads
    assert [(w.workload.name, len(w.workload.pods)) for w in workloads] == [
        ("db-0", 1), ("db-1", 1), ("web-0", 1), ("web-1", 1), ("web-2", 1),
    ]  # fmt: skip


def test_statefulset_api_version_is_checked(write_file: WriteFile) -> None:
    path = write_all(
        write_file, "db.yaml", obj("apps/v1beta1", "StatefulSet", "db", spec=template_of())
    )
    with pytest.raises(InputError, match="apiVersion: expected apps/v1 for a StatefulSet"):
        read_workload(path)


def test_triage_without_a_counter_still_skips() -> None:
    assert not triage(APP[0], "x.yaml", None, ("Pod",), "Pods", None)
    assert triage(POD, "x.yaml", None, ("Pod",), "Pods", None)


def test_the_note_is_one_line_and_bounded() -> None:
    skipped = Skipped()
    assert skipped.note() is None
    for _ in range(3):
        skipped.add("K" * 500)
    skipped.add("ConfigMap")
    note = skipped.note()
    assert note is not None
    assert "\n" not in note
    assert len(note) < 200
    assert note.startswith("skipped 4 objects of kinds with no scheduling meaning: KKKK")
    assert note.endswith("... (500 characters) (3), ConfigMap (1)")


def test_the_cluster_kinds_name_the_cluster_spec_kind() -> None:
    from gpufleet.io.fleet.cluster_spec import KIND
    from gpufleet.io.kinds import CLUSTER_KINDS

    assert KIND in CLUSTER_KINDS
