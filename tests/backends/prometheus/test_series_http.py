"""PrometheusSeries against a loopback fake of the HTTP API: what it asks (path, form, time,
headers), how it reads the answer back (labels keyed as the store keys them), and how every
failure becomes one PrometheusUnavailableError naming the URL and what failed."""

from __future__ import annotations

import math
import re
import socket

import pytest

from gpufleet.backends.prometheus import PrometheusSeries, PrometheusUnavailableError
from gpufleet.telemetry.series_query import SeriesUnavailableError, UnknownMetricError
from tests.backends.prometheus.conftest import Answer, FakeApi

UTIL = "DCGM_FI_DEV_GPU_UTIL"


def test_asks_one_instant_query_at_now(fake_api: FakeApi) -> None:
    with PrometheusSeries(fake_api.url, headers={"Authorization": "Bearer t0k"}) as series:
        series.query(UTIL, "avg", 3600, 1_700_000_123.5, {"namespace": "ml"})
    [asked] = fake_api.asked
    assert (asked.method, asked.path) == ("POST", "/api/v1/query")
    assert asked.one("query") == 'avg_over_time(DCGM_FI_DEV_GPU_UTIL{namespace="ml"}[1h])'
    assert float(asked.one("time")) == 1_700_000_123.5
    assert asked.headers["Authorization"] == "Bearer t0k"


def test_a_path_prefix_is_kept(fake_api: FakeApi) -> None:
    with PrometheusSeries(fake_api.url + "/prometheus/") as series:
        series.query(UTIL, "max", 60, 10.0)
    assert fake_api.asked[0].path == "/prometheus/api/v1/query"


def test_reads_the_vector_keyed_like_the_store(fake_api: FakeApi) -> None:
    fake_api.answer_vector(
        ({"__name__": UTIL, "gpu": "1", "Hostname": "n1"}, "42.5"),
        ({"gpu": "0", "Hostname": "n1"}, "NaN"),
        ({"gpu": "2", "Hostname": "n1"}, "+Inf"),
    )
    with PrometheusSeries(fake_api.url) as series:
        values = series.query(UTIL, "avg", 60, 10.0)
    assert values[(("Hostname", "n1"), ("gpu", "1"))] == 42.5
    assert math.isnan(values[(("Hostname", "n1"), ("gpu", "0"))])
    assert values[(("Hostname", "n1"), ("gpu", "2"))] == math.inf


def test_grouped_query_keys_by_the_group(fake_api: FakeApi) -> None:
    fake_api.answer_vector(({"namespace": "ml"}, "3"), ({}, "1"))
    with PrometheusSeries(fake_api.url) as series:
        values = series.query(UTIL, "last", 300, 10.0, by=["namespace"], across="count")
    assert fake_api.asked[0].one("query") == "count by (namespace) (DCGM_FI_DEV_GPU_UTIL)"
    assert values == {(("namespace", "ml"),): 3.0, (): 1.0}


def test_scalar_answer(fake_api: FakeApi) -> None:
    fake_api.answer_json(
        {"status": "success", "data": {"resultType": "scalar", "result": [1, "7"]}}
    )
    with PrometheusSeries(fake_api.url) as series:
        assert series.instant("7", 1.0) == {(): 7.0}


def test_unknown_metric_is_refused_before_asking(fake_api: FakeApi) -> None:
    with PrometheusSeries(fake_api.url) as series, pytest.raises(UnknownMetricError) as error:
        series.query("node_cpu_seconds_total", "avg", 60, 10.0)
    assert "DCGM_FI_DEV_GPU_UTIL" in str(error.value)
    assert fake_api.asked == []


def test_bad_arguments_are_refused_before_asking(fake_api: FakeApi) -> None:
    with PrometheusSeries(fake_api.url) as series, pytest.raises(ValueError, match="quantile"):
        series.query(UTIL, "quantile", 60, 10.0)
    assert fake_api.asked == []


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            Answer(400, b'{"status":"error","errorType":"bad_data","error":"parse error"}'),
            "HTTP 400, status 'error': bad_data: parse error",
        ),
        (
            Answer(200, b'{"status":"error","errorType":"timeout","error":"query timed out"}'),
            "timeout: query timed out",
        ),
        (Answer(503, b"Service Unavailable", "text/plain"), "HTTP 503 with a body that is not"),
        (Answer(200, b"<html>login</html>", "text/html"), "not the API's JSON"),
        (Answer(200, b'{"status":"success"}'), "success without data"),
        (
            Answer(200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}'),
            "result type 'matrix'",
        ),
        (
            Answer(200, b'{"status":"success","data":{"resultType":"vector","result":[{}]}}'),
            "unexpected answer",
        ),
        (
            Answer(
                200,
                b'{"status":"success","data":{"resultType":"vector","result":'
                b'[{"metric":{},"value":[1,"x"]}]}}',
            ),
            "unexpected answer",
        ),
    ],
    ids=[
        "bad-query",
        "error-status",
        "not-json",
        "html",
        "no-data",
        "matrix",
        "no-metric",
        "not-a-number",
    ],
)
def test_failures_are_one_error(fake_api: FakeApi, answer: Answer, reason: str) -> None:
    fake_api.answer = answer
    with (
        PrometheusSeries(fake_api.url) as series,
        pytest.raises(PrometheusUnavailableError) as error,
    ):
        series.query(UTIL, "avg", 60, 10.0)
    assert reason in str(error.value)
    assert fake_api.url in str(error.value)
    assert isinstance(error.value, SeriesUnavailableError)


def test_unreachable_server() -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with PrometheusSeries(url, timeout_s=2) as series:
        assert not series.healthy()
        with pytest.raises(PrometheusUnavailableError, match="unreachable") as error:
            series.query(UTIL, "avg", 60, 10.0)
    assert url in str(error.value)


def test_a_server_that_does_not_answer_times_out() -> None:
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with (
            PrometheusSeries(url, timeout_s=0.2) as series,
            pytest.raises(PrometheusUnavailableError, match=re.escape("timed out after 0.2 s")),
        ):
            series.query(UTIL, "avg", 60, 10.0)


def test_healthy_is_whether_a_query_succeeds(fake_api: FakeApi) -> None:
    fake_api.answer_json(
        {"status": "success", "data": {"resultType": "scalar", "result": [1, "1"]}}
    )
    with PrometheusSeries(fake_api.url) as series:
        assert series.healthy()
        fake_api.answer = Answer(503, b"down", "text/plain")
        assert not series.healthy()


def test_label_values(fake_api: FakeApi) -> None:
    fake_api.answer_json({"status": "success", "data": ["n2", "n1"]})
    with PrometheusSeries(fake_api.url) as series:
        assert series.label_values(UTIL, "Hostname") == ["n1", "n2"]
        with pytest.raises(ValueError, match="label name"):
            series.label_values(UTIL, "../x")
    [asked] = fake_api.asked
    assert (asked.method, asked.path) == ("GET", "/api/v1/label/Hostname/values")
    assert asked.params["match[]"] == [UTIL]


@pytest.mark.parametrize("url", ["prometheus:9090", "ftp://x", "http://"], ids=str)
def test_bad_url(url: str) -> None:
    with pytest.raises(ValueError, match="must be http"):
        PrometheusSeries(url)
