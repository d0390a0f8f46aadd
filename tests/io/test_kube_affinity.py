"""Pod affinity and anti-affinity, topology spread, preferred node affinity and extended
resources, read from Kubernetes objects as the model carries them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpufleet.io.kube.nodes import node_from_object
from gpufleet.io.kube.pods import pods_from_object
from gpufleet.model import GFD_LABELS, NodeSelectorRequirement, NodeSelectorTerm, Pod
from gpufleet.model.affinity import (
    PlacementRules,
    PodAffinityTerm,
    PreferredNodeTerm,
    SpreadConstraint,
    WeightedPodAffinityTerm,
)
from gpufleet.model.selectors import LabelRequirement, LabelSelector, PodSelector
from gpufleet.testing import kube_objects as ko

HOST = GFD_LABELS.HOSTNAME

#: The seed article's example (004): replicas kept on separate nodes.
SEED = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: training-job}}
    spec:
      containers:
      - name: main
        resources: {limits: {nvidia.com/gpu: 1}}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchExpressions:
              - key: app
                operator: In
                values:
                - training-job
            topologyKey: kubernetes.io/hostname
"""


def pods_of(text: str) -> list[Pod]:
    return [t.pod for t in pods_from_object(yaml.safe_load(text), "x.yaml", "document 1")]


def pod_with(**spec: Any) -> Pod:
    labels = spec.pop("labels", {"app": "web", "pod-template-hash": "abc"})
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": labels},
        "spec": {"containers": [{"name": "c"}], **spec},
    }
    return pods_from_object(obj, "x.yaml", "document 1")[0].pod


def selector(**labels: str) -> LabelSelector:
    return LabelSelector(tuple(LabelRequirement(k, "In", (v,)) for k, v in sorted(labels.items())))


def test_seed_anti_affinity_is_read_for_every_replica() -> None:
    pods = pods_of(SEED)
    term = PodAffinityTerm(
        PodSelector(
            LabelSelector((LabelRequirement("app", "In", ("training-job",)),)),
            frozenset({"ml"}),
        ),
        HOST,
    )
    assert [p.rules for p in pods] == [PlacementRules(pod_anti_affinity=(term,))] * 2
    assert pods[0].signature == pods[1].signature


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        pytest.param({}, frozenset({"ml"}), id="own-namespace-by-default"),
        pytest.param({"namespaces": ["a", "b"]}, frozenset({"a", "b"}), id="listed"),
        pytest.param({"namespaceSelector": {}}, None, id="empty-selector-means-all"),
        pytest.param(
            {
                "namespaces": ["a"],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "b"}},
            },
            frozenset({"a", "b"}),
            id="listed-and-selected-by-name",
        ),
        pytest.param(
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["c"]}
                    ]
                }
            },
            frozenset({"c"}),
            id="selected-by-name-expression",
        ),
    ],
)
def test_term_namespaces(term: dict[str, Any], expected: frozenset[str] | None) -> None:
    pod = pod_with(
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST, **term}
                ]
            }
        }
    )
    assert pod.rules is not None
    assert pod.rules.pod_affinity[0].selector.namespaces == expected


def test_match_and_mismatch_label_keys_take_the_pods_own_values() -> None:
    pod = pod_with(
        affinity={
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 30,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"app": "web"}},
                            "topologyKey": HOST,
                            "matchLabelKeys": ["pod-template-hash", "absent"],
                            "mismatchLabelKeys": ["tenant"],
                        },
                    }
                ]
            }
        },
        labels={"app": "web", "pod-template-hash": "abc", "tenant": "t1"},
    )
    assert pod.rules is not None
    (preferred,) = pod.rules.preferred_pod_anti_affinity
    assert preferred == WeightedPodAffinityTerm(
        30,
        PodAffinityTerm(
            PodSelector(
                LabelSelector(
                    (
                        LabelRequirement("app", "In", ("web",)),
                        LabelRequirement("pod-template-hash", "In", ("abc",)),
                        LabelRequirement("tenant", "NotIn", ("t1",)),
                    )
                ),
                frozenset({"ml"}),
            ),
            HOST,
        ),
    )


def test_spread_constraints_with_defaults_and_match_label_keys() -> None:
    pod = pod_with(
        topologySpreadConstraints=[
            {
                "maxSkew": 2,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
                "matchLabelKeys": ["pod-template-hash"],
                "minDomains": 3,
            },
            {
                "maxSkew": 1,
                "topologyKey": HOST,
                "whenUnsatisfiable": "ScheduleAnyway",
                "nodeAffinityPolicy": "Ignore",
                "nodeTaintsPolicy": "Honor",
            },
        ]
    )
    assert pod.rules is not None
    assert pod.rules.topology_spread == (
        SpreadConstraint(
            2,
            "topology.kubernetes.io/zone",
            False,
            LabelSelector(
                (
                    LabelRequirement("app", "In", ("web",)),
                    LabelRequirement("pod-template-hash", "In", ("abc",)),
                )
            ),
            3,
        ),
        SpreadConstraint(1, HOST, True, None, 1, honor_node_affinity=False, honor_taints=True),
    )


def test_preferred_node_affinity() -> None:
    pod = pod_with(
        affinity={
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 80,
                        "preference": {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["z1"]}
                            ]
                        },
                    }
                ]
            }
        }
    )
    assert pod.rules == PlacementRules(
        preferred_node_affinity=(
            PreferredNodeTerm(
                80, NodeSelectorTerm((NodeSelectorRequirement("zone", "In", ("z1",)),))
            ),
        )
    )


def test_a_pod_without_rules_keeps_the_signature_it_had() -> None:
    pod = pod_with(labels={"app": "x"})
    assert pod.rules is None
    assert pod.extended == ()
    assert len(pod.signature) == 7


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        pytest.param([{"limits": {"rdma/hca": 1}}], [], (("rdma/hca", 1),), id="limits-stand-in"),
        pytest.param(
            [{"limits": {"rdma/hca": 1}}, {"limits": {"rdma/hca": 2, "amd.com/gpu": 1}}],
            [],
            (("amd.com/gpu", 1), ("rdma/hca", 3)),
            id="summed-over-containers",
        ),
        pytest.param(
            [{"limits": {"example.com/foo": 1}}],
            [{"limits": {"example.com/foo": 4}}],
            (("example.com/foo", 4),),
            id="largest-init-container",
        ),
        pytest.param(
            [{"limits": {"hugepages-2Mi": "1Gi", "ephemeral-storage": "1Gi"}}],
            [],
            (),
            id="native-resources-are-not-extended",
        ),
    ],
)
def test_extended_resource_requests(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]],
    expected: tuple[tuple[str, int], ...],
) -> None:
    pod = pod_with(
        containers=[{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)],
        initContainers=[{"name": f"i{i}", "resources": r} for i, r in enumerate(init)],
    )
    assert pod.extended == expected


def test_nodes_advertise_extended_resources() -> None:
    obj = ko.gpu_node("n1", extra_resources={"rdma/hca": "2", "example.com/zero": "0"})
    node = node_from_object(obj, "nodes.yaml")
    assert node.extended == (("rdma/hca", 2),)
