"""gpufleet.economics.coverage and the report's split by it: what each sample stands for, and
the property the ``/metrics`` counters rest on: the report over consecutive windows adds up,
split for split and owner for owner, to the report over their union (issue 29 item 8)."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.economics import PodRun, Window, cost_of_runs
from gpufleet.economics.coverage import Coverage, Sample, Span, coverage, sample_spans
from gpufleet.testing.economics_builders import price_list

Splits = dict[tuple[str, str], float]


@pytest.mark.parametrize(
    ("samples", "spans"),
    [
        pytest.param([], (), id="no-samples"),
        pytest.param([Sample(0, 0.5, 15)], (Span(0, 15, 0.5),), id="one-sample-stands-its-step"),
        pytest.param(
            [Sample(0, 0.5, 15), Sample(5, 1.0, 15)],
            (Span(0, 5, 0.5), Span(5, 20, 1.0)),
            id="until-the-next",
        ),
        pytest.param(
            [Sample(30, 0.2, 15), Sample(0, 0.4, 15)],
            (Span(0, 15, 0.4), Span(30, 45, 0.2)),
            id="a-gap-past-the-step-and-out-of-order",
        ),
        pytest.param(
            [Sample(0, 0.1, 15), Sample(0, 0.3, 15)], (Span(0, 15, 0.3),), id="same-time-last-wins"
        ),
        pytest.param([Sample(0, 1.7, 10)], (Span(0, 10, 1.0),), id="clipped-to-one"),
    ],
)
def test_sample_spans(samples: list[Sample], spans: tuple[Span, ...]) -> None:
    assert sample_spans(samples) == spans


@pytest.mark.parametrize(
    ("start", "end", "window", "expected"),
    [
        pytest.param(0, 30, Window(0, 30), Coverage(7.5, 7.5, 15), id="half-covered"),
        pytest.param(0, 30, Window(10, 20), Coverage(2.5, 2.5, 5), id="clipped-to-window"),
        pytest.param(20, 30, Window(0, 30), Coverage(0, 0, 10), id="held-past-the-samples"),
        pytest.param(40, 50, Window(0, 30), Coverage(), id="outside"),
    ],
)
def test_coverage(start: float, end: float, window: Window, expected: Coverage) -> None:
    assert coverage(start, end, (Span(0, 15, 0.5),), window) == pytest.approx(expected)


# ------------------------------------------------------------------------- additivity
PODS = ("p0", "p1", "p2")


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[PodRun], dict[tuple[str, str], tuple[Span, ...]]]:
    """Pods holding 0..2 H100s over random spans, each with random samples (some none)."""
    runs, spans = [], {}
    for i, pod in enumerate(PODS):
        if not draw(st.booleans()):
            continue
        start = draw(st.floats(0, 500))
        end = start + draw(st.floats(1, 1000))
        gpus = draw(st.sampled_from([0.0, 0.25, 1.0, 2.0]))
        namespace = f"ns{i % 2}"
        runs.append(
            PodRun(
                f"{namespace}/{pod}", pod, namespace, pod, "n0", start, end, False, gpus,
                "H100" if gpus else "", cpu=draw(st.sampled_from([0.0, 2.0])), memory_gib=4.0,
                queue=f"q{i}", tenant=namespace,
            )
        )  # fmt: skip
        times = draw(st.lists(st.floats(-100, 1600), max_size=12))
        step = draw(st.sampled_from([3.0, 15.0, 60.0]))
        samples = [Sample(t, draw(st.floats(0, 1)), step) for t in times]
        spans[(namespace, pod)] = sample_spans(samples)
    return runs, spans


def splits(
    runs: list[PodRun], spans: dict[tuple[str, str], tuple[Span, ...]], window: Window
) -> Splits:
    """The report's allocated/used/idle/unmeasured (and idle GPU-hours) per pod over
    ``window``: what the meter adds to its counters for that window."""
    report = cost_of_runs(runs, [], price_list(), window, "namespace", None, spans=spans,
                          cluster_idle=False)  # fmt: skip
    out: Splits = defaultdict(float)
    for item in report.runs:
        cost, pod = item.cost, item.run.pod
        for name, value in (("allocated", cost.allocated), ("used", cost.used),
                            ("idle", cost.idle), ("unmeasured", cost.gpu_unmeasured_cost),
                            ("idle_gpu_hours", cost.idle_gpu_hours)):  # fmt: skip
            out[(pod, name)] += value
    return out


def assert_same(got: Splits, want: Splits) -> None:
    for key in set(got) | set(want):
        assert got.get(key, 0.0) == pytest.approx(want.get(key, 0.0), rel=1e-9, abs=1e-9), key


@settings(max_examples=150, deadline=None)
@given(
    world=worlds(),
    cuts=st.lists(st.floats(-50, 1600), min_size=2, max_size=8, unique=True),
)
def test_the_report_over_consecutive_windows_adds_up_to_the_report_over_their_union(
    world: tuple[list[PodRun], dict[tuple[str, str], tuple[Span, ...]]], cuts: list[float]
) -> None:
    runs, spans = world
    cuts = sorted(cuts)
    summed: Splits = defaultdict(float)
    for a, b in itertools.pairwise(cuts):
        for key, value in splits(runs, spans, Window(a, b)).items():
            summed[key] += value
    whole = splits(runs, spans, Window(cuts[0], cuts[-1]))
    assert_same(summed, whole)
    for (pod, split), value in whole.items():  # and the splits add up within the window
        if split == "allocated":
            parts = sum(whole.get((pod, s), 0.0) for s in ("used", "idle", "unmeasured"))
            assert parts == pytest.approx(value, rel=1e-9, abs=1e-9)


def test_the_mean_and_the_spans_agree_when_samples_cover_the_hold() -> None:
    """A pod sampled throughout at one utilisation: the same report either way."""
    run = PodRun("ns/p", "p", "ns", "p", "n0", 0.0, 600.0, False, 1.0, "H100")
    window = Window(0, 600)
    spans = {("ns", "p"): sample_spans(Sample(t, 0.25, 15) for t in range(0, 600, 15))}
    by_spans = cost_of_runs([run], [], price_list(), window, "namespace", None, spans=spans)
    by_mean = cost_of_runs([run], [], price_list(), window, "namespace", {("ns", "p"): 0.25})
    assert by_spans.total == pytest.approx(by_mean.total)
    assert by_spans.total.gpu_unmeasured_cost == 0
