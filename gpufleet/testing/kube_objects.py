"""Builders of Kubernetes API objects (plain dicts) for tests, benchmarks and the e2e suite:
GPU nodes as the device plugin and GPU Feature Discovery show them, pods for a scheduler,
Queues, PodGroups, PriorityClasses, PodDisruptionBudgets, and our CRDs from deploy/."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {
    "key": "nvidia.com/gpu",
    "operator": "Equal",
    "value": "present",
    "effect": "NoSchedule",
}
H100 = ("NVIDIA-H100-80GB-HBM3", 81559)
A100 = ("NVIDIA-A100-SXM4-40GB", 40960)
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def gpu_node(
    name: str,
    gpus: int = 8,
    model: tuple[str, int] = H100,
    cpu: str = "96",
    memory: str = "1024Gi",
    labels: Mapping[str, str] | None = None,
    taints: list[Obj] | None = None,
    extra_resources: Mapping[str, str] | None = None,
    replicas: int = 1,
    rename: bool = False,
) -> Obj:
    """A Ready node with ``gpus`` GPUs of ``model`` (name, MiB), labelled as GFD does; with
    ``replicas`` > 1, time-sliced as the device plugin advertises it (``nvidia.com/gpu``, or
    ``nvidia.com/gpu.shared`` with ``rename``, ``gpus x replicas`` of them)."""
    product, memory_mib = model
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        resource = "nvidia.com/gpu.shared" if rename else "nvidia.com/gpu"
        resources[resource] = str(gpus * replicas)
    resources.update(extra_resources or {})
    node_labels = {"kubernetes.io/hostname": name}
    if gpus:
        node_labels |= {
            "nvidia.com/gpu.product": product + ("-SHARED" if replicas > 1 and not rename else ""),
            "nvidia.com/gpu.memory": str(memory_mib),
            "nvidia.com/gpu.count": str(gpus),
        }
        if replicas > 1:
            node_labels |= {
                "nvidia.com/gpu.replicas": str(replicas),
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
            }
    node_labels.update(labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {"taints": list(taints or [])},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def gpu_pod(
    name: str,
    namespace: str = "default",
    gpus: int = 1,
    cpu: str = "1",
    memory: str = "4Gi",
    scheduler: str = "gpufleet",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    priority_class: str | None = None,
    node: str | None = None,
    extra_limits: Mapping[str, str] | None = None,
    spec_fields: Mapping[str, Any] | None = None,
) -> Obj:
    """A pending pod (bound when ``node`` is given) asking for ``gpus`` whole GPUs;
    ``spec_fields`` adds to its spec (``affinity``, ``topologySpreadConstraints``)."""
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    limits.update(extra_limits or {})
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
            }
        ],
        "tolerations": [dict(GPU_TOLERATION)],
    }
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if node is not None:
        spec["nodeName"] = node
    spec.update(spec_fields or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def queue(
    name: str,
    quota: Mapping[str, Any] | None = None,
    parent: str | None = None,
    namespaces: list[str] | None = None,
    **spec: Any,
) -> Obj:
    body: Obj = {"quota": dict(quota or {}), **spec}
    if parent is not None:
        body["parent"] = parent
    if namespaces is not None:
        body["namespaces"] = namespaces
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": body,
    }


def pod_group(name: str, min_member: int, namespace: str = "default") -> Obj:
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }


def priority_class(name: str, value: int, policy: str = "PreemptLowerPriority") -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "preemptionPolicy": policy,
    }


def disruption_budget(name: str, match_labels: Mapping[str, str], min_available: int) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(match_labels)}},
    }


def crds() -> list[Obj]:
    """Our CustomResourceDefinitions, as deploy/crds holds them."""
    out: list[Obj] = []
    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        out.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return out
