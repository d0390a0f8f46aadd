"""The PromQL of each window query, and the arguments refused before anything is sent."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest

from gpufleet.backends.prometheus.promql import KNOWN_METRICS, check_query, window_query
from gpufleet.model.alerts import LOOKBACK_S, WORKLOAD_START_TIME, AlertMetric

UTIL = AlertMetric.GPU_UTIL.value
MEMORY = (
    '100 * DCGM_FI_DEV_FB_USED{Hostname="n1"} / '
    '(DCGM_FI_DEV_FB_USED{Hostname="n1"} + DCGM_FI_DEV_FB_FREE{Hostname="n1"})'
)


@pytest.mark.parametrize(
    ("metric", "fn", "window_s", "matchers", "quantile", "expected"),
    [
        (UTIL, "avg", 3600, None, None, "avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h])"),
        (
            UTIL,
            "max",
            90,
            {"gpu": "0"},
            None,
            'max_over_time(DCGM_FI_DEV_GPU_UTIL{gpu="0"}[1m30s])',
        ),
        (UTIL, "count", 300, None, None, "count_over_time(DCGM_FI_DEV_GPU_UTIL[5m])"),
        (UTIL, "quantile", 600, None, 0.9, "quantile_over_time(0.9, DCGM_FI_DEV_GPU_UTIL[10m])"),
        (UTIL, "last", LOOKBACK_S, {"pod": ""}, None, 'DCGM_FI_DEV_GPU_UTIL{pod=""}'),
        (UTIL, "last", 3600, None, None, "last_over_time(DCGM_FI_DEV_GPU_UTIL[1h])"),
        ("gpufleet_gpu_memory_used_percent", "last", LOOKBACK_S, {"Hostname": "n1"}, None, MEMORY),
        (
            "gpufleet_gpu_memory_used_percent",
            "max",
            3600,
            {"Hostname": "n1"},
            None,
            f"max_over_time(({MEMORY})[1h:])",
        ),
        (
            "gpufleet_workload_gpu_util",
            "avg",
            3600,
            {"namespace": "ml"},
            None,
            'avg_over_time((avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!="", '
            'namespace="ml"}))[1h:])',
        ),
        (
            WORKLOAD_START_TIME,
            "last",
            LOOKBACK_S,
            {"namespace": "ml", "pod": "a"},
            None,
            'kube_pod_start_time{namespace="ml", pod="a"}',
        ),
        (
            UTIL,
            "avg",
            60,
            {"pod": 'we"ird\\'},
            None,
            'avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod="we\\"ird\\\\"}[1m])',
        ),
    ],
    ids=[
        "avg",
        "max-matcher",
        "count",
        "quantile",
        "last-is-instant",
        "last-over-window",
        "memory-percent-instant",
        "memory-percent-subquery",
        "workload-util",
        "pod-start",
        "escaped-value",
    ],
)
def test_window_query(
    metric: str,
    fn: str,
    window_s: float,
    matchers: Mapping[str, str] | None,
    quantile: float | None,
    expected: str,
) -> None:
    assert window_query(metric, fn, window_s, matchers, quantile) == expected


@pytest.mark.parametrize(
    ("by", "across", "expected"),
    [
        (None, "sum", "avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h])"),
        ((), "sum", "sum(avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h]))"),
        (("namespace",), "avg", "avg by (namespace) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h]))"),
        (
            ("Hostname", "gpu"),
            "count",
            "count by (Hostname, gpu) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h]))",
        ),
    ],
    ids=["no-grouping", "one-group", "by-namespace", "count-by-two"],
)
def test_grouping(by: Sequence[str] | None, across: str, expected: str) -> None:
    assert window_query(UTIL, "avg", 3600, by=by, across=across) == expected


def test_subquery_step() -> None:
    query = window_query("gpufleet_workload_gpu_util", "min", 600, subquery_step_s=15)
    assert query.endswith("[10m:15s])")


def test_every_rule_metric_is_known() -> None:
    assert set(KNOWN_METRICS) == {m.value for m in AlertMetric} | {WORKLOAD_START_TIME}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fn": "median"}, "fn 'median'"),
        ({"across": "stddev"}, "across 'stddev'"),
        ({"fn": "quantile"}, "needs a quantile"),
        ({"fn": "quantile", "quantile": 1.5}, "needs a quantile"),
        ({"window_s": 0}, "must be positive"),
        ({"window_s": math.inf}, "must be positive"),
        ({"now": math.nan}, "finite"),
        ({"matchers": {"bad-name": "x"}}, "matcher label 'bad-name'"),
        ({"by": ["a b"]}, "by label 'a b'"),
    ],
    ids=lambda v: str(v)[:30] if isinstance(v, str) else None,
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "fn": "avg",
        "window_s": 60.0,
        "now": 1000.0,
        "quantile": None,
        "across": "sum",
        "matchers": None,
        "by": None,
    }
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        check_query(**arguments)  # type: ignore[arg-type]
