"""Kubernetes quantities and Go durations: exact values, rounding up, clear refusals."""

from __future__ import annotations

import decimal
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as client_parse_quantity

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
        pytest.param("1500u", 2, id="micro-rounds-up"),
        pytest.param("250000000n", 250, id="nano"),
        pytest.param("64000m", 64000, id="alibaba"),
        pytest.param("1e3", 1_000_000, id="exponent"),
        pytest.param(" 4 ", 4000, id="spaces"),
        pytest.param("+1", 1000, id="plus-sign"),
        pytest.param("0", 0, id="zero"),
    ],
)
def test_cpu(value: object, milli: int) -> None:
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


# ------------------------------------------------------------------- against the official client
#: apimachinery's grammar (resource.Quantity), written out here on its own: the strings that
#: Kubernetes accepts. Exponents stay within the reader's cap (e30).
SIGNS = st.sampled_from(["", "+", "-"])
DIGITS = st.text("0123456789", min_size=1, max_size=12)
NUMBERS = st.one_of(
    DIGITS,
    st.builds("{}.{}".format, DIGITS, DIGITS),
    st.builds("{}.".format, DIGITS),
    st.builds(".{}".format, DIGITS),
)
BINARY_SI = st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
DECIMAL_SI = st.sampled_from(["n", "u", "m", "", "k", "M", "G", "T", "P", "E"])
DECIMAL_EXPONENTS = st.builds(
    "{}{}{}".format, st.sampled_from(["e", "E"]), SIGNS, st.integers(0, 30).map(str)
)
QUANTITIES = st.builds(
    "{}{}{}".format, SIGNS, NUMBERS, st.one_of(BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENTS)
)


def client_value(text: str) -> Fraction | None:
    """The official python client's value of ``text`` (None: it refuses it), computed exactly
    (its Decimal arithmetic would otherwise round to the default 28 digits)."""
    with decimal.localcontext(decimal.Context(prec=200, Emax=10**6, Emin=-(10**6))):
        try:
            return Fraction(client_parse_quantity(text))
        except (ValueError, decimal.InvalidOperation):
            return None


@given(QUANTITIES)
@example("100n")
@example("5u")
@example("-.5Ei")
@example("1.E+30")
def test_every_quantity_kubernetes_accepts_reads_as_the_official_client_reads_it(
    text: str,
) -> None:
    assert parse_quantity(text) == client_value(text)


@given(st.text("0123456789.+-eEinumkKMGTPEx ", max_size=8))
@example("1K")
@example("1e3k")
@example("0k ")
def test_whatever_is_read_the_official_client_reads_the_same(text: str) -> None:
    """No string is read that the client refuses, or read to another value: the strings the
    grammar refuses and the client refuses too are refused here. Spaces around a quantity are
    the one leniency of gpufleet's own (a hand-written YAML value ``" 4 "``): the client reads
    it without them."""
    try:
        ours = parse_quantity(text)
    except ValueError:
        return
    assert ours == client_value(text.strip())


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1K", id="upper-case-kilo"),
        pytest.param("1ni", id="binary-nano"),
        pytest.param("1mi", id="binary-milli"),
        pytest.param("1e3k", id="exponent-and-suffix"),
        pytest.param("1_000", id="underscore"),
        pytest.param("NaN", id="nan"),
        pytest.param("Infinity", id="infinity"),
        pytest.param("1 Ki", id="space-before-suffix"),
    ],
)
def test_what_the_client_reads_but_kubernetes_refuses_is_refused(text: str) -> None:
    """The python client is more lenient than the API server: these it reads, Kubernetes (and
    so gpufleet) refuses."""
    client_parse_quantity(text)  # read, not refused
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


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
