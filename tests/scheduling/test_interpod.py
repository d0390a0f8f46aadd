"""Pod affinity and anti-affinity in the placement engine, case by case as kube-scheduler's
InterPodAffinity plugin decides them (filter and score), gangs, and the symmetric rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from gpufleet.model import GFD_LABELS, Node, Pod
from gpufleet.model.affinity import PlacementRules, PodAffinityTerm
from gpufleet.model.selectors import PodSelector
from gpufleet.scheduling.engine import Bound, PlacementEngine, Unschedulable
from gpufleet.scheduling.interpod import interpod_scores
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.target import TargetWorkload
from gpufleet.testing.builders import make_cluster, make_node, make_pod, pod_term, weighted

HOST = GFD_LABELS.HOSTNAME
ZONE = GFD_LABELS.ZONE

#: n1, n2 in zone z1, n3 in zone z2, n4 without a zone.
NODES = [
    make_node("n1", labels={ZONE: "z1"}),
    make_node("n2", labels={ZONE: "z1"}),
    make_node("n3", labels={ZONE: "z2"}),
    make_node("n4"),
]


def engine_with(
    running: Mapping[str, Sequence[Pod]], nodes: Sequence[Node] = NODES, policy: str = "bestfit"
) -> PlacementEngine:
    """An engine whose nodes already run ``running`` (node name -> pods)."""
    table = NodeTable(list(nodes))
    engine = PlacementEngine(
        table, make_policy(policy, table, PolicyContext(TargetWorkload((), ())))
    )
    for node, pods in running.items():
        for pod in pods:
            engine.reserve(pod, engine.demand(pod), table.row_of[node])
    return engine


def allowed(engine: PlacementEngine, pod: Pod) -> set[str]:
    """Nodes the pod may go to now, by the engine's filters (its own and running pods')."""
    demand = engine.demand(pod)
    mask = engine.feasible(demand)
    repelled = engine.repelled(pod)
    if repelled is not None:
        mask &= ~repelled
    return {engine.table.nodes[r].name for r in np.flatnonzero(mask)}


def labelled(name: str, namespace: str = "default", **labels: str) -> Pod:
    return make_pod(name, labels=labels, namespace=namespace)


def with_rules(name: str = "new", labels: Mapping[str, str] | None = None, **rules: object) -> Pod:
    return make_pod(name, labels=labels, rules=PlacementRules(**rules))  # type: ignore[arg-type]


DB_ON_N1 = {"n1": [labelled("db-0", app="db")]}
W = {"app": "w"}


@pytest.mark.parametrize(
    ("running", "pod", "expected"),
    [
        pytest.param({}, make_pod("plain"), {"n1", "n2", "n3", "n4"}, id="no-rules"),
        pytest.param(
            DB_ON_N1,
            with_rules(pod_affinity=(pod_term({"app": "db"}),)),
            {"n1"},
            id="affinity-hostname",
        ),
        pytest.param(
            DB_ON_N1,
            with_rules(pod_affinity=(pod_term({"app": "db"}, key=ZONE),)),
            {"n1", "n2"},
            id="affinity-zone-and-a-node-without-the-key-fails",
        ),
        pytest.param(
            DB_ON_N1,
            with_rules(pod_affinity=(pod_term({"app": "db"}, key="rack"),)),
            set(),
            id="affinity-key-no-node-has",
        ),
        pytest.param(
            {},
            with_rules(labels={"app": "db"}, pod_affinity=(pod_term({"app": "db"}, key=ZONE),)),
            {"n1", "n2", "n3"},
            id="affinity-first-of-its-group-goes-where-the-keys-are",
        ),
        pytest.param(
            {},
            with_rules(pod_affinity=(pod_term({"app": "db"}),)),
            set(),
            id="affinity-nothing-matches-and-not-itself",
        ),
        pytest.param(
            {"n1": [labelled("db", app="db")], "n2": [labelled("cache", tier="cache")]},
            with_rules(pod_affinity=(pod_term({"app": "db"}), pod_term({"tier": "cache"}))),
            set(),
            id="affinity-terms-must-all-match-one-pod",
        ),
        pytest.param(
            {"n1": [labelled("db", app="db", tier="cache")]},
            with_rules(pod_affinity=(pod_term({"app": "db"}), pod_term({"tier": "cache"}, ZONE))),
            {"n1"},
            id="affinity-one-pod-matching-all-terms",
        ),
        pytest.param(
            {"n1": [labelled("db", namespace="other", app="db")]},
            with_rules(pod_affinity=(pod_term({"app": "db"}),)),
            set(),
            id="affinity-own-namespace-only-by-default",
        ),
        pytest.param(
            {"n1": [labelled("db", namespace="other", app="db")]},
            with_rules(pod_affinity=(pod_term({"app": "db"}, namespaces=None),)),
            {"n1"},
            id="affinity-all-namespaces",
        ),
        pytest.param(
            {"n1": [labelled("web", app="web")]},
            with_rules(pod_anti_affinity=(pod_term({"app": "web"}),)),
            {"n2", "n3", "n4"},
            id="anti-affinity-hostname",
        ),
        pytest.param(
            {"n1": [labelled("web", app="web")]},
            with_rules(pod_anti_affinity=(pod_term({"app": "web"}, key=ZONE),)),
            {"n3", "n4"},
            id="anti-affinity-zone-and-a-node-without-the-key-passes",
        ),
        pytest.param(
            {"n1": [labelled("web", app="web")], "n3": [labelled("api", app="api")]},
            with_rules(
                pod_anti_affinity=(pod_term(expressions=[("app", "In", ["web", "api"])], key=HOST),)
            ),
            {"n2", "n4"},
            id="anti-affinity-in-expression",
        ),
        pytest.param(
            {"n1": [labelled("web", app="web")], "n3": [labelled("bare")]},
            with_rules(pod_anti_affinity=(pod_term(expressions=[("app", "Exists", [])]),)),
            {"n2", "n3", "n4"},
            id="anti-affinity-exists",
        ),
        pytest.param(
            {"n1": [labelled("web", app="web")], "n3": [labelled("bare")]},
            with_rules(pod_anti_affinity=(pod_term(expressions=[("app", "NotIn", ["web"])]),)),
            {"n1", "n2", "n4"},
            id="anti-affinity-notin-matches-pods-without-the-label",
        ),
        pytest.param(
            {"n2": [labelled("anything", x="y")]},
            with_rules(pod_anti_affinity=(pod_term({}),)),
            {"n1", "n3", "n4"},
            id="anti-affinity-empty-selector-matches-every-pod-of-the-namespace",
        ),
        pytest.param(
            {"n2": [labelled("anything", x="y")]},
            with_rules(
                pod_anti_affinity=(
                    PodAffinityTerm(PodSelector(None, frozenset({"default"})), HOST),
                )
            ),
            {"n1", "n2", "n3", "n4"},
            id="anti-affinity-without-selector-matches-nothing",
        ),
        pytest.param(
            {"n1": [with_rules("guard", pod_anti_affinity=(pod_term({"app": "web"}),))]},
            labelled("web", app="web"),
            {"n2", "n3", "n4"},
            id="symmetric-running-pods-anti-affinity",
        ),
        pytest.param(
            {"n1": [with_rules("guard", pod_anti_affinity=(pod_term({"app": "web"}, ZONE),))]},
            labelled("web", app="web"),
            {"n3", "n4"},
            id="symmetric-zone",
        ),
        pytest.param(
            {
                "n1": [
                    with_rules(
                        "guard", pod_anti_affinity=(pod_term({"app": "web"}, namespaces=["x"]),)
                    )
                ]
            },
            labelled("web", app="web"),
            {"n1", "n2", "n3", "n4"},
            id="symmetric-other-namespace",
        ),
    ],
)
def test_filter_like_kube_scheduler(
    running: Mapping[str, Sequence[Pod]], pod: Pod, expected: set[str]
) -> None:
    assert allowed(engine_with(running), pod) == expected


ANTI_WEB = PlacementRules(pod_anti_affinity=(pod_term({"app": "web"}),))


def replica(i: int) -> Pod:
    return make_pod(f"web-{i}", gpus=1, labels={"app": "web"}, rules=ANTI_WEB)


def test_seed_two_replicas_with_required_anti_affinity_land_apart_and_a_third_waits() -> None:
    engine = engine_with({}, make_cluster(2, gpus=8))
    first, second = engine.place(replica(0)), engine.place(replica(1))
    assert isinstance(first, Bound)
    assert isinstance(second, Bound)
    assert {first.placement.node, second.placement.node} == {"node-0", "node-1"}
    third = engine.place(replica(2))
    assert isinstance(third, Unschedulable)
    assert third.message() == (
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
    )


@pytest.mark.parametrize("nodes", [3, 2], ids=["room", "too-few-nodes"])
def test_a_gangs_pods_placed_earlier_in_the_trial_count_for_the_later_ones(nodes: int) -> None:
    engine = engine_with({}, make_cluster(nodes, gpus=8))
    result = engine.place_gang([replica(i) for i in range(3)])
    if nodes == 3:
        assert isinstance(result, list)
        assert sorted(b.placement.node for b in result) == ["node-0", "node-1", "node-2"]
    else:
        assert isinstance(result, Unschedulable)
        assert "2 node(s) didn't match pod anti-affinity rules" in result.message()
        assert engine.table.pod_index.kept(nodes)[0].sum() == 0  # the trial left nothing


def test_running_pods_anti_affinity_is_told_as_kube_scheduler_tells_it() -> None:
    guard = with_rules("guard", pod_anti_affinity=(pod_term({"app": "web"}),))
    engine = engine_with({"node-0": [guard]}, make_cluster(1))
    result = engine.place(labelled("web", app="web"))
    assert isinstance(result, Unschedulable)
    assert result.message() == (
        "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules."
    )


def test_pods_that_differ_only_in_labels_share_a_shape_but_not_the_symmetric_answer() -> None:
    guard = with_rules("guard", pod_anti_affinity=(pod_term({"app": "web"}),))
    engine = engine_with({"node-0": [guard]}, make_cluster(1))
    web, api = labelled("web", app="web"), labelled("api", app="api")
    assert web.signature == api.signature
    assert isinstance(engine.place(web), Unschedulable)
    assert isinstance(engine.place(api), Bound)


# ------------------------------------------------------------------------------------- score
def scores_on(engine: PlacementEngine, pod: Pod, rows: Sequence[int] = (0, 1, 2, 3)) -> list[float]:
    demand = engine.demand(pod)
    identity = engine.table.pod_index.identity(pod)
    found = interpod_scores(engine.table, demand.interpod, identity, np.asarray(rows, np.int64))
    assert found is not None
    return [float(v) for v in found]


@pytest.mark.parametrize(
    ("running", "pod", "expected"),
    [
        pytest.param(
            {"n2": [labelled("db", app="db")]},
            with_rules(preferred_pod_affinity=(weighted(50, pod_term({"app": "db"})),)),
            [0, 100, 0, 0],
            id="preferred-affinity",
        ),
        pytest.param(
            {"n1": [labelled("web", app="web")]},
            with_rules(preferred_pod_anti_affinity=(weighted(10, pod_term({"app": "web"}, ZONE)),)),
            [0, 0, 100, 100],
            id="preferred-anti-affinity-zone",
        ),
        pytest.param(
            {"n1": [labelled("a", app="a")], "n3": [labelled("b", app="b")]},
            with_rules(
                preferred_pod_affinity=(
                    weighted(20, pod_term({"app": "a"})),
                    weighted(80, pod_term({"app": "b"})),
                )
            ),
            [25, 0, 100, 0],
            id="weights-add-then-min-max",
        ),
        pytest.param(
            {
                "n3": [
                    with_rules("x", preferred_pod_affinity=(weighted(7, pod_term({"app": "w"})),))
                ]
            },
            labelled("w", app="w"),
            [0, 0, 100, 0],
            id="symmetric-running-pods-preferred-affinity",
        ),
        pytest.param(
            {"n3": [with_rules("x", pod_affinity=(pod_term({"app": "w"}),))]},
            labelled("w", app="w"),
            [0, 0, 100, 0],
            id="symmetric-running-pods-required-affinity-scores-hard-weight",
        ),
        pytest.param(
            {
                "n1": [
                    with_rules(
                        "x", preferred_pod_anti_affinity=(weighted(5, pod_term({"app": "w"})),)
                    )
                ]
            },
            labelled("w", app="w"),
            [0, 100, 100, 100],
            id="symmetric-running-pods-preferred-anti-affinity",
        ),
    ],
)
def test_scores_like_kube_scheduler(
    running: Mapping[str, Sequence[Pod]], pod: Pod, expected: list[float]
) -> None:
    assert scores_on(engine_with(running), pod) == expected


def test_preferred_affinity_wins_over_packing_and_packing_decides_among_equals() -> None:
    # bestfit would put the pod on n1 (partly used): the preference sends it to the zone of db.
    engine = engine_with({"n1": [make_pod("filler", gpus=4)], "n3": [labelled("db", app="db")]})
    pod = make_pod(
        "new",
        gpus=1,
        rules=PlacementRules(
            preferred_pod_affinity=(weighted(1, pod_term({"app": "db"}, key=ZONE)),)
        ),
    )
    result = engine.place(pod)
    assert isinstance(result, Bound)
    assert result.placement.node == "n3"
    # Among nodes it likes equally (n1, n2 both in z1) bestfit still packs onto n1.
    engine = engine_with({"n1": [make_pod("filler", gpus=4)], "n2": [labelled("db", app="db")]})
    result = engine.place(pod)
    assert isinstance(result, Bound)
    assert result.placement.node == "n1"
