"""The shipped RBAC against what gpufleet's components were seen asking the API server.

:func:`account_grants` reads what the Roles and ClusterRoles bound to one ServiceAccount grant,
from deploy/*.yaml or the Helm chart's rendering; :func:`missing` and :func:`unused` compare
that with the accesses a component made against the fake API server
(:mod:`tests.fakes.kube_api.access`), the way the API server's RBAC authorizer matches them:
same API group, resource (with subresource) and verb; a rule's ``resourceNames`` only match a
request that names one of them; a Role's rules only in its namespace.

Run as a script over the file a whole test run wrote with ``GPUFLEET_FAKE_KUBE_ACCESS_LOG``::

    GPUFLEET_FAKE_KUBE_ACCESS_LOG=/tmp/access.jsonl pytest -p no:randomly tests/backends/kube
    python -m tests.deploy.rbac_evidence /tmp/access.jsonl

it prints, per component (the identity its test client's token names), every access the
shipped roles do not grant, and exits 1 if there is one. (Unused grants are only checked by
tests/deploy/test_rbac_evidence.py, whose workloads are meant to use everything: a partial run
would leave grants unused that are not.)

The same check over a real API server's audit log (JSON lines, level Metadata or more), for
components that ran there as their ServiceAccounts (docs/security/supply-chain.md says how)::

    python -m tests.deploy.rbac_evidence --audit /path/to/audit.log
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.deploy.helm_render import Chart, manifest_objects, render
from tests.deploy.support import CHART, DEPLOY, SCHEDULER_NAMESPACE, load_objects
from tests.fakes.kube_api.access import Access, read_access_log

Obj = dict[str, Any]


@dataclass(frozen=True, order=True)
class Grant:
    """One (API group, resource, verb) a rule grants, limited to object ``name`` ("" any) and
    to ``namespace`` ("" everywhere: a ClusterRole bound cluster-wide)."""

    group: str
    resource: str
    verb: str
    name: str = ""
    namespace: str = ""

    def allows(self, access: Access) -> bool:
        return (
            (self.group, self.resource, self.verb) == (access.group, access.resource, access.verb)
            and (not self.name or self.name == access.name)
            and (not self.namespace or self.namespace == access.namespace)
        )

    def describe(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


@dataclass(frozen=True)
class Component:
    """A component's identity in the tests (its client's token) and in the cluster (its
    ServiceAccount)."""

    client: str
    service_account: str
    namespace: str = SCHEDULER_NAMESPACE


SCHEDULER = Component("gpufleet-scheduler", "gpufleet-scheduler")
AGENT = Component("gpufleet-agent", "gpufleet-agent")
#: Every component whose roles are checked; another joins with its client identity and
#: ServiceAccount (and a workload in tests/deploy/rbac_workloads.py).
COMPONENTS = (SCHEDULER, AGENT)


def rule_grants(rules: Iterable[Obj], namespace: str = "") -> set[Grant]:
    found: set[Grant] = set()
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    for name in rule.get("resourceNames") or [""]:
                        found.add(Grant(group, resource, verb, name, namespace))
    return found


def account_grants(objects: Iterable[Obj], component: Component) -> set[Grant]:
    """What the roles bound to ``component``'s ServiceAccount grant it."""
    objects = list(objects)
    roles: dict[tuple[str, str, str], list[Obj]] = {}
    for obj in objects:
        if obj.get("kind") in ("Role", "ClusterRole"):
            meta = obj["metadata"]
            roles[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj.get("rules") or []
    subject = {
        "kind": "ServiceAccount",
        "name": component.service_account,
        "namespace": component.namespace,
    }
    found: set[Grant] = set()
    for obj in objects:
        if obj.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if subject not in obj.get("subjects", []):
            continue
        bound_in = obj["metadata"].get("namespace", "") if obj["kind"] == "RoleBinding" else ""
        ref = obj["roleRef"]
        role_namespace = bound_in if ref["kind"] == "Role" else ""
        rules = roles.get((ref["kind"], role_namespace, ref["name"]))
        assert rules is not None, f"{obj['kind']} {obj['metadata']['name']} names no role here"
        found |= rule_grants(rules, bound_in)
    return found


def missing(grants: set[Grant], accesses: Iterable[Access]) -> set[Access]:
    """The accesses no grant allows: the API server would have answered 403."""
    return {access for access in accesses if not any(g.allows(access) for g in grants)}


def unused(grants: set[Grant], accesses: Iterable[Access]) -> set[Grant]:
    """The grants no access needed."""
    accesses = list(accesses)
    return {grant for grant in grants if not any(grant.allows(a) for a in accesses)}


def service_account_user(component: Component) -> str:
    """The user name the API server gives ``component``'s ServiceAccount."""
    return f"system:serviceaccount:{component.namespace}:{component.service_account}"


def audit_accesses(lines: Iterable[str]) -> list[Access]:
    """The accesses of an API server's audit log (one ``audit.k8s.io/v1`` Event a line), each
    under the component whose ServiceAccount made it (or was impersonated); others' are left
    out, as are non-resource requests and the RequestReceived stage (a request's later stages
    repeat it)."""
    users = {service_account_user(c): c.client for c in COMPONENTS}
    found: list[Access] = []
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        user = (event.get("impersonatedUser") or event.get("user") or {}).get("username", "")
        ref = event.get("objectRef")
        if user not in users or ref is None or event.get("stage") == "RequestReceived":
            continue
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource = f"{resource}/{ref['subresource']}"
        found.append(
            Access(
                users[user],
                event["verb"],
                ref.get("apiGroup", ""),
                resource,
                ref.get("namespace", ""),
                ref.get("name", ""),
            )
        )
    return found


def deploy_objects() -> list[Obj]:
    """Every object of deploy/*.yaml (what ``kubectl apply -k deploy/`` installs and more)."""
    return [item.obj for path in sorted(DEPLOY.glob("*.yaml")) for item in load_objects(path)]


def chart_objects() -> list[Obj]:
    """The Helm chart's objects with its default values, released into gpufleet-system."""
    return manifest_objects(render(Chart.load(CHART), "gpufleet", SCHEDULER_NAMESPACE, {}))


def main(argv: list[str]) -> int:
    """See the module docstring."""
    if len(argv) == 2 and argv[0] == "--audit":
        with Path(argv[1]).open() as lines:
            records = [("audit log", access) for access in audit_accesses(lines)]
    elif len(argv) == 1:
        records = read_access_log(Path(argv[0]))
    else:
        usage = "usage: python -m tests.deploy.rbac_evidence [--audit] LOG"
        print(usage, file=sys.stderr)
        return 2
    failed = False
    for source, objects in (("deploy/", deploy_objects()), ("the chart", chart_objects())):
        for component in COMPONENTS:
            grants = account_grants(objects, component)
            used = [access for _, access in records if access.client == component.client]
            for access in sorted(missing(grants, used)):
                modules = sorted({m for m, a in records if a == access})
                print(f"{source} {component.client}: not granted {access} (by {modules})")
                failed = True
            print(f"{source} {component.client}: {len(set(used))} distinct accesses checked")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
