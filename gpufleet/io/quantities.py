"""Kubernetes resource quantities and Go-style durations, parsed exactly.

Owns the grammar of ``500m``, ``1.5``, ``512Mi``, ``1G``, ``1e9``, ``100n`` (as the Kubernetes
API reads them: apimachinery's ``resource.Quantity``, every suffix it accepts) and of ``90s``,
``1h30m`` (as Go's ``time.ParseDuration`` reads them), and the conversion into the model's
integer units: milli-CPU, MiB and whole counts, rounding up as Kubernetes does.
Arithmetic is done on :class:`fractions.Fraction`, so there is no float drift.

It raises plain :class:`ValueError` with a message meant for people; callers that know the file
and the field wrap it in :class:`~gpufleet.io.errors.InputError`. It does not know which
resource a quantity belongs to beyond the function that was called.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from gpufleet.io.errors import quoted

MIB = 1 << 20

_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
#: Exponents beyond this are not resource sizes anyone means; refusing them keeps the exact
#: arithmetic from building enormous integers out of a typo such as ``1e999999``.
_MAX_EXPONENT = 30

# apimachinery's grammar (pkg/api/resource/quantity.go):
#   <quantity> ::= <signedNumber><suffix>;  <number> ::= <digits> | <digits>.<digits> |
#   <digits>. | .<digits>;  <suffix> ::= <binarySI> | <decimalExponent> | <decimalSI>;
#   <binarySI> ::= Ki | Mi | Gi | Ti | Pi | Ei;  <decimalExponent> ::= e<signedNumber> |
#   E<signedNumber> (whole numbers only, as its parser reads them);  <decimalSI> ::= n | u | m |
#   "" | k | M | G | T | P | E (its comment omits n and u; its parser accepts them).
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?\d+)|(?P<decimal>[numkMGTPE]?))$"
)
_EXAMPLES = "such as 500m, 2, 1.5, 512Mi, 1Gi, 1G, 1e9 or 100n"

_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}


def _text(value: object, what: str) -> str:
    """The quantity as text; YAML hands over ``2`` and ``0.5`` as numbers, which are fine."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected {what}, got {type(value).__name__} {quoted(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected {what}, got {quoted(value)}")
    # repr() of a float is its shortest decimal form ('0.1', '1e-05'), which the grammar reads.
    return value.strip() if isinstance(value, str) else repr(value)


def parse_quantity(value: object) -> Fraction:
    """The exact value of a Kubernetes quantity, in base units (cores, bytes, items)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _parse_cached(value)
    if isinstance(value, str) and len(value) <= _CACHED_TEXT:
        return _parse_cached(value)
    return _parse(value)


# A cluster's pods repeat a handful of quantities ("1", "2Gi", "500m") thousands of times, and
# exact parsing costs microseconds each: reading 10,000 pods at a scheduler's start spent most
# of its time here. Fractions are immutable, so sharing one is safe; errors are not cached, and
# long texts (never a real quantity) are not kept alive by the cache.
_CACHED_TEXT = 64


@functools.lru_cache(maxsize=4096, typed=True)
def _parse_cached(value: str | int | float) -> Fraction:
    return _parse(value)


def _parse(value: object) -> Fraction:
    text = _text(value, f"a Kubernetes quantity ({_EXAMPLES})")
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(
            f"not a Kubernetes quantity: {quoted(text)} (expected a number {_EXAMPLES})"
        )
    number = Fraction(match["number"])
    if match["binary"] is not None:
        number *= 1024 ** _BINARY_SUFFIXES[match["binary"]]
    else:
        if match["exponent"] is not None:
            exponent = int(match["exponent"])
            if abs(exponent) > _MAX_EXPONENT:
                raise ValueError(
                    f"exponent out of range in {quoted(text)} (at most e{_MAX_EXPONENT})"
                )
        else:
            exponent = _DECIMAL_SUFFIXES[match["decimal"] or ""]
        number *= Fraction(10) ** exponent
    return -number if match["sign"] == "-" else number


def _non_negative(value: object, what: str) -> Fraction:
    quantity = parse_quantity(value)
    if quantity < 0:
        raise ValueError(f"{what} must not be negative, got {quoted(value)}")
    return quantity


def parse_cpu_milli(value: object) -> int:
    """CPU (``2``, ``500m``, ``1.5``, ``0.25``) in milli-CPU, rounded up as Kubernetes does."""
    return math.ceil(_non_negative(value, "CPU") * 1000)


def parse_memory_mib(value: object) -> int:
    """Memory (``512Mi``, ``1Gi``, ``1G``, ``1e9``, ``1024``) in MiB, rounded up."""
    return math.ceil(_non_negative(value, "memory") / MIB)


def parse_count(value: object) -> int:
    """A whole count of an extended resource (``nvidia.com/gpu: 2``); fractions are refused."""
    quantity = _non_negative(value, "a resource count")
    if quantity.denominator != 1:
        raise ValueError(
            f"expected a whole number, got {quoted(value)} (extended resources such as GPUs "
            "cannot be requested in fractions)"
        )
    return quantity.numerator


def cpu_milli_from_fraction(cores: Fraction) -> int:
    """Milli-CPU of an exact number of cores (after summing containers), rounded up."""
    return math.ceil(cores * 1000)


def memory_mib_from_fraction(num_bytes: Fraction) -> int:
    """MiB of an exact number of bytes (after summing containers), rounded up."""
    return math.ceil(num_bytes / MIB)


def format_cpu(milli: int) -> str:
    """The shortest quantity for a milli-CPU value: ``2`` or ``500m``."""
    if milli < 0:
        raise ValueError(f"CPU must not be negative, got {milli}")
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_memory(mib: int) -> str:
    """The shortest binary quantity for a MiB value: ``1Ti``, ``80Gi``, ``129Mi``."""
    if mib < 0:
        raise ValueError(f"memory must not be negative, got {mib}")
    for suffix, power in (("Pi", 3), ("Ti", 2), ("Gi", 1)):
        if mib and mib % (1024**power) == 0:
            return f"{mib // 1024**power}{suffix}"
    return f"{mib}Mi"


def parse_duration_seconds(value: object) -> float:
    """Seconds, from a number (``90``, ``1.5``, ``"90"``) or a Go duration (``90s``, ``1h30m``)."""
    what = "seconds or a duration such as 90s, 5m or 1h30m"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected {what}, got {type(value).__name__} {quoted(value)}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"expected {what} (not negative), got {quoted(value)}")
        return float(value)
    text = value.strip()
    seconds = Fraction(text) if _PLAIN_NUMBER.match(text) else _go_duration(text, what)
    if seconds < 0:
        raise ValueError(f"expected {what} (not negative), got {quoted(text)}")
    return float(seconds)


_DAYS_FIRST = re.compile(r"^\s*(\d+(?:\.\d+)?)([dw])(.*)$")


def parse_long_duration(value: object) -> float:
    """Seconds, from what :func:`parse_duration_seconds` takes, or days and weeks first:
    ``7d``, ``2w``, ``1d12h`` (Go durations stop at hours)."""
    if isinstance(value, str):
        found = _DAYS_FIRST.match(value)
        if found:
            unit = 86400.0 if found[2] == "d" else 7 * 86400.0
            rest = found[3].strip()
            try:
                return float(found[1]) * unit + (parse_duration_seconds(rest) if rest else 0.0)
            except ValueError:
                raise ValueError(
                    f"expected a duration such as 7d, 24h, 90m or 1d12h, got {quoted(value)}"
                ) from None
    return parse_duration_seconds(value)


def _go_duration(text: str, what: str) -> Fraction:
    if text.startswith("-"):
        raise ValueError(f"expected {what} (not negative), got {quoted(text)}")
    body = text.removeprefix("+")
    position = 0
    total = Fraction(0)
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None:
            break
        total += Fraction(match[1]) * _DURATION_UNITS[match[2]]
        position = match.end()
    if not body or position != len(body):
        raise ValueError(f"expected {what}, got {quoted(text)}")
    return total
