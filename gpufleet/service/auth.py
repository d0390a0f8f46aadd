"""Who is asking and what they may do: API tokens, tenants, roles and admission rules.

A token maps to a tenant (a team) and a role. An admin manages queues, priority classes and
tokens and sees everything; a tenant sees and changes only its own workloads, in its own
namespaces, submitted to the queues it may use; a metrics token (Prometheus' scrape
credentials) reads ``/metrics`` and nothing else. ``/metrics`` names every tenant's pods, so
it is served to an admin or a metrics token only. Tokens are random 256-bit strings; only their
SHA-256 is stored (a slow password hash buys nothing for secrets of that entropy).

:class:`AdmissionRules` are the checks platform teams usually write in a policy engine
(Kyverno, Gatekeeper), read from an ``AdmissionPolicy`` YAML document::

    apiVersion: gpufleet.dev/v1alpha1
    kind: AdmissionPolicy
    metadata: {name: default}
    spec:
      requireGpuToleration: true          # GPU pods must tolerate the GPU nodes' taint
      maxGpusPerWorkload: {"*": 32, team-a: 8}   # per queue; "*" for any other queue
      tenants:
        team-a:
          queues: [team-a, shared]        # default: the queue named like the tenant and its
          namespaces: [team-a]            #   children; the namespace named like the tenant;
                                          #   a namespace is one tenant's (two: an error)
          gpuModels: [A100, T4]           # default: any
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.io.errors import InputError
from gpufleet.io.fields import check_fields
from gpufleet.io.manifests import Context, describe
from gpufleet.io.names import NameRule, rule_of
from gpufleet.model import Pod
from gpufleet.model.node import GFD_LABELS, TaintEffect
from gpufleet.model.queues import NAMESPACE_NOT_ADMITTED, Queue, queue_refusal
from gpufleet.model.workload import Workload
from gpufleet.service.records import requested_gpus

TOKEN_PREFIX = "gf_"
GPU_TAINT_KEY = "nvidia.com/gpu"
ADMIN = "admin"
TENANT = "tenant"
#: Reads ``/metrics`` only (a scraper's token: it names no tenant's workloads to change).
METRICS = "metrics"
ROLES = (ADMIN, TENANT, METRICS)


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ForbiddenError(Exception):
    """The caller may not do this (a 403)."""


@dataclass(frozen=True, slots=True)
class TenantRules:
    queues: tuple[str, ...] | None = None
    namespaces: tuple[str, ...] | None = None
    gpu_models: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class AdmissionRules:
    """See the module docstring."""

    require_gpu_toleration: bool = False
    max_gpus_per_workload: Mapping[str, float] = field(default_factory=dict)
    tenants: Mapping[str, TenantRules] = field(default_factory=dict)

    def for_tenant(self, tenant: str) -> TenantRules:
        return self.tenants.get(tenant, TenantRules())

    def namespace_tenants(self) -> dict[str, str]:
        """The tenant of each namespace a tenant's rules name (``tenants.<t>.namespaces``):
        the admin's map of whose a namespace is (a namespace no rule names is no tenant's)."""
        return {
            namespace: tenant
            for tenant, rules in self.tenants.items()
            for namespace in rules.namespaces or ()
        }


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request."""

    tenant: str
    role: str
    #: Queues it may submit to beyond the defaults (from its token); () for none.
    extra_queues: tuple[str, ...] = ()
    rules: TenantRules = field(default_factory=TenantRules)

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN

    @property
    def may_scrape(self) -> bool:
        """Whether it may read ``/metrics`` (every tenant's pods are named there)."""
        return self.role in (ADMIN, METRICS)

    @property
    def namespaces(self) -> tuple[str, ...]:
        return self.rules.namespaces or (self.tenant,)

    def default_namespace(self) -> str:
        return "default" if self.is_admin else self.namespaces[0]

    def allowed_queues(self, queues: Mapping[str, Queue]) -> list[str]:
        """The queues it may submit to, given the queue tree ([] for an admin: any)."""
        if self.is_admin:
            return []
        named = set(self.rules.queues) if self.rules.queues is not None else {self.tenant}
        named |= set(self.extra_queues)
        allowed = [name for name in queues if any(_within(queues, name, root) for root in named)]
        return sorted(allowed)

    def may_see(self, tenant: str) -> bool:
        return self.is_admin or tenant == self.tenant


def _within(queues: Mapping[str, Queue], name: str, root: str) -> bool:
    """``name`` is ``root`` or below it."""
    seen = 0
    current: str | None = name
    while current is not None and seen <= len(queues):
        if current == root:
            return True
        queue = queues.get(current)
        current = queue.parent if queue is not None else None
        seen += 1
    return False


def refuse_by_queue(workload: Workload, queues: Mapping[str, Queue]) -> None:
    """Refuse a workload whose queue does not admit its namespace or priority class (the
    scheduler would leave it waiting: the caller hears it at once), naming the field."""
    if workload.queue not in queues:
        return
    refusal = queue_refusal(queues, workload.queue, workload.namespace, workload.priority_class)
    if refusal is not None:
        reason, message = refusal
        field = "metadata.namespace" if reason == NAMESPACE_NOT_ADMITTED else PRIORITY_CLASS_FIELD
        raise InputError("request", message, field=field)


#: Where a pod names its priority class.
PRIORITY_CLASS_FIELD = "spec.priorityClassName"


def check_workload(
    principal: Principal, rules: AdmissionRules, workload: Workload, queues: Mapping[str, Queue]
) -> Workload:
    """``workload`` as admitted for ``principal`` (its pods limited to the tenant's GPU models),
    or :class:`ForbiddenError` / :class:`InputError` naming the rule it breaks."""
    label = f"workload {workload.key}"
    if not principal.is_admin:
        if workload.namespace not in principal.namespaces:
            raise ForbiddenError(
                f"{label}: tenant {principal.tenant!r} may not use namespace "
                f"{workload.namespace!r} (its namespaces: {', '.join(principal.namespaces)})"
            )
        allowed = principal.allowed_queues(queues)
        if workload.queue not in allowed:
            raise ForbiddenError(
                f"{label}: tenant {principal.tenant!r} may not submit to queue "
                f"{workload.queue!r} (allowed: {', '.join(allowed) or 'none'})"
            )
    gpus = sum(requested_gpus(pod) for pod in workload.pods)
    limit = rules.max_gpus_per_workload.get(workload.queue, rules.max_gpus_per_workload.get("*"))
    if limit is not None and gpus > limit:
        raise InputError(
            label,
            f"asks for {gpus:g} GPUs; queue {workload.queue!r} allows at most {limit:g} "
            "per workload",
        )
    pods = list(workload.pods)
    for i, pod in enumerate(pods):
        if rules.require_gpu_toleration and _uses_gpu(pod) and not _tolerates_gpu(pod):
            raise InputError(
                f"pod {pod.key}",
                f"asks for GPUs but does not tolerate the taint {GPU_TAINT_KEY} "
                "(add a toleration with key nvidia.com/gpu, operator Exists, "
                "effect NoSchedule)",
            )
        models = principal.rules.gpu_models
        if models is not None and _uses_gpu(pod) and not principal.is_admin:
            named = set(pod.gpu_models or ()) | {
                value for key, value in pod.node_selector if key == GFD_LABELS.PRODUCT
            }
            if not named <= models:
                outside = ", ".join(sorted(named - models))
                raise ForbiddenError(
                    f"pod {pod.key}: tenant {principal.tenant!r} may not use GPU model(s) "
                    f"{outside} (allowed: {', '.join(sorted(models))})"
                )
            if pod.gpu_models is None:
                pods[i] = replace(pod, gpu_models=models)
    return replace(workload, pods=tuple(pods))


def _uses_gpu(pod: Pod) -> bool:
    return pod.gpu.count > 0 or pod.gpu.mig_count > 0


def _tolerates_gpu(pod: Pod) -> bool:
    return any(
        (t.key == GPU_TAINT_KEY or (not t.key and t.operator == "Exists"))
        and t.effect in (None, TaintEffect.NO_SCHEDULE)
        for t in pod.tolerations
    )


# ---------------------------------------------------------------------------------- reading
def rules_from_object(obj: Mapping[str, Any], source: str) -> AdmissionRules:
    """An ``AdmissionPolicy`` document; errors name ``source`` and the field."""
    context = Context(source, "AdmissionPolicy")
    if obj.get("kind") != "AdmissionPolicy":
        raise context.error("kind", f"expected AdmissionPolicy, got {obj.get('kind')!r}")
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    check_fields(context, spec, "spec", ("maxGpusPerWorkload", "requireGpuToleration", "tenants"))
    require = spec.get("requireGpuToleration", False)
    if not isinstance(require, bool):
        raise context.error("spec.requireGpuToleration", f"expected true or false, got {require!r}")
    limits: dict[str, float] = {}
    for queue, value in context.mapping(
        spec.get("maxGpusPerWorkload"), "spec.maxGpusPerWorkload"
    ).items():
        if queue != "*":
            context.name(queue, f"spec.maxGpusPerWorkload.{queue}", rule_of("Queue"), "Queue")
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise context.error(
                f"spec.maxGpusPerWorkload.{queue}", f"expected a number of GPUs >= 0, got {value!r}"
            )
        limits[str(queue)] = float(value)
    tenants: dict[str, TenantRules] = {}
    owners: dict[str, str] = {}
    for name, body in context.mapping(spec.get("tenants"), "spec.tenants").items():
        path = f"spec.tenants.{name}"
        context.label_value(name, path)  # a tenant's name is its pods' gpufleet.dev/tenant label
        fields = context.mapping(body, path)
        check_fields(context, fields, path, ("queues", "namespaces", "gpuModels"))
        namespaces = _names(context, fields.get("namespaces"), f"{path}.namespaces", NameRule.LABEL)
        for i, namespace in enumerate(namespaces or ()):
            # A namespace is one tenant's: the Kubernetes plane files its pods under it.
            other = owners.setdefault(namespace, str(name))
            if other != name:
                raise context.error(
                    f"{path}.namespaces[{i}]",
                    f"namespace {namespace!r} is listed for tenant {other!r} already; a "
                    "namespace belongs to one tenant",
                )
        tenants[str(name)] = TenantRules(
            _names(context, fields.get("queues"), f"{path}.queues", rule_of("Queue")),
            namespaces,
            None
            if fields.get("gpuModels") is None
            else frozenset(_names(context, fields.get("gpuModels"), f"{path}.gpuModels") or ()),
        )
    return AdmissionRules(require, limits, tenants)


def _names(
    context: Context, value: object, field: str, rule: NameRule | None = None
) -> tuple[str, ...] | None:
    """A list of names (checked by ``rule`` when given: queues, namespaces)."""
    if value is None:
        return None
    items: Sequence[Any] = context.sequence(value, field)
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise context.error(f"{field}[{i}]", f"expected a name, got {describe(item)}")
        if rule is not None:
            context.name(item, f"{field}[{i}]", rule, "Queue")
        out.append(item)
    return tuple(out)
