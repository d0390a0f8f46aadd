"""Pod semantics the real API server implements: binding, eviction and graceful deletion.

* Binding (``pods/{name}/binding`` or the ``bindings`` collection) sets ``spec.nodeName``,
  sets condition PodScheduled=True and copies the Binding's annotations onto the pod. A pod
  already bound or being deleted is a 409. The node is not checked. The answer is a ``Status``
  (as on the real server), which the python client cannot deserialize into ``V1Binding``
  (it raises ``ValueError`` on the missing ``target``); call it with ``_preload_content=False``.
* Eviction honours ``deleteOptions.preconditions`` (``uid``, ``resourceVersion``): another
  pod of the name, or another version, is a 409 Conflict and nothing is deleted. It checks the
  PodDisruptionBudgets of the namespace live (there is no disruption
  controller). As that controller does for pods without a scale, the *expected* count is every
  pod the budget selects, and the *healthy* count those not being deleted whose Ready condition
  is True, or that have no Ready condition and phase Running. ``minAvailable`` and
  ``maxUnavailable`` (integers or percentages, rounded up) give the healthy pods needed; a
  healthy pod may go when one more than that is healthy, an unhealthy one when that many are.
  Pods that are Pending, Succeeded or Failed are evicted regardless, as on the real server.
  A blocked eviction is a 429 TooManyRequests.
* Graceful deletion: a bound pod that is not finished, deleted with a grace period above 0
  (from the request, else ``spec.terminationGracePeriodSeconds``, else 30) keeps existing with
  ``deletionTimestamp`` until it is deleted with grace 0 (the kubelet's part, played by tests).
"""

from __future__ import annotations

import math
from typing import Any

from tests.fakes.kube_api import errors
from tests.fakes.kube_api.resources import ResourceType
from tests.fakes.kube_api.selectors import match_label_selector_object
from tests.fakes.kube_api.store import Obj, Store, now_rfc3339

PODS = ResourceType("", "v1", "pods", "Pod", True, status_subresource=True)
PDBS = ResourceType(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, status_subresource=True
)


def success(code: int) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def bind(store: Store, namespace: str, name: str | None, binding: Obj) -> Obj:
    """Carry out a v1 Binding; ``name`` is the pod named in the URL (None for ``bindings``)."""
    meta = binding.get("metadata") or {}
    pod_name = name or meta.get("name")
    if not pod_name:
        raise errors.bad_request("a Binding needs metadata.name")
    if name and meta.get("name") not in (None, name):
        raise errors.bad_request("name in URL does not match name in Binding object")
    target = binding.get("target") or {}
    if target.get("kind") not in (None, "", "Node") or not target.get("name"):
        raise errors.ApiError(422, "target must name a Node", "Invalid")

    def assign(pod: Obj) -> Obj:
        why = ""
        if pod["metadata"].get("deletionTimestamp"):
            why = f"pod {pod_name} is being deleted, cannot be assigned to a host"
        elif pod.get("spec", {}).get("nodeName"):
            why = f'pod {pod_name} is already assigned to node "{pod["spec"]["nodeName"]}"'
        if why:
            raise errors.conflict("pods/binding", pod_name, "", why)
        pod.setdefault("spec", {})["nodeName"] = target["name"]
        if meta.get("annotations"):
            annotations = pod["metadata"].setdefault("annotations", {})
            annotations.update(meta["annotations"])
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
            }
        )
        status["conditions"] = conditions
        return pod

    store.mutate(PODS, namespace, pod_name, assign)
    return success(201)


def is_healthy(pod: Obj) -> bool:
    """Ready=True, or no Ready condition and phase Running."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return bool(status.get("phase") == "Running")


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def grace_period(pod: Obj, requested: int | None) -> int:
    """The effective grace period of a pod DELETE."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    if requested is not None:
        return max(0, requested)
    return int(spec.get("terminationGracePeriodSeconds", 30))


def delete_pod(store: Store, namespace: str, name: str, requested: int | None) -> Obj:
    with store.lock:
        pod = store.get(PODS, namespace, name)
        return store.delete(PODS, namespace, name, grace_period(pod, requested))


def _selector(pdb: Obj) -> Obj | None:
    selector: Obj | None = (pdb.get("spec") or {}).get("selector")
    return selector


def _check_budget(store: Store, namespace: str, pod: Obj) -> None:
    pdbs, _ = store.list(PDBS, namespace)
    pdbs = [
        p for p in pdbs if match_label_selector_object((p.get("spec") or {}).get("selector"), pod)
    ]
    if len(pdbs) > 1:
        raise errors.ApiError(
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support.",
            "InternalError",
        )
    if not pdbs:
        return
    pdb = pdbs[0]
    spec = pdb.get("spec") or {}
    pods, _ = store.list(PODS, namespace)
    selected = [p for p in pods if match_label_selector_object(spec.get("selector"), p)]
    expected = len(selected)
    healthy = sum(
        1 for p in selected if is_healthy(p) and not p["metadata"].get("deletionTimestamp")
    )
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    elif spec.get("maxUnavailable") is not None:
        desired = expected - _scaled(spec["maxUnavailable"], expected)
    else:
        return
    needed = 1 if is_healthy(pod) else 0
    if healthy - desired >= needed:
        return
    raise errors.ApiError(
        429,
        "Cannot evict pod as it would violate the pod's disruption budget.",
        "TooManyRequests",
        {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {pdb['metadata']['name']} needs "
                    f"{desired} healthy pods and has {healthy} currently",
                }
            ]
        },
    )


def evict(store: Store, namespace: str, name: str, eviction: Obj) -> Obj:
    """Carry out a policy/v1 Eviction."""
    options = eviction.get("deleteOptions") or {}
    preconditions = options.get("preconditions") or {}
    with store.lock:
        pod = store.get(PODS, namespace, name)
        for field in ("uid", "resourceVersion"):
            wanted, held = preconditions.get(field), pod["metadata"].get(field)
            if wanted is not None and wanted != held:
                raise errors.conflict(
                    "pods",
                    name,
                    "",
                    f"Precondition failed: {field} in precondition: {wanted}, "
                    f"{field} in object meta: {held}",
                )
        if pod["metadata"].get("deletionTimestamp"):
            return success(200)
        if (pod.get("status") or {}).get("phase") not in ("Pending", "Succeeded", "Failed"):
            _check_budget(store, namespace, pod)
        delete_pod(store, namespace, name, options.get("gracePeriodSeconds"))
    return success(201)
