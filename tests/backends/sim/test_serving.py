"""Inference services in the simulator: the request load over time, Erlang's C formula, the
queue a service's requests meet, and what a run adds up to against the objective."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import poisson

from gpufleet.backends.sim.serving import ServingQueue, ServingRecord, erlang_c
from gpufleet.model.serving import Burst, InferenceService, ReplicaService, RequestLoad

HOUR = 3600.0
STEP = 15.0


def service(load: RequestLoad, **replica: float) -> InferenceService:
    spec = {"throughput_rps": 10.0, "service_time_s": 0.2, "load_time_s": 60.0, "slo_p95_s": 1.0}
    return InferenceService("prod/chat", load, ReplicaService(**{**spec, **replica}))


def steady(rps: float) -> RequestLoad:
    return RequestLoad(trough_rps=rps, peak_rps=rps)


# ----------------------------------------------------------------------------- the load
def test_the_daily_wave_peaks_at_its_hour_and_is_lowest_twelve_hours_away() -> None:
    load = RequestLoad(trough_rps=10.0, peak_rps=100.0, peak_at_s=14 * HOUR)
    assert load.rate(14 * HOUR) == pytest.approx(100.0)
    assert load.rate(2 * HOUR) == pytest.approx(10.0)
    assert load.rate(26 * HOUR) == pytest.approx(10.0)
    assert load.rate(8 * HOUR) == pytest.approx(55.0)


@pytest.mark.parametrize(
    ("at", "rate"),
    [(0.0, 5.0), (50.0, 5.0), (150.0, 10.0), (200.0, 15.0), (1e6, 15.0)],
    ids=["first", "before-first", "between", "at-point", "after-last"],
)
def test_points_are_interpolated_and_held_at_the_ends(at: float, rate: float) -> None:
    load = RequestLoad(points=((100.0, 5.0), (200.0, 15.0)))
    assert load.rate(at) == pytest.approx(rate)


def test_bursts_multiply_the_rate_while_they_last() -> None:
    load = RequestLoad(trough_rps=10, peak_rps=10, bursts=(Burst(100.0, 50.0, 3.0),))
    assert [load.rate(t) for t in (99.0, 100.0, 149.0, 150.0)] == [10.0, 30.0, 30.0, 10.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trough_rps": 5.0, "peak_rps": 1.0}, "trough <= peak"),
        ({"noise": 2.0}, "coefficient of variation"),
        ({"points": ((10.0, 1.0), (5.0, 2.0))}, "must increase"),
        ({"points": ((10.0, -1.0),)}, "finite number >= 0"),
    ],
    ids=["peak-below-trough", "noise", "times-back", "negative-rate"],
)
def test_bad_loads_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RequestLoad(**kwargs)  # type: ignore[arg-type]


def test_an_objective_below_a_requests_own_time_is_refused() -> None:
    with pytest.raises(ValueError, match="must exceed a request's own time"):
        ReplicaService(throughput_rps=1.0, service_time_s=2.0, slo_p95_s=1.0)


# ----------------------------------------------------------------------------- Erlang C
def reference_erlang_c(servers: int, offered: float) -> float:
    """Erlang C from the Poisson distribution (B = pmf(n) / cdf(n))."""
    blocking = poisson.pmf(servers, offered) / poisson.cdf(servers, offered)
    return float(servers * blocking / (servers - offered * (1 - blocking)))


@pytest.mark.parametrize(
    ("servers", "offered", "expected"),
    [(1, 0.5, 0.5), (2, 1.0, 1 / 3), (3, 3.0, 1.0), (4, 0.0, 0.0)],
    ids=["mm1-is-rho", "mm2", "at-capacity", "no-load"],
)
def test_erlang_c_known_values(servers: int, offered: float, expected: float) -> None:
    assert erlang_c(servers, offered) == pytest.approx(expected)


@given(st.integers(1, 400), st.floats(0.01, 0.99))
def test_erlang_c_matches_the_poisson_form(servers: int, load: float) -> None:
    offered = servers * load
    assert erlang_c(servers, offered) == pytest.approx(reference_erlang_c(servers, offered))


@given(st.integers(1, 200), st.floats(0.01, 0.98), st.floats(0.001, 0.01))
def test_erlang_c_grows_with_load_and_falls_with_servers(
    servers: int, load: float, more: float
) -> None:
    offered = servers * load
    assert erlang_c(servers, offered) <= erlang_c(servers, offered + more * servers) + 1e-12
    assert erlang_c(servers + 1, offered) <= erlang_c(servers, offered) + 1e-12


# ----------------------------------------------------------------------------- the queue
def run(svc: InferenceService, replicas: int, seconds: float, seed: int = 1) -> list[float]:
    queue = ServingQueue(svc, np.random.default_rng(seed))
    return [queue.step(t, STEP, replicas).p95_latency_s for t in np.arange(STEP, seconds, STEP)]


def test_with_room_to_spare_a_request_takes_its_own_time() -> None:
    latencies = run(service(steady(5.0)), replicas=4, seconds=HOUR)
    assert max(latencies) == pytest.approx(0.2)


def test_near_capacity_requests_wait_and_the_objective_can_be_missed() -> None:
    light = run(service(steady(20.0)), replicas=4, seconds=HOUR)
    heavy = run(service(steady(39.0)), replicas=4, seconds=HOUR)
    assert np.median(heavy) > np.median(light)


def test_an_overload_builds_a_backlog_that_drains_once_capacity_is_back() -> None:
    svc = service(steady(60.0))  # 4 replicas serve 40 rps: 20 rps too many
    queue = ServingQueue(svc, np.random.default_rng(0))
    for t in np.arange(STEP, 10 * 60 + STEP, STEP):
        queue.step(t, STEP, 4)
    assert queue.backlog == pytest.approx(20.0 * 600, rel=0.05)
    later = [queue.step(t, STEP, 10) for t in np.arange(615, 615 + 30 * 60, STEP)]
    assert later[-1].waiting < 5
    assert later[0].p95_latency_s > later[-1].p95_latency_s


def test_no_ready_replica_leaves_every_request_waiting() -> None:
    queue = ServingQueue(service(steady(1.0)), np.random.default_rng(0))
    first = queue.step(60.0, 60.0, 0)
    assert math.isinf(first.p95_latency_s)
    assert first.waiting == queue.backlog > 0
    idle = ServingQueue(service(steady(0.0)), np.random.default_rng(0)).step(60.0, 60.0, 0)
    assert idle.p95_latency_s == pytest.approx(0.2)


def test_the_same_seed_gives_the_same_run() -> None:
    noisy = RequestLoad(trough_rps=10.0, peak_rps=30.0, noise=0.3)
    assert run(service(noisy), 3, HOUR, seed=5) == run(service(noisy), 3, HOUR, seed=5)
    assert run(service(noisy), 3, HOUR, seed=5) != run(service(noisy), 3, HOUR, seed=6)


@given(st.floats(0.0, 80.0), st.integers(0, 8), st.integers(0, 2**32 - 1))
def test_a_step_is_consistent(rps: float, replicas: int, seed: int) -> None:
    step = ServingQueue(service(steady(rps)), np.random.default_rng(seed)).step(
        STEP, STEP, replicas
    )
    assert step.p95_latency_s >= 0.2 - 1e-12
    assert 0.0 <= step.busy <= 1.0
    assert step.waiting >= 0
    assert step.in_service >= 0
    assert step.capacity_rps == replicas * 10.0


# ----------------------------------------------------------------------------- the record
def test_the_record_judges_minutes_and_counts_gpu_hours() -> None:
    record = ServingRecord(service(steady(0.0)), gpus_per_replica=0.5)
    queue = ServingQueue(service(RequestLoad(points=((0, 0.0), (120, 0.0), (121, 50.0)))),
                         np.random.default_rng(0))  # fmt: skip
    for t in np.arange(STEP, 4 * 60 + STEP, STEP):
        record.add(queue.step(float(t), STEP, 2), STEP, placed_replicas=3)
    # Minutes 0 and 1 have no requests (met); 2 and 3 get 50 rps on 20 rps of capacity.
    assert record.minutes_meeting_slo() == pytest.approx(0.5)
    assert record.gpu_hours == pytest.approx(3 * 0.5 * 4 / 60)
    assert record.replicas[0] == (STEP, 3, 2)
    assert record.latency_percentiles()["p50"] > 1.0
