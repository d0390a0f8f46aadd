"""The Helm chart renders, with its default values, the objects of deploy/*.yaml.

Rendered twice where possible: by tests/deploy/helm_render.py (the subset of Helm's template
language the chart keeps to; always) and by a ``helm`` binary (only where one is installed:
none can be installed from PyPI, npm or Debian, so this case is skipped on our machines).
Objects are compared after YAML loading, less what only Helm adds (the labels helm.sh/chart
and app.kubernetes.io/managed-by) and the Namespace object (``helm install --namespace
gpufleet-system --create-namespace`` makes it)."""

from __future__ import annotations

import base64
import copy
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helm_render import Chart, manifest_objects, render
from tests.deploy.support import (
    CHART,
    CRDS,
    DEPLOY_EXAMPLES,
    REPO_ROOT,
    SCHEDULER_NAMESPACE,
    kubernetes_objects,
    load_objects,
    object_key,
    top_level_manifests,
)
from tests.packaging.support import pyproject_version

RELEASE = "gpufleet"
#: Objects only the chart makes: the binding key's Secret (deploy/ has its users create it).
CHART_ONLY_KINDS = ("Secret",)
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
CHART_EXAMPLES = ("namespaces.yaml", "priority-classes.yaml", "queues.yaml")

Render = Callable[[str, Mapping[str, Any]], list[dict[str, Any]]]


def _subset_render(namespace: str, overrides: Mapping[str, Any]) -> list[dict[str, Any]]:
    return manifest_objects(render(Chart.load(CHART), RELEASE, namespace, overrides))


def _helm_render(helm: str, tmp_path: Path) -> Render:
    def run(namespace: str, overrides: Mapping[str, Any]) -> list[dict[str, Any]]:
        values = tmp_path / "overrides.yaml"
        values.write_text(yaml.safe_dump(dict(overrides)))
        result = subprocess.run(
            [helm, "template", RELEASE, str(CHART), "--namespace", namespace, "-f", str(values)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]

    return run


@pytest.fixture(params=["subset-renderer", "helm-binary"])
def render_chart(request: pytest.FixtureRequest, tmp_path: Path) -> Render:
    if request.param == "subset-renderer":
        return _subset_render
    helm = shutil.which("helm")
    if helm is None:
        pytest.skip("no helm binary (none can be installed here); the subset renderer ran")
    return _helm_render(helm, tmp_path)


def _without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    labels = obj.get("metadata", {}).get("labels", {})
    for key in HELM_ONLY_LABELS:
        labels.pop(key, None)
    return obj


def _sorted(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(objects, key=object_key)


def _plain_install() -> list[dict[str, Any]]:
    """deploy/*.yaml less the CRDs (the chart's crds/ holds them) and the Namespace."""
    return _sorted(
        [
            item.obj
            for item in kubernetes_objects(top_level_manifests())
            if item.kind not in ("CustomResourceDefinition", "Namespace")
        ]
    )


def _component(objects: list[dict[str, Any]], component: str) -> list[dict[str, Any]]:
    """The objects of the scheduler or of the node agent (their component label)."""
    return [
        obj
        for obj in objects
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]


def _by_kind(
    objects: list[dict[str, Any]], kind: str, component: str = "scheduler"
) -> dict[str, Any]:
    (found,) = [obj for obj in _component(objects, component) if obj["kind"] == kind]
    return found


# ---------------------------------------------------------------------- chart files
def test_chart_metadata_matches_the_image_and_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "gpufleet"
    assert chart["type"] == "application"
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == version
    (deployment,) = [
        item.obj for item in kubernetes_objects(top_level_manifests()) if item.kind == "Deployment"
    ]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/gpufleet/gpufleet:{chart['appVersion']}"


@pytest.mark.parametrize("path", sorted(CRDS.glob("*.yaml")), ids=lambda p: p.name)
def test_chart_crds_are_the_deploy_crds(path: Path) -> None:
    assert (CHART / "crds" / path.name).read_text() == path.read_text()


def test_chart_crds_hold_nothing_else() -> None:
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(
        p.name for p in CRDS.glob("*.yaml")
    )


@pytest.mark.parametrize("name", CHART_EXAMPLES)
def test_chart_example_files_are_the_deploy_examples(name: str) -> None:
    assert (CHART / "files" / "examples" / name).read_text() == (DEPLOY_EXAMPLES / name).read_text()


def test_helpers_document_the_template_subset() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert "deliberate subset" in helpers
    assert "helm_render.py" in helpers


# ------------------------------------------------------------------------- rendering
def test_default_render_is_deploy_yaml(render_chart: Render) -> None:
    rendered = _sorted(
        [
            _without_helm_labels(obj)
            for obj in render_chart(SCHEDULER_NAMESPACE, {})
            if obj["kind"] not in CHART_ONLY_KINDS
        ]
    )
    assert [object_key(obj) for obj in rendered] == [object_key(obj) for obj in _plain_install()]
    for got, expected in zip(rendered, _plain_install(), strict=True):
        assert got == expected, object_key(expected)


def test_helm_labels_are_on_every_object(render_chart: Render) -> None:
    for obj in render_chart(SCHEDULER_NAMESPACE, {}):
        labels = obj["metadata"]["labels"]
        assert labels["helm.sh/chart"] == f"gpufleet-{pyproject_version()}"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_examples_flag_adds_the_example_objects(render_chart: Render) -> None:
    plain = {object_key(obj) for obj in render_chart(SCHEDULER_NAMESPACE, {})}
    with_examples = render_chart(SCHEDULER_NAMESPACE, {"examples": {"enabled": True}})
    added = _sorted([obj for obj in with_examples if object_key(obj) not in plain])
    expected = _sorted(
        [item.obj for name in CHART_EXAMPLES for item in load_objects(DEPLOY_EXAMPLES / name)]
    )
    assert added == expected


def test_release_namespace_is_used_throughout(render_chart: Render) -> None:
    objects = render_chart("sched", {})
    for obj in objects:
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == "sched", object_key(obj)
    command = _by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert command[command.index("--lease-namespace") + 1] == "sched"
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert _by_kind(objects, kind)["subjects"][0]["namespace"] == "sched"


CLUSTER_SCOPED = (
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def _binding_key_mounts(objects: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Per workload: the Secret mounted where its --binding-key-file points, and that path."""
    found = {}
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = obj["spec"]["template"]["spec"]
        command = spec["containers"][0]["command"]
        path = command[command.index("--binding-key-file") + 1]
        volumes = {v["name"]: v for v in spec["volumes"]}
        (mount,) = [
            m
            for m in spec["containers"][0]["volumeMounts"]
            if path.startswith(m["mountPath"] + "/")
        ]
        assert mount["readOnly"] is True
        found[obj["kind"]] = (volumes[mount["name"]]["secret"]["secretName"], path)
    return found


def test_the_chart_makes_one_binding_key_both_mount(render_chart: Render) -> None:
    objects = render_chart(SCHEDULER_NAMESPACE, {})
    (secret,) = [obj for obj in objects if obj["kind"] == "Secret"]
    key = base64.b64decode(secret["data"]["key"])
    assert len(key) == 64
    assert key.isalnum()
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    name = secret["metadata"]["name"]
    assert _binding_key_mounts(objects) == {
        "Deployment": (name, "/etc/gpufleet/binding-key/key"),
        "DaemonSet": (name, "/etc/gpufleet/binding-key/key"),
    }


def test_a_binding_key_of_your_own(render_chart: Render) -> None:
    overrides = {"bindingKey": {"create": False, "secretName": "mine"}}
    objects = render_chart(SCHEDULER_NAMESPACE, overrides)
    assert not [obj for obj in objects if obj["kind"] == "Secret"]
    assert {secret for secret, _ in _binding_key_mounts(objects).values()} == {"mine"}


def test_the_binding_policy_names_the_releases_scheduler(render_chart: Render) -> None:
    objects = render_chart("sched", {"name": "gf2"})
    (policy,) = [obj for obj in objects if obj["kind"] == "ValidatingAdmissionPolicy"]
    (scheduler,) = [v for v in policy["spec"]["variables"] if v["name"] == "scheduler"]
    assert scheduler["expression"] == "['system:serviceaccount:sched:gf2']"
    off = render_chart("sched", {"bindingPolicy": {"enabled": False}})
    assert not [obj for obj in off if obj["kind"].startswith("ValidatingAdmissionPolicy")]


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = _by_kind(objects, "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


OVERRIDE_CASES: list[
    tuple[str, dict[str, Any], Callable[[list[dict[str, Any]]], object], object]
] = [
    ("replicas", {"replicaCount": 3}, lambda o: _by_kind(o, "Deployment")["spec"]["replicas"], 3),
    (
        "image",
        {"image": {"repository": "registry.example/gf", "tag": "dev"}},
        lambda o: _container(o)["image"],
        "registry.example/gf:dev",
    ),
    (
        "scheduler-name-and-policy",
        {"schedulerName": "gpu", "policy": "bestfit"},
        lambda o: _container(o)["command"][2:6],
        ["--scheduler-name", "gpu", "--policy", "bestfit"],
    ),
    (
        "metrics-port",
        {"metrics": {"port": 9100}},
        lambda o: (
            _container(o)["livenessProbe"]["httpGet"]["port"],
            _container(o)["ports"][0]["containerPort"],
            _by_kind(o, "Service")["spec"]["ports"][0]["port"],
            _container(o)["command"][_container(o)["command"].index("--metrics-port") + 1],
        ),
        (9100, 9100, 9100, "9100"),
    ),
    (
        "leader-election-off",
        {"leaderElection": {"enabled": False}, "replicaCount": 1},
        lambda o: (
            sorted(obj["kind"] for obj in _component(o, "scheduler")),
            [arg for arg in _container(o)["command"] if arg.startswith("--lease")],
        ),
        (
            [
                "ClusterRole",
                "ClusterRoleBinding",
                "Deployment",
                "NetworkPolicy",
                "Service",
                "ServiceAccount",
            ],
            [],
        ),
    ),
    (
        "lease-elsewhere",
        {"leaderElection": {"leaseNamespace": "kube-system", "leaseName": "gf"}},
        lambda o: (
            _by_kind(o, "Role")["metadata"]["namespace"],
            _by_kind(o, "Role")["rules"][1]["resourceNames"],
            _container(o)["command"][-4:],
        ),
        ("kube-system", ["gf"], ["--lease-namespace", "kube-system", "--lease-name", "gf"]),
    ),
    (
        "no-priority-class",
        {"priorityClassName": ""},
        lambda o: "priorityClassName" in _by_kind(o, "Deployment")["spec"]["template"]["spec"],
        False,
    ),
    (
        "resources",
        {"resources": {"requests": {"cpu": "1"}, "limits": {"memory": "4Gi"}}},
        lambda o: _container(o)["resources"],
        {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "4Gi"}},
    ),
    (
        "placement",
        {
            "nodeSelector": {"node-role": "control"},
            "tolerations": [{"key": "control", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        },
        lambda o: {
            key: _by_kind(o, "Deployment")["spec"]["template"]["spec"][key]
            for key in ("nodeSelector", "tolerations", "affinity")
        },
        {
            "nodeSelector": {"node-role": "control"},
            "tolerations": [{"key": "control", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        },
    ),
    (
        "name",
        {"name": "gf2"},
        lambda o: sorted(obj["metadata"]["name"] for obj in _component(o, "scheduler")),
        [
            "gf2",
            "gf2",
            "gf2",
            "gf2",
            "gf2",
            "gf2-leader-election",
            "gf2-leader-election",
            "gf2-metrics",
        ],
    ),
    (
        "network-policies-off",
        {"networkPolicy": {"enabled": False}},
        lambda o: [obj for obj in o if obj["kind"] == "NetworkPolicy"],
        [],
    ),
    (
        "api-server-address",
        {"networkPolicy": {"apiServer": {"to": [{"ipBlock": {"cidr": "10.0.0.10/32"}}]}}},
        lambda o: sorted(
            str(obj["spec"]["egress"][0]["to"])
            for obj in o
            if obj["kind"] == "NetworkPolicy" and "Egress" in obj["spec"]["policyTypes"]
        ),
        ["[{'ipBlock': {'cidr': '10.0.0.10/32'}}]"] * 2,
    ),
    (
        "serve-clients",
        {"networkPolicy": {"serve": {"port": 9000, "from": [{"podSelector": {}}]}}},
        lambda o: next(
            obj["spec"]["ingress"][0] for obj in o if obj["metadata"]["name"] == "gpufleet-serve"
        ),
        {
            "from": [
                {"podSelector": {}},
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                    }
                },
            ],
            "ports": [{"port": 9000, "protocol": "TCP"}],
        },
    ),
]


@pytest.mark.parametrize(
    ("overrides", "pick", "expected"),
    [(overrides, pick, expected) for _, overrides, pick, expected in OVERRIDE_CASES],
    ids=[case[0] for case in OVERRIDE_CASES],
)
def test_values_override(
    render_chart: Render,
    overrides: dict[str, Any],
    pick: Callable[[list[dict[str, Any]]], object],
    expected: object,
) -> None:
    assert pick(render_chart(SCHEDULER_NAMESPACE, overrides)) == expected


def test_notes_render() -> None:
    notes = render(Chart.load(CHART), RELEASE, SCHEDULER_NAMESPACE)["templates/NOTES.txt"]
    assert "schedulerName: gpufleet" in notes
    assert "kubectl -n gpufleet-system get lease gpufleet-scheduler" in notes
    assert "{{" not in notes
    assert "kubectl -n gpufleet-system get daemonset gpufleet-agent" in notes
