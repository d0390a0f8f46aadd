"""Topology spread constraints in the placement engine, case by case as kube-scheduler's
PodTopologySpread plugin decides them (filter and score)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from gpufleet.model import (
    GFD_LABELS,
    NodeSelectorRequirement,
    Pod,
    Taint,
    TaintEffect,
    Toleration,
)
from gpufleet.model.affinity import PlacementRules, SpreadConstraint
from gpufleet.scheduling.engine import Bound, Unschedulable
from gpufleet.scheduling.spread import spread_scores
from gpufleet.testing.builders import make_cluster, make_node, make_pod, spread
from tests.scheduling.test_interpod import NODES, allowed, engine_with

ZONE = GFD_LABELS.ZONE
WEB = {"app": "web"}


def webs(count: int) -> list[Pod]:
    return [make_pod(f"web-{i}", labels=WEB) for i in range(count)]


def spreading(
    *constraints: SpreadConstraint, labels: Mapping[str, str] = WEB, **pod: object
) -> Pod:
    rules = PlacementRules(topology_spread=constraints)
    return make_pod("new", labels=labels, rules=rules, **pod)  # type: ignore[arg-type]


TAINT = Taint("dedicated", "x", TaintEffect.NO_SCHEDULE)
TOLERATION = Toleration("dedicated", "Exists", "", TaintEffect.NO_SCHEDULE)


@pytest.mark.parametrize(
    ("running", "pod", "expected"),
    [
        pytest.param(
            {"n1": webs(1)},
            spreading(spread(WEB)),
            {"n2", "n3", "n4"},
            id="hostname-max-skew-1",
        ),
        pytest.param(
            {"n1": webs(1)},
            spreading(spread(WEB), labels={}),
            {"n1", "n2", "n3", "n4"},
            id="pod-not-matching-its-own-selector-adds-nothing",
        ),
        pytest.param(
            {"n1": webs(2)},
            spreading(spread(WEB, key=ZONE)),
            {"n3"},
            id="zone-and-missing-label",
        ),
        pytest.param(
            {"n1": webs(2)},
            spreading(spread(WEB, key=ZONE, max_skew=3)),
            {"n1", "n2", "n3"},
            id="zone-max-skew-3",
        ),
        pytest.param(
            {"n1": webs(1), "n3": webs(1)},
            spreading(spread(WEB, key=ZONE)),
            {"n1", "n2", "n3"},
            id="zones-even",
        ),
        pytest.param(
            {"n1": webs(1), "n3": webs(1)},
            spreading(spread(WEB, key=ZONE, min_domains=3)),
            set(),
            id="fewer-domains-than-min-domains-makes-the-minimum-0",
        ),
        pytest.param(
            {"n1": webs(1), "n2": webs(1)},
            spreading(
                spread(WEB),
                affinity=[NodeSelectorRequirement(ZONE, "In", ("z1",))],
            ),
            {"n1", "n2"},
            id="node-affinity-policy-honor-counts-only-nodes-the-pod-may-use",
        ),
        pytest.param(
            {"n1": webs(1), "n2": webs(1)},
            spreading(
                SpreadConstraint(1, GFD_LABELS.HOSTNAME, False, spread(WEB).selector, 1, False),
                affinity=[NodeSelectorRequirement(ZONE, "In", ("z1",))],
            ),
            set(),
            id="node-affinity-policy-ignore-counts-every-node",
        ),
        pytest.param(
            {"n1": webs(3)},
            spreading(spread(None)),
            {"n1", "n2", "n3", "n4"},
            id="no-selector-counts-nothing",
        ),
        pytest.param(
            {"n1": [make_pod("other", namespace="other", labels=WEB)]},
            spreading(spread(WEB)),
            {"n1", "n2", "n3", "n4"},
            id="only-the-pods-namespace-counts",
        ),
        pytest.param(
            {"n1": webs(1)},
            spreading(spread(WEB, anyway=True)),
            {"n1", "n2", "n3", "n4"},
            id="schedule-anyway-does-not-filter",
        ),
    ],
)
def test_filter_like_kube_scheduler(
    running: Mapping[str, Sequence[Pod]], pod: Pod, expected: set[str]
) -> None:
    assert allowed(engine_with(running), pod) == expected


#: As NODES, with n3 (zone z2, running nothing here) tainted.
TAINTED = [*NODES[:2], make_node("n3", labels={ZONE: "z2"}, taints=[TAINT]), NODES[3]]


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(
            spreading(spread(WEB, honor_taints=True)),
            {"n1", "n2", "n4"},
            id="node-taints-policy-honor-leaves-out-the-tainted-node",
        ),
        pytest.param(
            spreading(spread(WEB)),
            set(),
            id="node-taints-policy-ignore-counts-the-tainted-node",
        ),
        pytest.param(
            spreading(spread(WEB), tolerations=[TOLERATION]),
            {"n3"},
            id="a-tolerated-taint-is-no-matter",
        ),
    ],
)
def test_node_taints_policy(pod: Pod, expected: set[str]) -> None:
    running = {"n1": webs(1), "n2": webs(1), "n4": webs(1)}
    assert allowed(engine_with(running, TAINTED), pod) == expected


def test_reasons_tell_skew_from_a_missing_label() -> None:
    engine = engine_with({"n1": webs(1), "n3": webs(1)})
    result = engine.place(spreading(spread(WEB, key=ZONE, min_domains=3)))
    assert isinstance(result, Unschedulable)
    assert result.reasons == {
        "node(s) didn't match pod topology spread constraints": 3,
        "node(s) didn't match pod topology spread constraints (missing required label)": 1,
    }


def test_a_gang_spreads_across_nodes_in_one_trial() -> None:
    engine = engine_with({}, make_cluster(2, gpus=8))
    rules = PlacementRules(topology_spread=(spread(WEB),))
    pods = [make_pod(f"w{i}", gpus=1, labels=WEB, rules=rules) for i in range(4)]
    result = engine.place_gang(pods)
    assert isinstance(result, list)
    assert sorted(b.placement.node for b in result) == ["node-0", "node-0", "node-1", "node-1"]


def test_score_matches_kube_schedulers_formula() -> None:
    # hostname, maxSkew 1, 3 candidate nodes: weight log(3 + 2); raw 2w, 0, 1w rounded to
    # 3, 0, 2; normalised 100 * (max + min - s) / max = 0, 100, 33.
    engine = engine_with({"n1": webs(2), "n3": webs(1)})
    pod = spreading(spread(WEB, anyway=True))
    found = spread_scores(engine.table, engine.demand(pod).spread, np.array([0, 1, 2]))
    assert found is not None
    assert found.tolist() == [0.0, 100.0, 33.0]


def test_score_ignores_nodes_without_the_key() -> None:
    engine = engine_with({"n1": webs(1)})
    pod = spreading(spread(WEB, key=ZONE, anyway=True))
    found = spread_scores(engine.table, engine.demand(pod).spread, np.array([0, 1, 2, 3]))
    assert found is not None
    assert found.tolist() == [0.0, 0.0, 100.0, 0.0]


def test_soft_spread_wins_over_packing() -> None:
    engine = engine_with({"node-0": webs(2)}, make_cluster(2, gpus=8))
    rules = PlacementRules(topology_spread=(spread(WEB, anyway=True),))
    pod = make_pod("new", gpus=1, labels=WEB, rules=rules)
    result = engine.place(pod)
    assert isinstance(result, Bound)
    assert result.placement.node == "node-1"
