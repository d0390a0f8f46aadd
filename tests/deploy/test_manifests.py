"""deploy/*.yaml: every file parses into named objects, the kustomization lists exactly the
install, and the scheduler's Deployment runs as the CLI and the RBAC expect."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.support import (
    DEPLOY,
    KUSTOMIZATION,
    SCHEDULER_NAMESPACE,
    Loaded,
    deploy_yaml_files,
    is_manifest,
    kubernetes_objects,
    load_objects,
    object_key,
    top_level_manifests,
)
from tests.packaging.support import pyproject_version

YAML_FILES = deploy_yaml_files()
OBJECTS = kubernetes_objects(YAML_FILES)


def _by_key(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    found = [
        item.obj
        for item in kubernetes_objects(top_level_manifests())
        if item.kind == kind and item.name == name and item.namespace == namespace
    ]
    assert len(found) == 1, f"expected one {kind} {namespace}/{name}, found {len(found)}"
    return found[0]


# ------------------------------------------------------------------------------ (a) parsing
def test_deploy_has_yaml_files() -> None:
    assert len(YAML_FILES) >= 15, YAML_FILES


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_file_parses_into_mappings(path: Path) -> None:
    assert load_objects(path), f"{path} holds no object"


@pytest.mark.parametrize("item", OBJECTS, ids=lambda item: item.id)
def test_object_has_api_version_kind_and_name(item: Loaded) -> None:
    assert isinstance(item.obj.get("apiVersion"), str)
    assert item.obj["apiVersion"]
    assert isinstance(item.obj.get("kind"), str)
    assert item.obj["kind"]
    metadata = item.obj.get("metadata")
    assert isinstance(metadata, dict)
    assert isinstance(metadata.get("name"), str)
    assert metadata["name"]


def test_objects_are_unique_within_the_install() -> None:
    keys = [object_key(item.obj) for item in kubernetes_objects(top_level_manifests())]
    assert len(keys) == len(set(keys)), sorted(keys)


# -------------------------------------------------------------------------- kustomization
def test_kustomization_lists_every_top_level_manifest() -> None:
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    listed = sorted(DEPLOY / resource for resource in kustomization["resources"])
    expected = sorted(path for path in top_level_manifests() if is_manifest(path))
    assert listed == expected


def test_kubectl_kustomize_renders_the_same_objects() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        pytest.skip(f"kubectl kustomize failed here: {result.stderr.strip()[:200]}")
    rendered = sorted(
        (doc for doc in yaml.safe_load_all(result.stdout) if doc is not None), key=object_key
    )
    expected = sorted(
        (item.obj for item in kubernetes_objects(top_level_manifests())), key=object_key
    )
    assert rendered == expected


# -------------------------------------------------------------------- the scheduler itself
DEPLOYMENT = _by_key("Deployment", "gpufleet-scheduler", SCHEDULER_NAMESPACE)
POD_SPEC: dict[str, Any] = DEPLOYMENT["spec"]["template"]["spec"]
CONTAINER: dict[str, Any] = POD_SPEC["containers"][0]

COMMAND = [
    "gpufleet",
    "scheduler",
    "--scheduler-name",
    "gpufleet",
    "--policy",
    "default",
    "--metrics-port",
    "9090",
    "--binding-key-file",
    "/etc/gpufleet/binding-key/key",
    "--leader-elect",
    "--lease-namespace",
    SCHEDULER_NAMESPACE,
    "--lease-name",
    "gpufleet-scheduler",
]


def _at(obj: Any, path: str) -> Any:
    for key in path.split("."):
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


DEPLOYMENT_FIELDS: list[tuple[str, Any]] = [
    ("metadata.namespace", SCHEDULER_NAMESPACE),
    ("spec.replicas", 2),
    ("spec.template.spec.serviceAccountName", "gpufleet-scheduler"),
    ("spec.template.spec.priorityClassName", "system-cluster-critical"),
    ("spec.template.spec.securityContext.runAsNonRoot", True),
    ("spec.template.spec.securityContext.seccompProfile.type", "RuntimeDefault"),
    ("spec.template.spec.containers.0.image", f"ghcr.io/gpufleet/gpufleet:{pyproject_version()}"),
    ("spec.template.spec.containers.0.command", COMMAND),
    ("spec.template.spec.containers.0.livenessProbe.httpGet", {"path": "/healthz", "port": 9090}),
    ("spec.template.spec.containers.0.readinessProbe.httpGet", {"path": "/readyz", "port": 9090}),
    ("spec.template.spec.containers.0.resources.requests", {"cpu": "250m", "memory": "512Mi"}),
    ("spec.template.spec.containers.0.resources.limits", {"memory": "2Gi"}),
    ("spec.template.spec.containers.0.securityContext.runAsNonRoot", True),
    ("spec.template.spec.containers.0.securityContext.readOnlyRootFilesystem", True),
    ("spec.template.spec.containers.0.securityContext.allowPrivilegeEscalation", False),
    ("spec.template.spec.containers.0.securityContext.capabilities", {"drop": ["ALL"]}),
    (
        "spec.template.spec.containers.0.securityContext.seccompProfile",
        {"type": "RuntimeDefault"},
    ),
]


@pytest.mark.parametrize(
    ("path", "expected"), DEPLOYMENT_FIELDS, ids=[path for path, _ in DEPLOYMENT_FIELDS]
)
def test_deployment_field(path: str, expected: Any) -> None:
    assert _at(DEPLOYMENT, path) == expected


def test_pod_identity_comes_from_the_downward_api() -> None:
    env = {item["name"]: item for item in CONTAINER["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_scheduler_pods_are_not_scheduled_by_gpufleet() -> None:
    # gpufleet must not have to place itself: its pods use the default scheduler.
    assert "schedulerName" not in POD_SPEC


def test_replicas_prefer_different_hosts() -> None:
    preferred = POD_SPEC["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert len(preferred) == 1
    term = preferred[0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == DEPLOYMENT["spec"]["selector"]["matchLabels"]
    assert (
        DEPLOYMENT["spec"]["template"]["metadata"]["labels"] == term["labelSelector"]["matchLabels"]
    )


def test_read_only_root_has_a_writable_tmp() -> None:
    mounts = {mount["mountPath"]: mount["name"] for mount in CONTAINER["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in POD_SPEC["volumes"]}
    assert volumes[mounts["/tmp"]] == {"name": "tmp", "emptyDir": {}}


def test_lease_flags_match_the_leader_election_role() -> None:
    role = _by_key("Role", "gpufleet-scheduler-leader-election", SCHEDULER_NAMESPACE)
    command = CONTAINER["command"]
    lease_namespace = command[command.index("--lease-namespace") + 1]
    lease_name = command[command.index("--lease-name") + 1]
    assert role["metadata"]["namespace"] == lease_namespace
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert [rule["resourceNames"] for rule in named] == [[lease_name]]


def test_metrics_service_selects_the_scheduler_pods() -> None:
    service = _by_key("Service", "gpufleet-scheduler-metrics", SCHEDULER_NAMESPACE)
    assert service["spec"]["selector"] == DEPLOYMENT["spec"]["selector"]["matchLabels"]
    ports = service["spec"]["ports"]
    assert [(port["name"], port["port"]) for port in ports] == [("metrics", 9090)]
    container_ports = {port["name"]: port["containerPort"] for port in CONTAINER["ports"]}
    assert container_ports[ports[0]["targetPort"]] == 9090


def test_everything_namespaced_lives_in_the_scheduler_namespace() -> None:
    namespace = _by_key("Namespace", SCHEDULER_NAMESPACE)
    assert namespace["apiVersion"] == "v1"
    for item in kubernetes_objects(top_level_manifests()):
        if item.namespace is not None:
            assert item.namespace == SCHEDULER_NAMESPACE, item.id
