"""What an idle policy's steps do to a workload on Kubernetes, through the API server.

Owns :class:`KubeIdleActions`, the :class:`~gpufleet.service.capabilities.IdleActions` of
:class:`~gpufleet.service.kube_plane.KubeControlPlane`, and the calls behind them:

* Stop: a policy/v1 ``Eviction`` of each of its pods (``POST pods/{name}/eviction``), so that
  PodDisruptionBudgets apply: a 429 (a budget forbids it now) is not done, and is asked again
  next round, as ``kubectl drain`` retries; a pod already gone (404) counts as evicted.
* ScaleToZero: ``spec.replicas: 0`` on the ``scale`` subresource of the Deployment or
  StatefulSet that makes its pods, found through the pods' controller ``ownerReferences``
  (a ReplicaSet's own controller is its Deployment), never from an annotation.
* Checkpoint: the annotation :data:`~gpufleet.model.idle.CHECKPOINT_REQUESTED_ANNOTATION`
  (the time asked) on each pod, for the workload's own checkpointing to watch.
* Preemptible: the label :data:`~gpufleet.model.idle.PREEMPTIBLE_LABEL` on each pod, which the
  kube backend turns into the core's ``WorkloadDemoted`` (the scheduler lowers the workload).

None of them touches a workload a pod of which the node autoscalers are told to leave running
(``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``, ``karpenter.sh/do-not-disrupt:
"true"``, not the ones gpufleet writes on its gangs: :mod:`gpufleet.io.kube.disruption`):
:func:`protected` names the pod, and the step is done without acting, saying so (not asked
again next round: the annotation is a standing wish).

Each returns an :class:`~gpufleet.service.plane_book.IdleOutcome`; the reclaimer records the event.
The calls decide nothing and hold no lock (:class:`KubeIdleActions` copies the pods it acts on
first, under the plane's lock).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.io.kube.disruption import protection
from gpufleet.kube_client.api import ApiError, KubeApi, rfc3339
from gpufleet.kube_client.writer import ObjectWriter
from gpufleet.model.idle import CHECKPOINT_REQUESTED_ANNOTATION, PREEMPTIBLE_LABEL
from gpufleet.model.workload import split_workload_key
from gpufleet.service.plane_book import IdleOutcome, PlaneBook
from gpufleet.service.records import POD_PENDING, POD_RUNNING

Obj = dict[str, Any]
#: The kinds whose ``scale`` subresource ScaleToZero patches.
SCALED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")


def protected(objects: Sequence[Obj], what: str) -> IdleOutcome | None:
    """The outcome of a step that must not act (``what``: "not stopped"...) because a pod of
    ``objects`` is protected from disruption; None when none is."""
    for obj in objects:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        why = protection(annotations)
        if why is not None:
            name = (obj.get("metadata") or {}).get("name")
            return IdleOutcome(note=f"{what}: pod {name} is annotated {why}")
    return None


def evict_pods(api: KubeApi, pods: Sequence[tuple[str, str]]) -> IdleOutcome:
    """Evict each (namespace, name); not done while a budget or an error keeps one."""
    evicted: list[str] = []
    kept: list[str] = []
    for namespace, name in pods:
        try:
            api.evict(namespace, name)
        except ApiError as error:
            if error.status == 404:
                continue
            if error.status == 429:
                kept.append(f"pod {name}: a PodDisruptionBudget forbids it now ({error.message})")
            else:
                kept.append(f"pod {name}: {error}")
            continue
        evicted.append(name)
    done = f"evicted {', '.join(evicted)}" if evicted else ""
    if kept:
        told = "; ".join(kept)
        return IdleOutcome(False, f"{done}; not evicted: {told}; tried again next round"
                           if done else f"not evicted: {told}; tried again next round")  # fmt: skip
    return IdleOutcome(True, done or "its pods were gone already")


def controller_of(obj: Obj | None) -> tuple[str, str] | None:
    """(kind, name) of an object's controller owner reference."""
    for ref in (obj or {}).get("metadata", {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def owner_to_scale(writer: ObjectWriter, namespace: str, pods: Sequence[Obj]) -> tuple[str, str]:
    """The (kind, name) whose replicas make ``pods``: their controller (a ReplicaSet's own
    Deployment when it has one); ("", "") for none. Never an annotation: anyone who writes a
    pod may write one, naming any Deployment of its namespace."""
    for obj in pods:
        owner = controller_of(obj)
        if owner is not None and owner[0] == "ReplicaSet":
            above = controller_of(writer.get("ReplicaSet", namespace, owner[1]))
            return above if above is not None and above[0] == "Deployment" else owner
        if owner is not None and owner[0] in SCALED_KINDS:
            return owner
    return "", ""


def scale_to_zero(writer: ObjectWriter, namespace: str, kind: str, name: str) -> IdleOutcome:
    """Patch the ``scale`` subresource of ``kind``/``name`` to 0 replicas."""
    try:
        before = writer.get(kind, namespace, name)
        writer.patch(kind, namespace, name, {"spec": {"replicas": 0}}, subresource="scale")
    except ApiError as error:
        return IdleOutcome(False, f"scaling {kind} {name} failed ({error}); tried again next round")
    if before is None:
        return IdleOutcome(note=f"{kind} {name} was gone already")
    replicas = (before.get("spec") or {}).get("replicas")
    return IdleOutcome(note=f"{kind} {name} scaled from {replicas} to 0 replicas")


def mark_pods(
    writer: ObjectWriter, pods: Sequence[tuple[str, str]], patch: Obj, what: str
) -> IdleOutcome:
    """Merge-patch each pod's metadata with ``patch``; a pod gone is skipped."""
    failed: list[str] = []
    for namespace, name in pods:
        try:
            writer.patch("Pod", namespace, name, {"metadata": patch})
        except ApiError as error:
            if error.status != 404:
                failed.append(f"pod {name}: {error}")
    if failed:
        return IdleOutcome(False, f"{what} not set on {'; '.join(failed)}; tried again next round")
    return IdleOutcome(note=f"{what} set on its pods")


def request_checkpoint(
    writer: ObjectWriter, pods: Sequence[tuple[str, str]], at: float
) -> IdleOutcome:
    annotation = {"annotations": {CHECKPOINT_REQUESTED_ANNOTATION: rfc3339(at)}}
    return mark_pods(writer, pods, annotation, f"annotation {CHECKPOINT_REQUESTED_ANNOTATION}")


def mark_preemptible(writer: ObjectWriter, pods: Sequence[tuple[str, str]]) -> IdleOutcome:
    found = mark_pods(writer, pods, {"labels": {PREEMPTIBLE_LABEL: "true"}},
                      f"label {PREEMPTIBLE_LABEL}=true")  # fmt: skip
    if not found.done:
        return found
    return IdleOutcome(note=f"{found.note}; the scheduler lowers it to preemptible at the "
                       "lowest priority")  # fmt: skip


class KubeIdleActions:
    """What the idle policies' steps do on Kubernetes (see the module docstring): acting on
    the workload's pods not finished, as the plane's ``writer`` (its own identity)."""

    def __init__(
        self, book: PlaneBook, writer: ObjectWriter, cached_pods: Callable[[], Mapping[str, Obj]]
    ) -> None:
        self.book = book
        self.writer = writer
        #: The pods the informers hold, by ``namespace/name`` (read under the plane's lock).
        self.cached_pods = cached_pods

    def stop_idle(self, key: str, by: str) -> IdleOutcome:
        """Evict the workload's pods through the Eviction API, unless a pod of it is protected
        from disruption."""
        names, objects = self._live_pods(key)
        kept = protected(objects, "not stopped")
        return kept or evict_pods(self.writer.api, names)

    def scale_to_zero(self, key: str, by: str) -> IdleOutcome:
        """Scale its Deployment or StatefulSet to zero; pods of neither are evicted (neither
        when a pod of it is protected from disruption)."""
        objects = self._live_pods(key)[1]
        kept = protected(objects, "not scaled to zero")
        if kept is not None:
            return kept
        namespace = split_workload_key(key)[0]
        kind, name = owner_to_scale(self.writer, namespace, objects)
        if not kind:
            evicted = self.stop_idle(key, by)
            why = "no Deployment or StatefulSet makes its pods: evicted instead"
            return IdleOutcome(evicted.done, f"{why}; {evicted.note}")
        return scale_to_zero(self.writer, namespace, kind, name)

    def request_checkpoint(self, key: str, at: float) -> IdleOutcome:
        return request_checkpoint(self.writer, self._live_pods(key)[0], at)

    def demote(self, key: str) -> IdleOutcome:
        names, objects = self._live_pods(key)
        kept = protected(objects, "not made preemptible")
        return kept or mark_preemptible(self.writer, names)

    def _live_pods(self, key: str) -> tuple[list[tuple[str, str]], list[Obj]]:
        """(namespace, name) of the workload's pods not finished, and their cached objects."""
        with self.book.lock:
            record = self.book.records.get(key)
            if record is None:
                return [], []
            names = [
                (p.pod.namespace, p.pod.name)
                for p in record.pods.values()
                if p.state in (POD_RUNNING, POD_PENDING)
            ]
            cached = self.cached_pods()
            objects = [dict(cached[f"{ns}/{n}"]) for ns, n in names if f"{ns}/{n}" in cached]
        return names, objects
