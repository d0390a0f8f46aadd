"""``gpufleet serve --kubeconfig --prometheus-url``: the Kubernetes plane evaluates its alert
rules over a real Prometheus scraping the GPUs, serves them on ``/api/v1/alerts``, and says so
when that Prometheus is down, keeping the alerts it had."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from gpufleet.backends.prometheus import PrometheusSeries
from gpufleet.model.alerts import AlertMetric, AlertRule, Comparison, Severity
from gpufleet.telemetry.series_layout import Labels
from gpufleet.testing.prometheus import PrometheusProcess
from tests.backends.prometheus.conftest import NODE
from tests.service.test_kube_plane import Cluster, cluster  # noqa: F401  (fixture)


class Switchable:
    """A series source whose server the test swaps (one Prometheus, then one that is down)."""

    def __init__(self, inner: PrometheusSeries) -> None:
        self.inner = inner

    def query(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str] | None = None,
        quantile: float | None = None,
        *,
        by: Sequence[str] | None = None,
        across: str = "sum",
    ) -> dict[Labels, float]:
        return self.inner.query(metric, fn, window_s, now, matchers, quantile, by=by, across=across)


HOT = AlertRule(
    name="gpu-hot",
    metric=AlertMetric.GPU_TEMP,
    comparison=Comparison.GT,
    threshold=60.0,
    severity=Severity.WARNING,
)


def test_alerts_from_prometheus_and_a_prometheus_that_goes_down(
    cluster: Cluster,  # noqa: F811
    prometheus: PrometheusProcess,
) -> None:
    plane = cluster.plane
    source = Switchable(PrometheusSeries(prometheus.url))
    observatory = plane.observe_with(source)
    observatory.replace_rules([HOT])
    observatory.observe(time.time())
    alerts = cluster.client("admin").get("/api/v1/alerts").json()
    assert alerts["error"] is None
    firing = sorted(
        (a["labels"]["Hostname"], a["labels"]["gpu"], a["state"]) for a in alerts["alerts"]
    )
    # GPUs 0 and 1 run at 71 and 69 C; a tenant sees only alerts on no pod or its own pods.
    assert firing == [(NODE, "0", "firing"), (NODE, "1", "firing")]
    assert cluster.client("team-b").get("/api/v1/alerts").json()["alerts"] == []

    source.inner = PrometheusSeries("http://127.0.0.1:9", timeout_s=0.5)  # nothing listens
    observatory.observe(time.time())
    answer = cluster.client("admin").get("/api/v1/alerts").json()
    assert "Prometheus at http://127.0.0.1:9" in answer["error"]
    assert [a["state"] for a in answer["alerts"]] == ["firing", "firing"], "kept, not resolved"
    source.inner = PrometheusSeries(prometheus.url)
    observatory.observe(time.time())
    assert cluster.client("admin").get("/api/v1/alerts").json()["error"] is None
