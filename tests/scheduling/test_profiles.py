"""Profiles and the registry: plugins of every extension point chosen by data, not code.

A new admission check is a class, one ``register`` call and a line of profile (here, from this
file, as an out-of-tree plugin would be); an unknown name fails before anything is built,
listing the names known; the default profile is today's behaviour.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
import pytest

from gpufleet.model.actions import Bind, Evict
from gpufleet.model.resources import GPU
from gpufleet.model.workload import Workload
from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable
from gpufleet.scheduling.profile import (
    DEFAULT_PROFILE,
    FairSharing,
    PluginSpec,
    Profile,
    ProfileError,
)
from gpufleet.scheduling.registry import Registry, UnknownPluginError
from gpufleet.scheduling.running import RunningWorkload
from gpufleet.scheduling.state import CoreState
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

G = 1000


class GpusPerNamespace:
    """A toy admission check: at most ``limit`` milli-GPU held per namespace."""

    name = "gpus-per-namespace"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: Counter[str] = Counter()

    def check(self, workload: Workload, request: Mapping[str, int], now: float) -> str | None:
        after = self.held[workload.namespace] + request.get(GPU, 0)
        if after <= self.limit:
            return None
        namespace, limit = workload.namespace, self.limit // G
        return f"namespace {namespace} would hold {after // G} GPUs, at most {limit}"

    def started(self, running: RunningWorkload) -> None:
        self.held[running.workload.namespace] += running.usage.get(GPU, 0)

    def shrunk(self, running: RunningWorkload, freed: Mapping[str, int]) -> None:
        self.held[running.workload.namespace] -= freed.get(GPU, 0)

    def stopped(self, running: RunningWorkload) -> None:
        """(What it holds is given back pod by pod, as it ends: ``shrunk``.)"""

    def retagged(self, running: RunningWorkload, before: Workload) -> None:
        """(Its namespace and what it holds are the same.)"""


def gpus_per_namespace(state: CoreState, args: Mapping[str, object]) -> GpusPerNamespace:
    gpus = args["gpus"]
    assert isinstance(gpus, int)
    return GpusPerNamespace(gpus * G)


def registry_with_toy_check() -> Registry:
    registry = Registry.default()
    registry.admission_checks.register(GpusPerNamespace.name, gpus_per_namespace)
    return registry


def test_a_registered_admission_check_gates_admission_with_a_reason_explain_gives() -> None:
    profile = Profile.from_mapping(
        {
            "name": "budgets",
            "admissionChecks": [{"name": "gpus-per-namespace", "args": {"gpus": 4}}],
        }
    )
    core = make_core(
        [make_node("n0", gpus=8), make_node("n1", gpus=8)],
        [make_queue("q")],
        profile=profile,
        registry=registry_with_toy_check(),
    )
    cluster = EchoCluster(core)
    first = make_workload("a1", "q", gpus=3, namespace="team-a")
    second = make_workload("a2", "q", gpus=2, namespace="team-a")
    other = make_workload("b1", "q", gpus=4, namespace="team-b")
    cluster.submit(first, second, other, now=0.0)
    assert set(core.running) == {first.key, other.key}
    (why,) = core.explain_pending()
    assert why.workload == second.key
    assert why.waiting_for == "gpus-per-namespace"
    expected = "namespace team-a would hold 5 GPUs, at most 4"
    assert why.message == f"waiting for admission check gpus-per-namespace: {expected}"
    assert cluster.told[second.pods[0].key] == why.message
    (waiting,) = core.view().waiting
    assert (waiting.waiting_for, waiting.message) == (why.waiting_for, why.message)
    # What the namespace holds goes down as its work ends: the waiting one is let in.
    cluster.finish_workload(first, now=10.0)
    assert second.key in core.running


def test_without_the_check_in_its_profile_the_same_registry_admits_all() -> None:
    core = make_core(
        [make_node("n0", gpus=8), make_node("n1", gpus=8)],
        [make_queue("q")],
        registry=registry_with_toy_check(),
    )
    cluster = EchoCluster(core)
    cluster.submit(*(make_workload(f"a{i}", "q", gpus=3, namespace="team-a") for i in range(3)))
    assert len(core.running) == 3


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"queueSort": "drf"}, "unknown queue sort 'drf'; known: fair-share"),
        (
            {"admissionChecks": ["gpu-hours"]},
            "unknown admission check 'gpu-hours'; known: budget, calendar-window",
        ),
        ({"filters": ["no-spot"]}, "unknown filter 'no-spot'; known: none are registered"),
        (
            {"scores": [{"name": "spread", "weight": 2}]},
            "unknown score 'spread'; known: bestfit, capacity-type, dotprod, gpu-clustering, "
            "gpu-packing",
        ),
        ({"postFilter": "kai"}, "unknown post-filter 'kai'; known: classical-preemption"),
        ({"permit": "coscheduling"}, "unknown permit 'coscheduling'; known: gang-ready-timeout"),
    ],
    ids=["queue-sort", "admission-check", "filter", "score", "post-filter", "permit"],
)
def test_a_profile_naming_an_unknown_plugin_fails_listing_the_known_ones(
    given: dict[str, object], expected: str
) -> None:
    profile = Profile.from_mapping({"name": "mine", **given})
    with pytest.raises(UnknownPluginError) as raised:
        make_core([make_node("n0")], [make_queue("q")], profile=profile)
    assert str(raised.value).startswith(f"profile 'mine': {expected}")


def test_the_known_names_include_those_registered() -> None:
    profile = Profile(admission_checks=(PluginSpec("gpu-hours"),))
    known = r"known: budget, calendar-window, gpus-per-namespace$"
    with pytest.raises(UnknownPluginError, match=known):
        registry_with_toy_check().check(profile)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"admisionChecks": []}, "unknown key 'admisionChecks' (did you mean 'admissionChecks'?)"),
        ({"filters": "no-spot"}, "filters: a list of plugins"),
        ({"permit": {"nam": "x"}}, "permit: unknown key 'nam' (did you mean 'name'?)"),
        ({"permit": {"args": {}}}, "permit.name: the plugin's name"),
        ({"postFilter": 3}, "postFilter: a plugin name, or a mapping with name and args"),
        ({"scores": [{"name": "bestfit", "weight": 0}]}, "scores[0].weight: a positive number"),
        ({"queueSort": {"name": "fair-share", "weight": 2}}, "queueSort: unknown key 'weight'"),
        ({"name": ""}, "profile name: a non-empty string"),
        ({"fairSharing": "7d"}, "fairSharing: a mapping, such as {usageHalfLife: 7d}"),
        ({"fairSharing": {}}, "fairSharing.usageHalfLife: required (such as 7d or 24h)"),
        (
            {"fairSharing": {"halfLife": "7d"}},
            "fairSharing: unknown key 'halfLife' (did you mean 'usageHalfLife'?)",
        ),
        (
            {"fairSharing": {"usageHalfLife": "7 days"}},
            "fairSharing.usageHalfLife: a duration such as 90m, 24h, 7d or 1d12h, or a number "
            "of seconds; got '7 days'",
        ),
        ({"fairSharing": {"usageHalfLife": "1h7d"}}, "got '1h7d'"),
        ({"fairSharing": {"usageHalfLife": True}}, "number of seconds; got bool"),
        ({"fairSharing": {"usageHalfLife": 0}}, "usageHalfLife: a positive duration, got 0 s"),
    ],
    ids=[
        "key",
        "list",
        "spec-key",
        "spec-name",
        "spec-type",
        "weight",
        "weight-where",
        "name",
        "fair-sharing-type",
        "fair-sharing-half-life-missing",
        "fair-sharing-key",
        "fair-sharing-duration",
        "fair-sharing-unit-order",
        "fair-sharing-bool",
        "fair-sharing-zero",
    ],
)
def test_a_profile_that_cannot_be_read_says_where(given: dict[str, object], expected: str) -> None:
    with pytest.raises(ProfileError) as raised:
        Profile.from_mapping(given)
    assert expected in str(raised.value)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"timout": 5}, "gang-ready-timeout: unknown argument 'timout'; it takes: timeout"),
        ({"timeout": "5s"}, "gang-ready-timeout: argument 'timeout' must be a float"),
        ({"timeout": True}, "gang-ready-timeout: argument 'timeout' must be a float"),
    ],
    ids=["unknown", "type", "bool"],
)
def test_a_plugin_refuses_arguments_it_does_not_take(
    args: dict[str, object], expected: str
) -> None:
    profile = Profile(permit=PluginSpec("gang-ready-timeout", args))
    with pytest.raises(ProfileError, match=expected):
        make_core([make_node("n0")], [make_queue("q")], profile=profile)


def test_the_permit_takes_its_timeout_from_the_profile() -> None:
    profile = Profile.from_mapping(
        {"permit": {"name": "gang-ready-timeout", "args": {"timeout": 5}}}
    )
    core = make_core([make_node("n0", gpus=8)], [make_queue("q")], profile=profile)
    cluster = EchoCluster(core, ready=False)
    gang = make_workload("g", "q", pods=2, gpus=1)
    cluster.submit(gang, now=0.0)
    assert core.next_timer() == 5.0
    evicted = [a for a in cluster.settle(5.0) if isinstance(a, Evict)]
    assert {a.pod.key for a in evicted} == {p.key for p in gang.pods}
    assert {a.reason for a in evicted} == {"gang not ready within 5s"}


class NoNodesNamed:
    """A toy filter: no pod on the nodes whose name starts with ``prefix``."""

    name = "no-nodes-named"
    static = True

    def __init__(self, table: NodeTable, prefix: str) -> None:
        self.table = table
        self.prefix = prefix

    def applies(self, demand: Demand) -> bool:
        return True

    def mask(self, table: NodeTable, demand: Demand, rows: IntArray | None = None) -> BoolArray:
        allowed = np.array([not n.name.startswith(self.prefix) for n in table.nodes], np.bool_)
        return allowed if rows is None else allowed[rows]

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        return {f"node(s) named {self.prefix}*": ~self.mask(table, demand)}


def test_a_registered_filter_runs_after_the_built_in_ones() -> None:
    registry = Registry.default()
    registry.filters.register("no-nodes-named", lambda table, args: NoNodesNamed(table, "spot"))
    profile = Profile.from_mapping({"filters": ["no-nodes-named"]})
    nodes = [make_node("spot-0", gpus=8), make_node("spot-1", gpus=8), make_node("n0", gpus=2)]
    core = make_core(nodes, [make_queue("q")], profile=profile, registry=registry)
    cluster = EchoCluster(core)
    small, big = make_workload("small", "q", gpus=2), make_workload("big", "q", gpus=2)
    cluster.submit(small, big, now=0.0)
    assert cluster.running[small.pods[0].key].node == "n0"
    (why,) = core.explain_pending()
    assert why.workload == big.key
    assert "2 node(s) named spot*" in why.message


def test_a_profile_adds_scorers_to_the_policy_with_their_weights() -> None:
    profile = Profile.from_mapping({"scores": [{"name": "gpu-packing", "weight": 0.5}]})
    core = make_core([make_node("n0")], [make_queue("q")], profile=profile)
    scorers = [(scorer.name, weight) for scorer, weight in core.engine.policy.scorers]
    assert scorers == [("BestFitScore", 1.0), ("GpuPackingScore", 0.5)]
    default = make_core([make_node("n0")], [make_queue("q")])
    scorers = [(scorer.name, weight) for scorer, weight in default.engine.policy.scorers]
    assert scorers == [("BestFitScore", 1.0), ("capacity-type", 1.0)]


def test_the_default_profile_written_out_is_the_default() -> None:
    written = {
        "name": "default",
        "queueSort": "fair-share",
        "admissionChecks": ["budget"],
        "filters": [],
        "scores": ["capacity-type"],
        "postFilter": "classical-preemption",
        "permit": {"name": "gang-ready-timeout"},
    }
    assert Profile.from_mapping(written) == Profile.from_mapping({}) == DEFAULT_PROFILE
    decisions = []
    for profile in (Profile.from_mapping(written), DEFAULT_PROFILE):
        core = make_core(
            [make_node(f"n{i}", gpus=4) for i in range(3)],
            [make_queue("a", 6), make_queue("b", 6)],
            profile=profile,
            min_runtime=0.0,
        )
        cluster = EchoCluster(core)
        cluster.submit(*(make_workload(f"b{i}", "b", gpus=2) for i in range(6)), now=0.0)
        cluster.submit(*(make_workload(f"a{i}", "a", pods=2, gpus=2, priority=1) for i in range(2)))
        decisions.append(
            [(type(a).__name__, a.pod.key) for a in cluster.actions if isinstance(a, Bind | Evict)]
        )
    assert decisions[0] == decisions[1]
    assert any(kind == "Evict" for kind, _ in decisions[0])


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (3600, 3600.0),
        (1.5, 1.5),
        ("90m", 5400.0),
        ("24h", 86400.0),
        ("7d", 604800.0),
        ("1d12h", 129600.0),
        ("2w", 1209600.0),
        ("1h30m15s", 5415.0),
    ],
    ids=["int", "float", "minutes", "hours", "days", "days-hours", "weeks", "mixed"],
)
def test_fair_sharing_reads_its_half_life(given: object, seconds: float) -> None:
    profile = Profile.from_mapping({"fairSharing": {"usageHalfLife": given}})
    assert profile.fair_sharing == FairSharing(seconds)


def test_fair_sharing_is_off_unless_a_profile_turns_it_on() -> None:
    assert DEFAULT_PROFILE.fair_sharing is None
    assert Profile.from_mapping({"name": "x"}).fair_sharing is None
    assert make_core([make_node("n0")], [make_queue("q")]).state.usage_history is None
    on = Profile.from_mapping({"fairSharing": {"usageHalfLife": "1h"}})
    history = make_core([make_node("n0")], [make_queue("q")], profile=on).state.usage_history
    assert history is not None
    assert history.half_life == 3600.0
