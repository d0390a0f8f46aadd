"""The dashboard's cost panels give the figures ``gpufleet cost`` gives (issue 29 item 9).

A real Prometheus scrapes ``gpufleet serve``'s ``/metrics`` (the app over an embedded plane, in
a thread) while the plane's clock stands, moves on an hour, and stands again; each panel that
reads the cost counters is evaluated through Prometheus' HTTP API over a range holding both
stands, and compared with the report over the time the counters priced in between
(``gpufleet_cost_priced_until_seconds`` before and after). "Cost by namespace" once added the
four splits together and showed twice the cost. ``increase`` and ``rate`` extrapolate to the
range's edges, so a panel may read up to a quarter more than the report, never less; a
wrong aggregation (a split counted twice, a split missing) is outside that.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.api.app import create_app
from gpufleet.economics.reports import RunCost
from gpufleet.service.costing import cost_report
from gpufleet.service.observatory import STEP_S
from gpufleet.testing.builders import make_node
from gpufleet.testing.economics_builders import price_list
from gpufleet.testing.prometheus import PrometheusProcess, prometheus_binary
from gpufleet.testing.service import (
    GPU_TAINT,
    ServiceHarness,
    as_yaml,
    make_harness,
    pod_doc,
    queue_doc,
)
from gpufleet.testing.threaded_server import threaded_server
from tests.backends.prometheus.test_grafana_dashboard import VARIABLES, load, panels, substitute

COST_METRICS = ("gpufleet_cost_dollars_total", "gpufleet_idle_gpu_hours_total")
#: How much more than the report a panel may read: ``increase``'s extrapolation to the edges.
EXTRAPOLATION = 1.25
PRICED_UNTIL = "gpufleet_cost_priced_until_seconds"


def cost_targets() -> list[tuple[str, str, str | None]]:
    """(panel title, expr, legend) of every target reading the cost counters."""
    return [
        (panel["title"], target["expr"], target.get("legendFormat"))
        for panel in panels(load())
        for target in panel.get("targets", [])
        if any(metric in target["expr"] for metric in COST_METRICS)
    ]


def test_every_cost_panel_is_checked() -> None:
    assert {title for title, _, _ in cost_targets()} == set(EXPECTED), (
        "a panel reading the cost counters needs its expected figures in EXPECTED"
    )


#: For each panel: its series' labels, and the report's figure of a run for a split.
Figure = Callable[[RunCost], dict[tuple[str, ...], float]]


def _by(keys: Callable[[RunCost], tuple[str, ...]], value: Callable[[RunCost], float]) -> Figure:
    return lambda item: {keys(item): value(item)}


def _per_split(item: RunCost) -> dict[tuple[str, ...], float]:
    cost, tenant = item.cost, item.run.tenant
    return {
        (tenant, "allocated"): cost.allocated,
        (tenant, "used"): cost.used,
        (tenant, "idle"): cost.idle,
        (tenant, "unmeasured"): cost.gpu_unmeasured_cost,
    }


#: Panel title: (labels of its series, the report's figure per run, whether it is a rate
#: per hour rather than an increase).
EXPECTED: dict[str, tuple[tuple[str, ...], Figure, bool]] = {
    "Cost by namespace": (
        ("namespace",),
        _by(lambda i: (i.run.namespace,), lambda i: i.cost.allocated),
        True,
    ),
    "Cost over the range by tenant and split": (("tenant", "split"), _per_split, False),
    "Cost over the range by queue": (
        ("queue",),
        _by(lambda i: (i.run.queue,), lambda i: i.cost.allocated),
        False,
    ),
    "Idle GPU-hours by namespace and queue (gpufleet)": (
        ("namespace", "queue"),
        _by(lambda i: (i.run.namespace, i.run.queue), lambda i: i.cost.idle_gpu_hours),
        False,
    ),
}


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServiceHarness, PrometheusProcess, float, float, float]]:
    """The harness, Prometheus, the range (seconds) holding both stands, and the priced-until
    times of the two stands."""
    if prometheus_binary() is None:
        pytest.skip("no prometheus binary (Debian's `prometheus` package installs it)")
    directory: Path = tmp_path_factory.mktemp("cost-values")
    nodes = [
        make_node("h-0", gpus=4, model="H100", taints=(GPU_TAINT,)),
        make_node("h-spot", gpus=4, model="H100", taints=(GPU_TAINT,),
                  labels={"karpenter.sh/capacity-type": "spot"}),
    ]  # fmt: skip
    queues = [queue_doc(t, 8, namespaces=[t]) for t in ("team-a", "team-b")]
    harness = make_harness(directory, nodes, queues)
    harness.app = create_app(harness.plane, prices=price_list(estimate_spot=0.5))
    for who, name, gpus in (("team-a", "train", 2), ("team-a", "eval", 1), ("team-b", "nb", 1)):
        doc = pod_doc(name, gpus=gpus, namespace=who, runtime="10h")
        response = harness.client(who).post(
            "/api/v1/workloads", content=as_yaml(doc), headers={"Content-Type": "application/yaml"}
        )
        assert response.status_code == 201, response.text
    harness.advance(1)
    step(harness, 10 * 60)
    metrics = harness.client("metrics").get("/metrics")  # the meter starts
    assert metrics.status_code == 200, metrics.text
    credentials = directory / "metrics.token"  # serve's /metrics wants a scrape token
    credentials.write_text(harness.tokens["metrics"])
    with (
        threaded_server(harness.app) as url,
        PrometheusProcess(
            directory / "prometheus", [url.removeprefix("http://")], credentials_file=credentials
        ) as server,
    ):
        began = time.monotonic()
        before = stand(server)
        step(harness, 3600)
        after = stand(server, moved_from=before)
        yield harness, server, time.monotonic() - began + 2, before, after


def step(harness: ServiceHarness, seconds: float) -> None:
    """Move the plane's clock ``seconds`` on, an observatory round every step."""
    end = harness.plane.now() + seconds
    while harness.plane.now() < end:
        harness.advance(STEP_S)
        harness.plane.observing.round()


def stand(server: PrometheusProcess, moved_from: float | None = None) -> float:
    """Wait until Prometheus holds 5 scrapes of the counters standing (past ``moved_from``);
    returns the time they priced up to."""
    deadline = time.monotonic() + 90
    standing = (
        f"{PRICED_UNTIL} and count_over_time({PRICED_UNTIL}[10s]) >= 5 "
        f"and changes({PRICED_UNTIL}[10s]) == 0"
    )
    while time.monotonic() < deadline:
        found = server.query(standing)
        if found:
            value = float(found[0]["value"][1])
            if moved_from is None or value > moved_from:
                return value
        time.sleep(0.5)
    raise AssertionError("Prometheus did not hold the counters standing within 90 s")


@pytest.mark.parametrize("title", sorted(EXPECTED))
def test_each_cost_panel_reads_what_the_report_says(
    run: tuple[ServiceHarness, PrometheusProcess, float, float, float], title: str
) -> None:
    harness, server, range_s, before, after = run
    labels, figure, per_hour = EXPECTED[title]
    report = cost_report(
        harness.plane, after - before, "namespace", after, price_list(estimate_spot=0.5),
        series=harness.plane.observatory.series if harness.plane.observatory else None,
    )  # fmt: skip
    want: dict[tuple[str, ...], float] = defaultdict(float)
    for item in report.runs:
        for key, value in figure(item).items():
            want[key] += value
    window = f"{round(range_s)}s"
    variables = {**VARIABLES, "__range": window, "__rate_interval": window}
    expr = next(expr for panel, expr, _ in cost_targets() if panel == title)
    got: dict[tuple[str, ...], float] = {}
    for series in server.query(substitute(expr, variables)):
        key = tuple(series["metric"].get(label, "") for label in labels)
        value = float(series["value"][1])
        got[key] = value * round(range_s) / 3600 if per_hour else value
    assert set(got) == {key for key, value in want.items() if value > 0} | (set(got) & set(want))
    for key, value in want.items():
        assert value * (1 - 1e-6) - 1e-9 <= got.get(key, 0.0) <= value * EXTRAPOLATION + 1e-9, (
            f"{title} {key}: the panel reads {got.get(key)}, the report {value}"
        )
