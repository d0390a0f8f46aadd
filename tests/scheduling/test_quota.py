"""Quota rules, one case per rule of the kind Kueue's cohort documentation describes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.gpu import model_matches
from gpufleet.model.queues import Queue, QueueTreeError
from gpufleet.model.resources import GPU, gpu_model_key
from gpufleet.scheduling.quota import IntArray, ModelKeys, QuotaTree, Verdict

G = 1000  # one GPU in milli-GPU


def q(
    name: str,
    gpus: float | None = None,
    parent: str | None = None,
    borrow: float | None = None,
    lend: float | None = None,
    weight: float = 1.0,
    **extra: float,
) -> Queue:
    nominal = {} if gpus is None else {GPU: int(gpus * G)}
    nominal.update({gpu_model_key(m): int(v * G) for m, v in extra.items()})
    return Queue(
        name,
        parent,
        nominal,
        {} if borrow is None else {GPU: int(borrow * G)},
        {} if lend is None else {GPU: int(lend * G)},
        weight,
    )


def tree(*queues: Queue, capacity: float = 100) -> QuotaTree:
    return QuotaTree({x.name: x for x in queues}, {GPU: int(capacity * G)})


def gpus(n: float, t: QuotaTree) -> IntArray:
    return t.vector({GPU: int(n * G)})


COHORT = (q("org", 10), q("a", 6, "org"), q("b", 4, "org"))


@pytest.mark.parametrize(
    ("queues", "usage", "queue", "ask", "verdict"),
    [
        pytest.param(COHORT, {}, "a", 6, Verdict.FITS, id="within-nominal"),
        pytest.param(COHORT, {}, "a", 9, Verdict.BORROWS, id="borrow-what-a-sibling-leaves"),
        pytest.param(COHORT, {"b": 2}, "a", 8, Verdict.BORROWS, id="borrow-up-to-sibling-unused"),
        pytest.param(COHORT, {"b": 2}, "a", 9, Verdict.EXCEEDS, id="not-beyond-the-cohort"),
        pytest.param(
            (q("org", 10), q("a", 6, "org", borrow=1), q("b", 4, "org")),
            {},
            "a",
            8,
            Verdict.EXCEEDS,
            id="borrowing-limit",
        ),
        pytest.param(
            (q("org", 10), q("a", 6, "org", borrow=1), q("b", 4, "org")),
            {},
            "a",
            7,
            Verdict.BORROWS,
            id="borrowing-limit-edge",
        ),
        pytest.param(
            (q("org", 10), q("a", 6, "org"), q("b", 4, "org", lend=1)),
            {},
            "a",
            8,
            Verdict.EXCEEDS,
            id="lending-limit",
        ),
        pytest.param(
            (q("org", 10), q("a", 6, "org"), q("b", 4, "org", lend=1)),
            {},
            "a",
            7,
            Verdict.BORROWS,
            id="lending-limit-edge",
        ),
        pytest.param(COHORT, {"a": 9}, "b", 2, Verdict.EXCEEDS, id="reclaim-needs-preemption"),
        pytest.param(COHORT, {"a": 9}, "b", 1, Verdict.FITS, id="unused-nominal-still-free"),
        pytest.param(
            (q("org"), q("a", 6, "org"), q("b", 4, "org")),
            {},
            "a",
            10,
            Verdict.BORROWS,
            id="parent-without-quota-pools-children",
        ),
        pytest.param(COHORT, {}, "org", 10, Verdict.FITS, id="parent-own-nominal"),
        pytest.param(
            (q("a", 6), q("b", 4)),
            {},
            "a",
            10,
            Verdict.BORROWS,
            id="top-level-queues-form-a-cohort",
        ),
        pytest.param(
            (q("a", 6), q("b", 4, lend=0)),
            {},
            "a",
            7,
            Verdict.EXCEEDS,
            id="nothing-lent-nothing-borrowed",
        ),
    ],
)
def test_admission_rules(
    queues: tuple[Queue, ...], usage: dict[str, float], queue: str, ask: float, verdict: Verdict
) -> None:
    # A cluster exactly as large as the top-level quotas: nothing unclaimed to borrow.
    t = tree(
        *queues, capacity=sum(x.nominal.get(GPU, 0) for x in queues if x.parent is None) / G or 10
    )
    for name, n in usage.items():
        t.add(name, gpus(n, t))
    assert t.check(queue, gpus(ask, t)).verdict is verdict


def test_unclaimed_cluster_capacity_is_free_for_queues_without_borrowing_limits() -> None:
    t = tree(q("org", 10), q("a", 6, "org"), q("b", 4, "org"), capacity=100)
    assert t.check("a", gpus(100, t)).verdict is Verdict.BORROWS
    assert t.check("a", gpus(101, t)).verdict is Verdict.EXCEEDS
    capped = tree(q("org", 10, borrow=0), q("a", 6, "org"), q("b", 4, "org"), capacity=100)
    assert capped.check("a", gpus(11, capped)).verdict is Verdict.EXCEEDS


def test_hierarchy_borrows_across_levels_and_respects_each_level() -> None:
    t = tree(
        q("org", 20),
        q("team1", 10, "org"),
        q("team2", 10, "org"),
        q("p1", 5, "team1"),
        q("p2", 5, "team1"),
        q("p3", 10, "team2", borrow=2),
        capacity=20,
    )
    assert t.check("p1", gpus(10, t)).verdict is Verdict.BORROWS  # takes p2's share
    assert t.check("p1", gpus(20, t)).verdict is Verdict.BORROWS  # and team2's, via org
    assert t.check("p1", gpus(21, t)).verdict is Verdict.EXCEEDS
    assert t.check("p3", gpus(13, t)).verdict is Verdict.EXCEEDS  # its own borrowing limit
    t.add("p1", gpus(15, t))
    check = t.check("p3", gpus(10, t))
    assert check.verdict is Verdict.EXCEEDS  # team1 borrowed 5 of team2's 10
    assert (check.queue, check.key, check.used, check.limit) == ("p3", GPU, 0, 5000)
    assert "queue p3: nvidia.com/gpu would be 10 of at most 5" in check.message()


def test_per_model_quota_is_separate_from_the_total() -> None:
    t = QuotaTree(
        {"a": Queue("a", nominal={GPU: 8 * G, gpu_model_key("H100"): 2 * G})},
        {GPU: 16 * G, gpu_model_key("H100"): 8 * G, gpu_model_key("T4"): 8 * G},
    )
    h100 = t.vector({GPU: 3 * G, gpu_model_key("H100"): 3 * G})
    t4 = t.vector({GPU: 3 * G, gpu_model_key("T4"): 3 * G})
    assert t.check("a", t4).verdict is Verdict.FITS  # T4 is not limited per model
    assert t.check("a", h100).verdict is Verdict.BORROWS  # beyond 2 H100: borrows the cluster's


def test_within_nominal_and_borrowing_flags() -> None:
    t = tree(*COHORT)
    t.add("a", gpus(7, t))
    assert t.borrowing().tolist() == [False, True, False]
    assert not t.within_nominal("a", gpus(0.5, t))
    assert t.within_nominal("b", gpus(3, t))


def test_release_restores_and_refuses_negative_usage() -> None:
    t = tree(*COHORT)
    t.add("a", gpus(3, t))
    t.remove("a", gpus(3, t))
    assert int(t.usage.sum()) == 0
    with pytest.raises(AssertionError):
        t.remove("a", gpus(1, t))


def test_share_orders_by_weighted_borrowing() -> None:
    t = tree(q("org", 10), q("a", 5, "org"), q("b", 5, "org", weight=2), capacity=12)
    t.add("a", gpus(6, t))
    t.add("b", gpus(6, t))
    assert t.share("a")[1] == pytest.approx(0.1)  # borrows 1 of the org's 10
    assert t.share("b")[1] == pytest.approx(0.05)  # the same, at twice the weight
    assert t.share("a") > t.share("b")
    assert t.share("a")[0] == pytest.approx(2 / 12)  # org: 2 beyond its 10, of the cluster's 12
    assert t.share("a", gpus(1, t))[1] == pytest.approx(0.2)  # counting the head's request


def test_share_of_queues_without_quota_is_their_part_of_the_cluster() -> None:
    t = tree(q("a", 0), q("b", 0, weight=3), capacity=12)
    t.add("a", gpus(3, t))
    t.add("b", gpus(6, t))
    assert t.share("a") == pytest.approx((0.25,))
    assert t.share("b") == pytest.approx((0.5 / 3,))


def test_entitlement_waterfills_by_weight() -> None:
    t = tree(
        q("org", 12),
        q("a", 2, "org", weight=1),
        q("b", 2, "org", weight=2),
        q("c", 8, "org"),
        capacity=12,
    )
    want = {"a": gpus(10, t), "b": gpus(10, t), "c": gpus(0, t)}
    got = t.entitlement(want)
    # a and b get their nominal 2 each, then split c's unused 8 by weight 1:2.
    assert got["a"][0] + got["b"][0] == 12 * G
    assert got["b"][0] == pytest.approx(2 * got["a"][0] - 2 * G, abs=2)
    assert got["c"][0] == 0


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        pytest.param(
            (q("org", 5), q("a", 4, "org"), q("b", 2, "org")),
            "children's nvidia.com/gpu quotas add up to 6, more than its own 5",
            id="children-exceed",
        ),
        pytest.param((q("a", 1, "b"), q("b", 1, "a")), "parents form a cycle", id="cycle"),
        pytest.param((q("a", 1, "nope"),), "parent 'nope' is not defined", id="missing-parent"),
    ],
)
def test_invalid_trees_are_refused(queues: tuple[Queue, ...], message: str) -> None:
    with pytest.raises(QueueTreeError, match=message):
        tree(*queues)


@settings(max_examples=300, deadline=None)
@given(
    nominal=st.lists(st.integers(0, 8), min_size=2, max_size=4),
    borrow=st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=4, max_size=4),
    lend=st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=4, max_size=4),
    asks=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=30),
)
def test_admitting_only_what_checks_never_breaks_a_limit(
    nominal: list[int],
    borrow: list[int | None],
    lend: list[int | None],
    asks: list[tuple[int, int]],
) -> None:
    """Whatever is admitted through check(), every queue stays within nominal + borrowing
    limit, and siblings never take more than the others lend."""
    names = [f"q{i}" for i in range(len(nominal))]
    queues = [q("org", sum(nominal))] + [
        q(n, nominal[i], "org", borrow[i], lend[i]) for i, n in enumerate(names)
    ]
    t = tree(*queues, capacity=sum(nominal))
    for who, amount in asks:
        name = names[who % len(names)]
        usage = gpus(amount, t)
        if t.check(name, usage).admits:
            t.add(name, usage)
    for i, name in enumerate(names):
        used = int(t.usage[t.index[name], 0])
        cap = borrow[i]
        if cap is not None:
            assert used <= (nominal[i] + cap) * G
        kept = 0
        for j, other in enumerate(names):
            if other == name:
                continue
            lent = lend[j]
            unlent = max(0, nominal[j] - lent) * G if lent is not None else 0
            kept += max(int(t.usage[t.index[other], 0]), unlent)
        assert used + kept <= sum(nominal) * G or used <= nominal[i] * G


# ----------------------------------------------------------------------------- GPU models
@pytest.mark.parametrize(
    ("name", "product", "matches"),
    [
        pytest.param("H100", "NVIDIA-H100-80GB-HBM3", True, id="short-name-covers-gfd-product"),
        pytest.param("h100", "NVIDIA-H100-80GB-HBM3", True, id="case-insensitive"),
        pytest.param("A100-SXM4", "NVIDIA-A100-SXM4-80GB", True, id="longer-prefix"),
        pytest.param("A100-80GB", "NVIDIA-A100-SXM4-80GB", False, id="prefix-not-subsequence"),
        pytest.param("A10", "NVIDIA-A100-SXM4-40GB", False, id="token-boundary"),
        pytest.param("T4", "Tesla-T4", True, id="tesla-prefix"),
        pytest.param("A100", "NVIDIA A100-SXM4-40GB", True, id="nvidia-smi-spelling"),
        pytest.param("V100", "V100M32", False, id="alibaba-names-are-exact"),
        pytest.param("V100M32", "V100M32", True, id="equal"),
    ],
)
def test_model_names_cover_products(name: str, product: str, matches: bool) -> None:
    assert model_matches(name, product) is matches


def test_a_gpu_counts_under_the_most_specific_quota_key() -> None:
    keys = ModelKeys([GPU, gpu_model_key("A100"), gpu_model_key("A100-SXM4"), "cpu"])
    assert keys("NVIDIA-A100-SXM4-80GB") == gpu_model_key("A100-SXM4")
    assert keys("NVIDIA-A100-PCIE-40GB") == gpu_model_key("A100")
    assert keys("NVIDIA-H100-80GB-HBM3") is None
    assert keys(None) is None
    assert keys.unmatched(["NVIDIA-A100-PCIE-40GB"]) == [gpu_model_key("A100-SXM4")]


def test_capacity_of_products_counts_under_the_quota_key_of_their_model() -> None:
    t = QuotaTree(
        {"a": Queue("a", nominal={gpu_model_key("H100"): 2 * G})},
        {GPU: 16 * G, gpu_model_key("NVIDIA-H100-80GB-HBM3"): 8 * G, gpu_model_key("T4"): 8 * G},
    )
    assert t.keys == [gpu_model_key("H100")]
    assert t.capacity.tolist() == [8 * G]


# ----------------------------------------------------------------------------- hierarchy
def test_a_parent_without_quota_of_its_own_holds_its_childrens() -> None:
    t = tree(q("research"), q("llm", 4, "research"), q("vision", 2, "research"), q("other", 1))
    assert t.nominal[t.index["research"]].tolist() == [6 * G]
    t.add("llm", gpus(5, t))
    assert t.borrowing().tolist() == [False, True, False, False]


@pytest.mark.parametrize(
    ("queue", "asks", "level"),
    [
        pytest.param("llm", 1, 0, id="within-its-own-nominal"),
        pytest.param("llm", 2, 1, id="from-its-parent"),
        pytest.param("ci", 1, 2, id="from-the-top-queue"),
        pytest.param("ci", 4, 3, id="from-the-cluster"),
    ],
)
def test_borrowing_levels_are_the_height_of_the_closest_ancestor_that_holds_it(
    queue: str, asks: int, level: int
) -> None:
    t = tree(
        q("org", 8),
        q("infra", 4, "org"),
        q("ci", 4, "infra"),
        q("research", 4, "org"),
        q("llm", 2, "research"),
        q("vision", 2, "research"),
    )
    t.add("ci", gpus(4, t))
    t.add("llm", gpus(1, t))
    assert t.borrow_level(queue, t.limited({GPU: asks * G})) == level
