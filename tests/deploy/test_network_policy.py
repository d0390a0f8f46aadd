"""deploy/networkpolicy.yaml and the chart's rendering of it (issue 26, item 15): every gpufleet
pod is selected by a policy; ingress only to the ports its containers serve, metrics only from
the monitoring namespace; the scheduler's and the agent's egress only to the API server's ports;
every field one the NetworkPolicy API (networking.k8s.io/v1) has."""

from __future__ import annotations

import inspect
import ipaddress
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.cli.serve import serve
from tests.deploy.rbac_evidence import chart_objects, deploy_objects
from tests.deploy.support import SCHEDULER_NAMESPACE

Obj = dict[str, Any]
MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
API_SERVER_PORTS = [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]
SERVE_PORT = inspect.signature(serve).parameters["port"].default
SOURCES: dict[str, Callable[[], list[Obj]]] = {"deploy": deploy_objects, "chart": chart_objects}

SPEC_FIELDS = {"podSelector", "policyTypes", "ingress", "egress"}
PEER_FIELDS = {"podSelector", "namespaceSelector", "ipBlock"}
PORT_FIELDS = {"port", "protocol", "endPort"}
SELECTOR_FIELDS = {"matchLabels", "matchExpressions"}


@pytest.fixture(params=list(SOURCES), scope="module")
def objects(request: pytest.FixtureRequest) -> list[Obj]:
    found: list[Obj] = SOURCES[request.param]()
    return found


def policies(objects: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "NetworkPolicy"}


def selects(policy: Obj, labels: dict[str, str]) -> bool:
    wanted = policy["spec"]["podSelector"].get("matchLabels", {})
    return all(labels.get(key) == value for key, value in wanted.items())


def workloads(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]


# ------------------------------------------------------------------------- the API's fields
def problems(policy: Obj) -> list[str]:
    """What in ``policy`` the NetworkPolicy API would refuse or not know."""
    found: list[str] = []
    spec = policy.get("spec") or {}
    if policy.get("apiVersion") != "networking.k8s.io/v1":
        found.append(f"apiVersion {policy.get('apiVersion')}")
    if not policy["metadata"].get("namespace"):
        found.append("no namespace")
    found += [f"spec.{key}" for key in set(spec) - SPEC_FIELDS]
    if "podSelector" not in spec or set(spec["podSelector"]) - SELECTOR_FIELDS:
        found.append("podSelector")
    types = spec.get("policyTypes") or []
    if not types or set(types) - {"Ingress", "Egress"}:
        found.append(f"policyTypes {types}")
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for rule in spec.get(direction) or []:
            found += [f"{direction}.{key}" for key in set(rule) - {peers_key, "ports"}]
            for peer in rule.get(peers_key) or []:
                found += [f"peer.{key}" for key in set(peer) - PEER_FIELDS]
                if not peer:
                    found.append("an empty peer (everyone)")
                if "ipBlock" in peer:
                    try:
                        ipaddress.ip_network(peer["ipBlock"]["cidr"])
                    except ValueError:
                        found.append(f"cidr {peer['ipBlock'].get('cidr')}")
            for port in rule.get("ports") or []:
                found += [f"port.{key}" for key in set(port) - PORT_FIELDS]
                if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
                    found.append(f"protocol {port.get('protocol')}")
        if direction.capitalize() not in types and spec.get(direction):
            found.append(f"{direction} rules without policyType {direction.capitalize()}")
    return found


def test_every_policy_is_valid(objects: list[Obj]) -> None:
    found = {name: problems(policy) for name, policy in policies(objects).items()}
    assert found == {name: [] for name in found}
    assert set(found) == {"gpufleet-scheduler", "gpufleet-agent", "gpufleet-serve"}


PROBLEM_CASES = [
    pytest.param({"podSelector": {}, "policyTypes": ["Ingress"], "ingres": []}, id="unknown-field"),
    pytest.param({"podSelector": {}, "policyTypes": ["Inbound"]}, id="policy-type"),
    pytest.param({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{}]}]},
                 id="empty-peer"),
    pytest.param({"podSelector": {}, "policyTypes": ["Egress"],
                  "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.300/32"}}]}]}, id="cidr"),
    pytest.param({"podSelector": {}, "policyTypes": ["Ingress"],
                  "ingress": [{"ports": [{"port": 80, "protocol": "HTTP"}]}]}, id="protocol"),
    pytest.param({"podSelector": {}, "policyTypes": ["Ingress"], "egress": [{"ports": []}]},
                 id="type-missing"),
]  # fmt: skip


@pytest.mark.parametrize("spec", PROBLEM_CASES)
def test_the_field_check_finds_what_the_api_refuses(spec: Obj) -> None:
    policy = {"apiVersion": "networking.k8s.io/v1", "metadata": {"namespace": "x"}, "spec": spec}
    assert problems(policy) != []


# ------------------------------------------------------------------------ what they allow
def test_every_gpufleet_pod_is_selected_by_one_policy_with_both_directions(
    objects: list[Obj],
) -> None:
    for workload in workloads(objects):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        chosen = [p for p in policies(objects).values() if selects(p, labels)]
        assert len(chosen) == 1, workload["metadata"]["name"]
        (policy,) = chosen
        assert policy["metadata"]["namespace"] == SCHEDULER_NAMESPACE
        assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]


def test_ingress_only_to_the_ports_the_pods_serve_and_only_from_monitoring(
    objects: list[Obj],
) -> None:
    for workload in workloads(objects):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        (policy,) = [p for p in policies(objects).values() if selects(p, labels)]
        served = [
            {"port": port["containerPort"], "protocol": port.get("protocol", "TCP")}
            for container in workload["spec"]["template"]["spec"]["containers"]
            for port in container.get("ports", [])
        ]
        (rule,) = policy["spec"]["ingress"]
        assert rule["ports"] == served, workload["metadata"]["name"]
        assert rule["from"] == [MONITORING]


def test_egress_only_to_the_api_servers_ports(objects: list[Obj]) -> None:
    for name in ("gpufleet-scheduler", "gpufleet-agent"):
        (rule,) = policies(objects)[name]["spec"]["egress"]
        assert rule["ports"] == API_SERVER_PORTS, name
        assert rule["to"], "a rule with no peers would allow every address"


def test_serve_is_reached_on_its_port_from_its_clients_and_monitoring(objects: list[Obj]) -> None:
    policy = policies(objects)["gpufleet-serve"]
    labels = policy["spec"]["podSelector"]["matchLabels"]
    assert labels["app.kubernetes.io/component"] == "serve"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": SERVE_PORT, "protocol": "TCP"}]
    assert MONITORING in rule["from"]
    assert all(peer.get("namespaceSelector", {}).get("matchLabels") for peer in rule["from"])
