"""Window queries answered by a Prometheus server's HTTP API: the Kubernetes mode's series.

Owns :class:`PrometheusSeries`, a :class:`~gpufleet.telemetry.series_query.GroupedSeriesQuery`
(and so the rule engine's ``SeriesQuery``) that sends each query as one instant query
(``POST /api/v1/query`` with ``time=now``; PromQL from :mod:`.promql`) and reads the vector
back, keyed as the store keys it (sorted (name, value) pairs, ``__name__`` dropped); and
:class:`PrometheusUnavailableError`, the one error of a server that is down, refuses, or
answers what is not the API's JSON. It keeps no series and no cache: the server has them.
Anything that speaks Prometheus' query API (Thanos, Mimir, VictoriaMetrics behind a path
prefix) works; ``headers`` carry what it needs (``Authorization``, ``X-Scope-OrgID``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx

from gpufleet.backends.prometheus.promql import (
    KNOWN_METRICS,
    check_query,
    duration,
    metric_expression,
    window_query,
)
from gpufleet.model.alerts import LABEL_NAME, LOOKBACK_S
from gpufleet.telemetry.series_layout import Labels, as_labels
from gpufleet.telemetry.series_query import (
    RawSample,
    SeriesUnavailableError,
    UnknownMetricError,
)
from gpufleet.telemetry.series_window import COMPARISONS, Where

#: The step of the subquery that samples a derived metric (a pod's utilisation) for
#: :meth:`PrometheusSeries.samples` when no ``subquery_step_s`` is given: the observatory's.
SAMPLE_STEP_S = 15.0


class PrometheusUnavailableError(SeriesUnavailableError):
    """Prometheus at ``url`` could not answer: ``reason`` says what failed."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"Prometheus at {url}: {reason}")
        self.url = url
        self.reason = reason


class PrometheusSeries:
    """See the module docstring. ``url``: the server's base (``http://prometheus:9090``, or
    with a path prefix); ``timeout_s``: per request; ``subquery_step_s``: the resolution of
    the derived metrics' subqueries (None: the server's evaluation interval). Thread-safe;
    :meth:`close` (or ``with``) releases its connections."""

    def __init__(
        self,
        url: str,
        timeout_s: float = 5.0,
        headers: Mapping[str, str] | None = None,
        *,
        subquery_step_s: float | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"Prometheus URL {url!r} must be http(s)://host[:port][/prefix]")
        if not timeout_s > 0:
            raise ValueError(f"Prometheus timeout must be positive, got {timeout_s}")
        self.url = url.rstrip("/")
        self.subquery_step_s = subquery_step_s
        self._client = httpx.Client(
            base_url=self.url, timeout=timeout_s, headers=dict(headers or {})
        )

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
        """See :class:`~gpufleet.telemetry.series_query.GroupedSeriesQuery`; raises
        :class:`PrometheusUnavailableError` when the server cannot answer."""
        if metric not in KNOWN_METRICS:
            raise UnknownMetricError(metric, KNOWN_METRICS)
        check_query(fn, window_s, now, quantile, across, matchers, by)
        promql = window_query(
            metric,
            fn,
            window_s,
            matchers,
            quantile,
            by=by,
            across=across,
            subquery_step_s=self.subquery_step_s,
        )
        return self.instant(promql, now)

    def query_where(
        self,
        metric: str,
        fn: str,
        window_s: float,
        now: float,
        matchers: Mapping[str, str],
        quantile: float | None,
        where: Where,
    ) -> dict[Labels, float]:
        """The rule engine's query with its comparison in the PromQL: Prometheus returns only
        the series that satisfy it (a filter, as the exported rules compare)."""
        op, threshold = where
        if op not in COMPARISONS or not math.isfinite(threshold):
            raise ValueError(f"query: condition {op} {threshold} is not a PromQL comparison")
        if metric not in KNOWN_METRICS:
            raise UnknownMetricError(metric, KNOWN_METRICS)
        check_query(fn, window_s, now, quantile, "sum", matchers, None)
        promql = window_query(
            metric, fn, window_s, matchers, quantile, subquery_step_s=self.subquery_step_s
        )
        return self.instant(f"{promql} {op} {threshold!r}", now)

    def samples(
        self,
        metric: str,
        start: float,
        end: float,
        matchers: Mapping[str, str] | None = None,
    ) -> dict[Labels, list[RawSample]]:
        """Raw samples within ``[start, end)`` (``SampleQuery``): a range selector's scrapes of
        a plain metric (each standing for Prometheus' lookback, as an instant query reads it);
        a derived metric (a pod's utilisation over its GPUs) as a subquery at
        ``subquery_step_s`` (default :data:`SAMPLE_STEP_S`), aligned to multiples of it, each
        point standing for one step."""
        if metric not in KNOWN_METRICS:
            raise UnknownMetricError(metric, KNOWN_METRICS)
        if not (math.isfinite(start) and math.isfinite(end) and end > start):
            raise ValueError(f"samples: {start} to {end} is not a time range")
        check_query("avg", end - start, end, None, "sum", matchers, None)
        expr, plain = metric_expression(metric, matchers or {})
        width = duration(end - start)
        if plain:
            promql, span = f"{expr}[{width}]", float(LOOKBACK_S)
        else:
            span = self.subquery_step_s or SAMPLE_STEP_S
            promql = f"({expr})[{width}:{duration(span)}]"
        data = self._call("POST", "/api/v1/query", form={"query": promql, "time": repr(end)})
        return _matrix(self.url, promql, data, start, end, span)

    def instant(self, promql: str, now: float) -> dict[Labels, float]:
        """Any PromQL at ``now``: each series of the resulting vector (a scalar: key ``()``)."""
        data = self._call("POST", "/api/v1/query", form={"query": promql, "time": repr(now)})
        return _vector(self.url, promql, data)

    def label_values(self, metric: str, label: str) -> list[str]:
        """The values ``label`` takes on the series of ``metric`` (sorted)."""
        if not LABEL_NAME.fullmatch(label):
            raise ValueError(f"label_values: {label!r} is not a Prometheus label name")
        data = self._call("GET", f"/api/v1/label/{label}/values", params={"match[]": metric})
        if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
            raise PrometheusUnavailableError(self.url, f"label values of {label}: not a list")
        return sorted(data)

    def healthy(self) -> bool:
        """Whether the server answers a query now."""
        try:
            self._call("POST", "/api/v1/query", form={"query": "1"})
        except PrometheusUnavailableError:
            return False
        return True

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusSeries:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        form: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        """The ``data`` of a successful API answer; PrometheusUnavailableError otherwise."""
        try:
            response = self._client.request(method, path, data=form, params=params)
        except httpx.TimeoutException:
            raise PrometheusUnavailableError(
                self.url, f"{path} timed out after {self._client.timeout.read} s"
            ) from None
        except httpx.HTTPError as error:
            raise PrometheusUnavailableError(
                self.url, f"{path} unreachable: {error or type(error).__name__}"
            ) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise PrometheusUnavailableError(
                self.url,
                f"{path} answered HTTP {response.status_code} with a body that is not the "
                f"API's JSON: {response.text[:200]!r}",
            )
        if response.status_code != 200 or body.get("status") != "success":
            what = body.get("errorType") or "error"
            raise PrometheusUnavailableError(
                self.url,
                f"{path} answered HTTP {response.status_code}, status "
                f"{body.get('status')!r}: {what}: {body.get('error', '(no message)')}",
            )
        if "data" not in body:
            raise PrometheusUnavailableError(self.url, f"{path} answered success without data")
        return body["data"]


def _matrix(
    url: str, promql: str, data: Any, start: float, end: float, span: float
) -> dict[Labels, list[RawSample]]:
    """The result of a range query as {labels: [(time, value, span)]} within ``[start, end)``."""
    try:
        if data["resultType"] != "matrix":
            raise ValueError(f"result type {data['resultType']!r}, not a matrix")
        found: dict[Labels, list[RawSample]] = {}
        for one in data["result"]:
            labels = {k: v for k, v in one["metric"].items() if k != "__name__"}
            points = [
                (float(t), float(v), span)
                for t, v in one["values"]
                if start <= float(t) < end and math.isfinite(float(v))
            ]
            if points:
                found[as_labels(labels)] = points
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        raise PrometheusUnavailableError(
            url, f"unexpected answer to {promql!r}: {error!r}"
        ) from None
    return found


def _vector(url: str, promql: str, data: Any) -> dict[Labels, float]:
    """The result of an instant query as {labels: value}."""
    try:
        kind, result = data["resultType"], data["result"]
        if kind == "scalar":
            return {(): float(result[1])}
        if kind != "vector":
            raise ValueError(f"result type {kind!r}, not a vector")
        values: dict[Labels, float] = {}
        for one in result:
            labels = {k: v for k, v in one["metric"].items() if k != "__name__"}
            values[as_labels(labels)] = float(one["value"][1])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        raise PrometheusUnavailableError(
            url, f"unexpected answer to {promql!r}: {error!r}"
        ) from None
    return values
