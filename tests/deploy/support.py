"""Shared helpers of the deploy/ tests: where things are, and YAML objects with their file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
CRDS = DEPLOY / "crds"
DEPLOY_EXAMPLES = DEPLOY / "examples"
CHART = DEPLOY / "helm" / "gpufleet"
KUSTOMIZATION = DEPLOY / "kustomization.yaml"
#: The built-in alert rules as a PrometheusRule: applied on its own where the Prometheus
#: Operator's CRD is installed, so not part of ``kubectl apply -k deploy/``.
PROMETHEUS_RULES = DEPLOY / "prometheus-rules.yaml"
#: The same rules as a plain Prometheus rule file (``groups:``), the chart's PrometheusRule spec.
CHART_PROMETHEUS_RULES = CHART / "files" / "prometheus-rules.yaml"
#: The identity of ``gpufleet serve --kubeconfig``: applied on its own where serve runs (it
#: impersonates tenants), so not part of ``kubectl apply -k deploy/`` (the scheduler alone).
SERVE_RBAC = DEPLOY / "serve-rbac.yaml"
SCHEDULER_NAMESPACE = "gpufleet-system"


@dataclass(frozen=True, slots=True)
class Loaded:
    """One object of a YAML file, and where it came from (for test ids and messages)."""

    path: Path
    index: int  # document number in the file, from 1
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        metadata = self.obj.get("metadata") or {}
        return str(metadata.get("name"))

    @property
    def namespace(self) -> str | None:
        metadata = self.obj.get("metadata") or {}
        namespace = metadata.get("namespace")
        return None if namespace is None else str(namespace)

    @property
    def id(self) -> str:
        where = self.path.relative_to(REPO_ROOT)
        return f"{where}#{self.index}:{self.kind}/{self.name}"


def deploy_yaml_files() -> list[Path]:
    """Every YAML file under deploy/ except the chart's templates (Go templates, not YAML)."""
    templates = CHART / "templates"
    return sorted(
        path
        for pattern in ("*.yaml", "*.yml")
        for path in DEPLOY.rglob(pattern)
        if templates not in path.parents
    )


def load_objects(path: Path) -> list[Loaded]:
    """The non-empty documents of a YAML file, each of which must be a mapping."""
    loaded: list[Loaded] = []
    for index, document in enumerate(yaml.safe_load_all(path.read_text()), start=1):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise AssertionError(f"{path}#{index}: expected a mapping, got {document!r}")
        loaded.append(Loaded(path, index, document))
    return loaded


def kubernetes_objects(paths: list[Path]) -> list[Loaded]:
    """The objects of Kubernetes manifests (files that are not kustomization/Chart/values)."""
    return [item for path in paths if is_manifest(path) for item in load_objects(path)]


def is_manifest(path: Path) -> bool:
    """False for files under deploy/ that are YAML but not Kubernetes objects."""
    if path in (KUSTOMIZATION, CHART_PROMETHEUS_RULES):
        return False
    return not (path.parent == CHART and path.name in ("Chart.yaml", "values.yaml"))


def top_level_manifests() -> list[Path]:
    """deploy/*.yaml and deploy/crds/*.yaml: what kubectl apply -k deploy/ installs (all but
    :data:`PROMETHEUS_RULES` and :data:`SERVE_RBAC`)."""
    return sorted(
        path
        for path in [*DEPLOY.glob("*.yaml"), *CRDS.glob("*.yaml")]
        if path not in (PROMETHEUS_RULES, SERVE_RBAC)
    )


def object_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name): identifies an object within an install."""
    metadata = obj.get("metadata") or {}
    return (str(obj.get("kind")), str(metadata.get("namespace", "")), str(metadata.get("name")))


#: (apiGroup, resource, verb, resourceName or "" for any): one thing an RBAC rule grants.
Grant = tuple[str, str, str, str]


def rule_grants(rules: list[dict[str, Any]]) -> set[Grant]:
    """Every (apiGroup, resource, verb, resourceName) a list of PolicyRules grants."""
    found: set[Grant] = set()
    for rule in rules:
        names = rule.get("resourceNames") or [""]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    found.update((group, resource, verb, name) for name in names)
    return found
