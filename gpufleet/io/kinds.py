"""Which objects of a directory of manifests a reader reads, sets aside, or refuses.

A real application's manifests mix kinds: a ConfigMap, a Service, a PersistentVolumeClaim and a
NetworkPolicy beside its Deployment. gpufleet reads what carries scheduling meaning (nodes,
workloads, queues...) and sets the rest aside, counting them (:class:`Skipped`) so that a
command says once what it skipped. What it must not do is skip an object that makes pods:

* a kind a reader reads is read (each reader says which: ``reads``);
* a kind gpufleet reads elsewhere (a Node given as a workload, a Queue to ``place --workload``)
  is an error saying where it belongs;
* a kind that makes pods, or carries scheduling meaning, but that gpufleet does not read
  (DaemonSet, CronJob, Kubeflow's TFJob, Kueue's ClusterQueue...) is an error naming it, what to
  give instead and what is supported (:data:`NOT_READ`);
* a kind known to carry no pods (:data:`NO_PODS`, by API group: a Knative ``Service`` is not a
  core ``Service``) is skipped by a reader that does not read it: a HorizontalPodAutoscaler and
  a KEDA ScaledObject make no pods, and the scenario reader reads them (how its workloads are
  autoscaled: ``gpufleet.io.kube.autoscaling``) while readers of workloads alone set them aside;
* any other kind (a custom resource) is skipped only when nothing in its ``spec`` looks like a
  pod: a pod template (``template``, ``jobTemplate``, ``...Template`` under ``spec``, at any
  depth) or a ``containers`` list; otherwise it is an error, since it may make pods.

It reads no files and knows nothing of what the kinds it reads mean.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from gpufleet.io.errors import InputError, quoted, shorten
from gpufleet.io.manifests import cluster_scoped, describe

#: Kinds that describe a cluster (``ClusterSpec`` is ``gpufleet.io.fleet.cluster_spec.KIND``).
CLUSTER_KINDS = ("ClusterSpec", "Node")
#: Kinds gpufleet reads somewhere, and where (for errors from the readers that do not).
READ_ELSEWHERE = {
    "ClusterSpec": "a cluster: give it with --cluster",
    "Node": "a cluster: give it with --cluster",
    "Queue": "read with queues and quotas: place or simulate --scenario, serve --scenario",
    "PriorityClass": "read with queues and quotas: place or simulate --scenario",
    "ResourceQuota": "read with queues and quotas: place or simulate --scenario",
    "PodGroup": "read with queues and gangs: place or simulate --scenario, submit",
    "PyTorchJob": "read as a gang: place or simulate --scenario, submit",
    "MPIJob": "read as a gang: place or simulate --scenario, submit",
    "RayCluster": "read as a gang: place or simulate --scenario, submit",
    "RayJob": "read as a gang: place or simulate --scenario, submit",
    "Pod": "a workload: --workload, --scenario or submit",
    "Job": "a workload: --workload, --scenario or submit",
    "Deployment": "a workload: --workload, --scenario or submit",
    "StatefulSet": "a workload: --workload, --scenario or submit",
    "ReplicaSet": "a workload: --workload, --scenario or submit",
    "AdmissionPolicy": "admission rules: serve --rules",
    "GpuFault": "a fault injected into a simulation: simulate or serve --scenario",
    "SpotInterruption": "nodes a simulation loses: simulate or serve --scenario",
    "NodeFailure": "nodes a simulation loses: simulate or serve --scenario",
    "SimulatedTelemetry": "the simulated GPUs' usage profiles: simulate or serve --scenario",
    "IdlePolicy": "what to do with idle GPU holders: simulate or serve --scenario",
    "InferenceLoad": "the requests an inference workload gets: simulate --scenario",
    "NodePool": "nodes an autoscaler adds and removes: simulate --scenario",
    **dict.fromkeys(
        ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"),
        "Dynamic Resource Allocation, read with a scenario: place or simulate --scenario, "
        "serve --scenario",
    ),
}

#: Kinds that make pods, or carry scheduling meaning, that gpufleet does not read: why it matters
#: and what to give instead.
NOT_READ = {
    "DaemonSet": "it makes a pod on each node its selector matches, placed by its controller, "
    "not admitted through a queue",
    "CronJob": "it makes Jobs on a schedule; give one run (its jobTemplate) as a Job",
    "ReplicationController": "it makes pods; give it as a ReplicaSet or Deployment",
    "TFJob": "it makes pods; give it as a PyTorchJob or MPIJob, or as Jobs",
    "XGBoostJob": "it makes pods; give it as a PyTorchJob or as Jobs",
    "PaddleJob": "it makes pods; give it as a PyTorchJob or as Jobs",
    "JAXJob": "it makes pods; give it as a PyTorchJob or as Jobs",
    "TrainJob": "it makes pods; give it as a PyTorchJob or as Jobs",
    "JobSet": "it makes pods; give its replicated jobs as Jobs (with a PodGroup for a gang)",
    "LeaderWorkerSet": "it makes pods; give it as a StatefulSet or Deployment",
    "InferenceService": "it makes pods; give its predictor as a Deployment",
    "Notebook": "it makes a pod; give it as a Pod or StatefulSet",
    "Workflow": "it makes pods; give its steps as Jobs or Pods",
    "SparkApplication": "it makes pods; give its driver and executors as Pods or Jobs",
    "ClusterQueue": "Kueue's quota; give it as a gpufleet Queue (gpufleet.dev/v1alpha1: "
    "spec.quota, borrowingLimit, lendingLimit, parent)",
    "LocalQueue": "Kueue's namespace queue; a gpufleet Queue's spec.namespaces says which "
    "namespaces submit to it",
    "ResourceFlavor": "Kueue's flavors; a gpufleet Queue's spec.gpuModels and per-model quotas "
    "(nvidia.com/gpu.<model>) play their part",
    "Cohort": "Kueue's cohort; give it as a parent Queue",
    "WorkloadPriorityClass": "Kueue's priorities; give it as a PriorityClass",
}

#: API groups ("" is the core group) and the kinds of each that carry no pods.
NO_PODS: dict[str, frozenset[str]] = {
    group: frozenset(kinds.split())
    for group, kinds in {
        "": "ConfigMap Secret Service ServiceAccount Endpoints PersistentVolumeClaim "
        "PersistentVolume Namespace LimitRange Event PodTemplate",
        "apps": "ControllerRevision",
        "autoscaling": "HorizontalPodAutoscaler",
        "autoscaling.k8s.io": "VerticalPodAutoscaler",
        "policy": "PodDisruptionBudget PodSecurityPolicy",
        "networking.k8s.io": "NetworkPolicy Ingress IngressClass",
        "gateway.networking.k8s.io": "Gateway GatewayClass HTTPRoute GRPCRoute TCPRoute "
        "TLSRoute UDPRoute ReferenceGrant",
        "rbac.authorization.k8s.io": "Role RoleBinding ClusterRole ClusterRoleBinding",
        "apiextensions.k8s.io": "CustomResourceDefinition",
        "admissionregistration.k8s.io": "MutatingWebhookConfiguration "
        "ValidatingWebhookConfiguration ValidatingAdmissionPolicy "
        "ValidatingAdmissionPolicyBinding",
        "storage.k8s.io": "StorageClass CSIDriver CSINode VolumeAttachment",
        "snapshot.storage.k8s.io": "VolumeSnapshot VolumeSnapshotClass VolumeSnapshotContent",
        "coordination.k8s.io": "Lease",
        "discovery.k8s.io": "EndpointSlice",
        "node.k8s.io": "RuntimeClass",
        "apiregistration.k8s.io": "APIService",
        "monitoring.coreos.com": "PrometheusRule ServiceMonitor PodMonitor Probe "
        "AlertmanagerConfig",
        "cert-manager.io": "Certificate CertificateRequest Issuer ClusterIssuer",
        "kyverno.io": "Policy ClusterPolicy",
        "external-secrets.io": "ExternalSecret ClusterExternalSecret SecretStore "
        "ClusterSecretStore",
        "bitnami.com": "SealedSecret",
        "keda.sh": "ScaledObject TriggerAuthentication ClusterTriggerAuthentication",
        "kustomize.config.k8s.io": "Kustomization",
    }.items()
}

#: How deep into ``spec`` a pod template is looked for.
_SEARCH_DEPTH = 8


class Skipped:
    """What a read set aside: how many objects of each kind. :meth:`note` says it in a line."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, kind: str) -> None:
        self.counts[kind] += 1

    def __bool__(self) -> bool:
        return bool(self.counts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def kinds(self) -> str:
        """``ConfigMap (2), Service (1)``: most first, then by name."""
        ordered = sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))
        return ", ".join(f"{shorten(kind, 60)} ({count})" for kind, count in ordered)

    def note(self) -> str | None:
        """One line for the user, or None when nothing was skipped."""
        if not self.counts:
            return None
        total = self.total
        objects = "object" if total == 1 else "objects"
        return f"skipped {total} {objects} of kinds with no scheduling meaning: {self.kinds()}"


def api_group(api_version: object) -> str | None:
    """``apps`` of ``apps/v1``, ``""`` of ``v1``; None when there is no apiVersion."""
    if not isinstance(api_version, str):
        return None
    return api_version.rpartition("/")[0]


def pod_template_path(obj: Mapping[str, Any]) -> str | None:
    """Where ``obj`` holds a pod template or containers (``spec.template``), or None."""
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        return _find_pods(spec, "spec", _SEARCH_DEPTH)
    return None


def _find_pods(value: object, path: str, depth: int) -> str | None:
    if depth == 0:
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                continue
            here = f"{path}.{key}"
            if key == "containers" and isinstance(item, list):
                return here
            if (key == "template" or key.endswith("Template")) and isinstance(item, Mapping):
                return here
            found = _find_pods(item, here, depth - 1)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _find_pods(item, f"{path}[{i}]", depth - 1)
            if found is not None:
                return found
    return None


def shown_name(obj: Mapping[str, Any], kind: str) -> str:
    """``namespace/name`` (``name`` for cluster-scoped kinds) as far as ``obj`` says."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return ""
    name = shorten(metadata["name"], 100)
    namespace = metadata.get("namespace")
    if cluster_scoped(kind):
        return name
    return f"{shorten(namespace, 100) if isinstance(namespace, str) else 'default'}/{name}"


def triage(
    obj: Mapping[str, Any],
    source: str,
    location: str | None,
    reads: Collection[str],
    expected: str,
    skipped: Skipped | None,
    hints: Mapping[str, str] | None = None,
) -> bool:
    """True when a reader that ``reads`` these kinds should read ``obj``; False when it is set
    aside (counted in ``skipped``); an InputError (``expected``: what the reader reads) when it
    is neither. ``hints`` overrides :data:`READ_ELSEWHERE` for this reader."""
    kind = obj.get("kind")
    if isinstance(kind, str) and kind in reads:
        return True
    place = location
    if isinstance(kind, str):
        what = f"{shorten(kind, 60)} {shown_name(obj, kind)}".rstrip()
        place = f"{location}, {what}" if location else what
    if not isinstance(kind, str) or not kind:
        raise InputError(
            source, f"expected {expected}, got {describe(kind)} (not a Kubernetes object)",
            place, "kind",
        )  # fmt: skip
    elsewhere = {**READ_ELSEWHERE, **(hints or {})}.get(kind)
    if elsewhere is not None:
        raise InputError(
            source, f"expected {expected}, got kind {kind} ({elsewhere})", place, "kind"
        )
    if kind in NOT_READ:
        raise InputError(
            source,
            f"gpufleet does not read kind {kind}: {NOT_READ[kind]} (supported: {expected})",
            place,
            "kind",
        )
    group = api_group(obj.get("apiVersion"))
    if any(kind in kinds for g, kinds in NO_PODS.items() if group is None or g == group):
        if skipped is not None:
            skipped.add(kind)
        return False
    pods_at = pod_template_path(obj)
    if pods_at is not None:
        version = obj.get("apiVersion")
        raise InputError(
            source,
            f"kind {kind} ({quoted(version) if version is not None else 'no apiVersion'}) has a "
            f"pod template at {pods_at}, so it may make pods, but gpufleet does not read it "
            f"(supported: {expected})",
            place,
            "kind",
        )
    if skipped is not None:
        skipped.add(kind)
    return False
