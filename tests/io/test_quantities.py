"""Kubernetes quantities and Go durations: exact values, rounding up, clear refusals."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.io.quantities import (
    MIB,
    format_cpu,
    format_memory,
    parse_count,
    parse_cpu_milli,
    parse_duration_seconds,
    parse_memory_mib,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("value", "milli"),
    [
        pytest.param("2", 2000, id="cores"),
        pytest.param("500m", 500, id="milli"),
        pytest.param("1.5", 1500, id="decimal"),
        pytest.param("0.25", 250, id="quarter"),
        pytest.param(2, 2000, id="yaml-int"),
        pytest.param(0.5, 500, id="yaml-float"),
        pytest.param("0.0001", 1, id="rounds-up"),
        pytest.param("1500u", None, id="micro-not-a-suffix"),
        pytest.param("64000m", 64000, id="alibaba"),
        pytest.param("1e3", 1_000_000, id="exponent"),
        pytest.param(" 4 ", 4000, id="spaces"),
        pytest.param("+1", 1000, id="plus-sign"),
        pytest.param("0", 0, id="zero"),
    ],
)
def test_cpu(value: object, milli: int | None) -> None:
    if milli is None:
        with pytest.raises(ValueError, match="not a Kubernetes quantity"):
            parse_cpu_milli(value)
    else:
        assert parse_cpu_milli(value) == milli


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        pytest.param("512Mi", 512, id="Mi"),
        pytest.param("1Gi", 1024, id="Gi"),
        pytest.param("1Ti", 1024 * 1024, id="Ti"),
        pytest.param("1G", 954, id="G-rounds-up"),
        pytest.param("1e9", 954, id="exponent"),
        pytest.param("1024", 1, id="bytes-round-up"),
        pytest.param("129M", 124, id="M"),
        pytest.param("1.5Gi", 1536, id="decimal-Gi"),
        pytest.param("1Ki", 1, id="Ki-rounds-up"),
        pytest.param("128974848", 123, id="exact-bytes"),
        pytest.param("129e6", 124, id="exponent-M"),
        pytest.param(1073741824, 1024, id="yaml-int"),
        pytest.param("262144Mi", 262144, id="alibaba"),
        pytest.param("0", 0, id="zero"),
    ],
)
def test_memory(value: object, mib: int) -> None:
    assert parse_memory_mib(value) == mib


@pytest.mark.parametrize(
    ("value", "count"),
    [
        pytest.param("2", 2, id="text"),
        pytest.param(1, 1, id="int"),
        pytest.param("0", 0, id="zero"),
        pytest.param("2000m", 2, id="milli-whole"),
        pytest.param(2.0, 2, id="float-whole"),
        pytest.param("1k", 1000, id="k"),
    ],
)
def test_count(value: object, count: int) -> None:
    assert parse_count(value) == count


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("0.5", id="half"),
        pytest.param("500m", id="milli"),
        pytest.param(1.5, id="float"),
    ],
)
def test_count_refuses_fractions(value: object) -> None:
    with pytest.raises(ValueError, match="whole number"):
        parse_count(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("abc", "not a Kubernetes quantity: 'abc'", id="word"),
        pytest.param("1.2.3", "not a Kubernetes quantity", id="two-dots"),
        pytest.param("", "not a Kubernetes quantity: ''", id="empty"),
        pytest.param("1Mb", "not a Kubernetes quantity: '1Mb'", id="wrong-suffix"),
        pytest.param("1gi", "not a Kubernetes quantity", id="lower-case-binary"),
        pytest.param("-1", "must not be negative", id="negative"),
        pytest.param(None, "expected a Kubernetes quantity", id="none"),
        pytest.param(True, "expected a Kubernetes quantity", id="bool"),
        pytest.param([1], "expected a Kubernetes quantity", id="list"),
        pytest.param(float("nan"), "expected a Kubernetes quantity", id="nan"),
        pytest.param("1e999", "exponent out of range", id="huge-exponent"),
    ],
)
def test_bad_quantities(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        parse_memory_mib(value)


def test_suffix_E_is_exa_and_e_needs_digits() -> None:
    assert parse_quantity("1E") == 10**18
    assert parse_quantity("2E2") == 200
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("1e")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param(90, 90.0, id="int"),
        pytest.param(1.5, 1.5, id="float"),
        pytest.param("90", 90.0, id="text-number"),
        pytest.param("90s", 90.0, id="seconds"),
        pytest.param("5m", 300.0, id="minutes"),
        pytest.param("1h30m", 5400.0, id="hours-minutes"),
        pytest.param("1.5h", 5400.0, id="decimal-hours"),
        pytest.param("300ms", 0.3, id="milliseconds"),
        pytest.param("2h45m30.5s", 9930.5, id="all-parts"),
        pytest.param("0", 0.0, id="zero"),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration_seconds(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("-5m", "not negative", id="negative-duration"),
        pytest.param(-1, "not negative", id="negative-number"),
        pytest.param("5x", "duration such as 90s", id="unknown-unit"),
        pytest.param("1h 30m", "duration such as 90s", id="space"),
        pytest.param("", "duration such as 90s", id="empty"),
        pytest.param("h", "duration such as 90s", id="unit-only"),
        pytest.param(True, "duration such as 90s", id="bool"),
    ],
)
def test_bad_durations(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration_seconds(value)


# ---------------------------------------------------------------------------------- properties
@given(st.integers(min_value=0, max_value=10**12))
def test_cpu_round_trip(milli: int) -> None:
    assert parse_cpu_milli(format_cpu(milli)) == milli


@given(st.integers(min_value=0, max_value=2**50))
def test_memory_round_trip(mib: int) -> None:
    assert parse_memory_mib(format_memory(mib)) == mib


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=999))
def test_decimal_cores_are_exact(whole: int, thousandths: int) -> None:
    assert parse_cpu_milli(f"{whole}.{thousandths:03d}") == whole * 1000 + thousandths


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=1, max_value=9999))
def test_finer_than_milli_rounds_up(whole: int, ten_thousandths: int) -> None:
    milli = parse_cpu_milli(f"{whole}.{ten_thousandths:04d}")
    exact = Fraction(whole) * 1000 + Fraction(ten_thousandths, 10)
    assert milli - 1 < exact <= milli


@given(st.integers(min_value=0, max_value=2**60))
def test_bytes_round_up_to_mib(num_bytes: int) -> None:
    assert parse_memory_mib(str(num_bytes)) == -(-num_bytes // MIB)


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["k", "M", "G", "T"]))
def test_decimal_suffixes_are_exact(number: int, suffix: str) -> None:
    scale = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[suffix]
    assert parse_memory_mib(f"{number}{suffix}") == -(-number * scale // MIB)


@given(st.integers(min_value=0, max_value=10**9))
def test_counts_round_trip(count: int) -> None:
    assert parse_count(str(count)) == count
    assert parse_count(count) == count


@given(st.integers(min_value=1, max_value=10**6).filter(lambda m: m % 1000 != 0))
def test_counts_refuse_milli_fractions(milli: int) -> None:
    with pytest.raises(ValueError, match="whole number"):
        parse_count(f"{milli}m")
