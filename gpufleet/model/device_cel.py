"""CEL device selectors, evaluated in Kubernetes' DRA CEL environment.

Owns :func:`compile_selector` (one compile per expression, cached; an invalid expression is a
:class:`CelError` its caller names the object and field of) and :func:`device_matches` (one
selector on one device). The environment is Kubernetes' (k8s.io/dynamic-resource-allocation/cel):
one variable, ``device``, with ``driver``, ``attributes`` and ``capacity`` maps keyed by domain
then name (``device.attributes["gpu.nvidia.com"].productName``; a domain the device lacks reads
as an empty map, so a missing attribute is an error, not a false); attribute values are ints,
bools, strings or versions; capacities are quantities. Kubernetes' quantity library
(``quantity("40Gi")``, ``isQuantity``, ``compareTo``, ``isGreaterThan``, ``isLessThan``,
``add``, ``sub``, ``asInteger``, ``asApproximateFloat``, ``isInteger``, ``sign``) and semver
library (``semver("1.2.3")``, ``isSemver``, ``major``, ``minor``, ``patch``, ``compareTo``,
``isGreaterThan``, ``isLessThan``) are here, exact (quantities as fractions).

**Why common-expression-language** (Rust bindings of the cel-rust interpreter) and not
cel-python (``celpy``, pure Python): on ``benchmarks/cel_selectors.py``'s table of DRA selectors
(results/cel_selectors.md) both compile every one and give every right answer with the same
library functions, and neither has ``cel.bind`` (refused here, saying so); but evaluating a
selector on a device costs 7 to 70 microseconds in the Rust one (its context built once per
device) and 360 to 1,200 in celpy, and compiling 8 to 90 against 90 to 1,000. A scheduler asks
every selector of a pending claim about every device it may use (500 nodes of 8 GPUs are 4,000
devices: about 0.25 s against 4 s for a typical selector). Both are maintained (0.10.0 of
September 2026; cel-python 0.5.0 of January 2026, more downloaded); the Rust bindings bring
prompt-toolkit and wcwidth beside typer and rich, which gpufleet has. celpy lets Python classes
be CEL types; the Rust bindings convert values to CEL's own types only, so a quantity and a
version are maps with one key of their own (:data:`QUANTITY_KEY`, :data:`SEMVER_KEY`) that the
library's functions take apart: comparing a quantity with a number is an evaluation error
(Kubernetes refuses it when compiling). The Rust bindings check syntax when compiling, not
types: a misspelt variable or an unknown function is refused here from the program's
references, and a type mismatch is an evaluation error of the device it met (Kubernetes, too,
fails the allocation then).

Evaluation is pure: no I/O and no clock.
"""

from __future__ import annotations

import difflib
import functools
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import cel

from gpufleet.model.dra import Device, SemVer

#: The one key of the map a quantity is in CEL (its exact value as ``numerator/denominator``).
QUANTITY_KEY = "@quantity"
#: The one key of the map a semantic version is in CEL.
SEMVER_KEY = "@semver"

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?\d{1,2})|(?P<decimal>[numkMGTPE]?))$"
)
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
_LOOSE_SEMVER = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$")
_BOUND_VARIABLE = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
_DOMAIN_LOOKUP = re.compile(r"device\s*\.\s*(attributes|capacity)\s*\[\s*(['\"])(.*?)\2\s*\]")
_VARIABLE = "device"
_IDENTIFIER = re.compile(r"^[A-Za-z][\w.]*$")
_UNSUPPORTED = {"cel.bind": "cel.bind is not supported by gpufleet's CEL; repeat the lookup"}

#: CEL's standard functions and macros, and the Kubernetes libraries' (strings, lists, regex,
#: URLs, IPs, formats): names a selector may call. Those the engine lacks fail when evaluated.
STANDARD_FUNCTIONS = frozenset((
    "size", "has", "all", "exists", "exists_one", "map", "filter", "int", "uint", "double",
    "string", "bool", "bytes", "dyn", "type", "duration", "timestamp", "matches", "startsWith",
    "endsWith", "contains", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear",
    "getFullYear", "getHours", "getMilliseconds", "getMinutes", "getMonth", "getSeconds", "max",
    "min", "charAt", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace", "split",
    "substring", "trim", "join", "quote", "reverse", "format", "isSorted", "sum", "find",
    "findAll", "url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath",
    "getQuery", "ip", "isIP", "cidr", "isCIDR", "family", "isUnspecified", "isLoopback",
    "isGlobalUnicast", "isLinkLocalMulticast", "isLinkLocalUnicast", "containsIP", "containsCIDR",
    "prefixLength", "masked", "optional.of", "optional.none", "optional.ofNonZeroValue",
    "hasValue", "value", "or", "orValue", "math.greatest", "math.least", "base64.encode",
    "base64.decode",
))  # fmt: skip


class CelError(ValueError):
    """An expression that does not compile, or fails on a device: the message says why."""


# ------------------------------------------------------------------ quantities and versions
def parse_quantity(text: str) -> Fraction:
    """A Kubernetes quantity's exact value (``40Gi``, ``1.5``, ``100m``, ``1e9``)."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise CelError(f"not a Kubernetes quantity: {text!r}")
    number = Fraction(match["number"])
    if match["binary"] is not None:
        number *= 1024 ** _BINARY[match["binary"]]
    elif match["exponent"] is not None:
        number *= Fraction(10) ** int(match["exponent"])
    else:
        number *= Fraction(10) ** _DECIMAL[match["decimal"] or ""]
    return -number if match["sign"] == "-" else number


def parse_semver(text: str, normalize: bool = False) -> SemVer:
    """A semantic version; ``normalize`` (as ``semver(text, true)``) allows a ``v`` prefix,
    missing minor and patch numbers and leading zeros."""
    if normalize:
        loose = _LOOSE_SEMVER.match(text)
        if loose is not None:
            numbers = (int(part or 0) for part in loose.groups()[:3])
            text = ".".join(map(str, numbers)) + loose[4]
    match = _SEMVER.match(text)
    if match is None:
        raise CelError(f"not a semantic version: {text!r}")
    pre = tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in (match[4] or "").split(".")
    )
    return SemVer(
        int(match[1]), int(match[2]), int(match[3]), pre if match[4] else (), match[5] or ""
    )


def quantity_value(quantity: Fraction) -> dict[str, str]:
    """A quantity as a CEL value."""
    return {QUANTITY_KEY: f"{quantity.numerator}/{quantity.denominator}"}


def semver_value(version: SemVer) -> dict[str, str]:
    """A version as a CEL value."""
    return {SEMVER_KEY: str(version)}


def _as_quantity(value: object, plain_integers: bool = False) -> Fraction:
    """A quantity's value; ``plain_integers``: an int too (what ``add`` and ``sub`` take)."""
    if isinstance(value, Mapping) and QUANTITY_KEY in value:
        return Fraction(str(value[QUANTITY_KEY]))
    if plain_integers and isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    raise CelError(f"expected a quantity, got {_shown(value)}")


def _as_semver(value: object) -> SemVer:
    if isinstance(value, Mapping) and SEMVER_KEY in value:
        return parse_semver(str(value[SEMVER_KEY]))
    raise CelError(f"expected a semver, got {_shown(value)}")


def _compare(left: object, right: object) -> int:
    """``compareTo`` of two quantities or two versions: -1, 0 or 1."""
    if isinstance(left, Mapping) and SEMVER_KEY in left:
        a, b = _as_semver(left).sort_key(), _as_semver(right).sort_key()
        return (a > b) - (a < b)
    x, y = _as_quantity(left), _as_quantity(right)
    return (x > y) - (x < y)


def _as_integer(value: object) -> int:
    quantity = _as_quantity(value)
    if quantity.denominator != 1 or not -(2**63) <= quantity.numerator < 2**63:
        raise CelError(f"quantity {_shown(value)} is not a 64-bit integer")
    return quantity.numerator


def _shown(value: object) -> str:
    """A CEL value for a message: a quantity or a version as its function would write it."""
    if isinstance(value, Mapping):
        for key in (QUANTITY_KEY, SEMVER_KEY):
            if key in value:
                return f"{key[1:]}({value[key]})"
    return repr(value)


def _is(parse: Callable[[str], object]) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            parse(text)
        except CelError:
            return False
        return True

    return check


#: The Kubernetes quantity and semver libraries, as CEL functions (receiver first).
LIBRARY: dict[str, Callable[..., Any]] = {
    "quantity": lambda text: quantity_value(parse_quantity(text)),
    "isQuantity": _is(parse_quantity),
    "semver": lambda text, normalize=False: semver_value(parse_semver(text, bool(normalize))),
    "isSemver": lambda text, normalize=False: _is(lambda t: parse_semver(t, bool(normalize)))(text),
    "compareTo": _compare,
    "isGreaterThan": lambda left, right: _compare(left, right) > 0,
    "isLessThan": lambda left, right: _compare(left, right) < 0,
    "add": lambda left, right: quantity_value(_as_quantity(left) + _as_quantity(right, True)),
    "sub": lambda left, right: quantity_value(_as_quantity(left) - _as_quantity(right, True)),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda value: float(_as_quantity(value)),
    "isInteger": lambda value: _as_quantity(value).denominator == 1,
    "sign": lambda value: (_as_quantity(value) > 0) - (_as_quantity(value) < 0),
    "major": lambda value: _as_semver(value).major,
    "minor": lambda value: _as_semver(value).minor,
    "patch": lambda value: _as_semver(value).patch,
}


# ------------------------------------------------------------------------- compile and run
@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A selector compiled once: the program and the domains it looks up."""

    expression: str
    program: Any  # cel.Program (the bindings ship no type information)
    #: Domains named as ``device.attributes["..."]`` / ``device.capacity["..."]``: a device
    #: lacking one reads it as an empty map, as Kubernetes' environment does.
    domains: frozenset[tuple[str, str]]


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> CompiledSelector:
    """``expression`` compiled, or a :class:`CelError` saying why it cannot be."""
    if not expression.strip():
        raise CelError("empty CEL expression")
    for name, why in _UNSUPPORTED.items():
        if re.search(rf"\b{re.escape(name)}\s*\(", expression):
            raise CelError(why)
    try:
        program = cel.compile(expression)
    except (ValueError, RuntimeError) as error:
        raise CelError(f"invalid CEL expression: {_first_line(error)}") from None
    references = program.references()
    bound = set(_BOUND_VARIABLE.findall(expression))
    for variable in references["variables"]:
        if variable != _VARIABLE and variable not in bound:
            raise CelError(f"undeclared reference to {variable!r}{_hint(variable, [_VARIABLE])}")
    known = STANDARD_FUNCTIONS | set(LIBRARY)
    for function in references["functions"]:
        if not _IDENTIFIER.match(function) or function in known:  # operators: _&&_, !_
            continue
        raise CelError(f"undeclared function {function!r}{_hint(function, sorted(known))}")
    domains = frozenset((kind, domain) for kind, _, domain in _DOMAIN_LOOKUP.findall(expression))
    return CompiledSelector(expression, program, domains)


def device_matches(selector: CompiledSelector, device: Device) -> bool:
    """Whether ``device`` satisfies ``selector``; a :class:`CelError` when evaluating fails or
    gives something other than a bool (Kubernetes fails the allocation then too)."""
    variables = _device_variables(device)
    missing = [(kind, d) for kind, d in selector.domains if d not in variables[kind]]
    if missing:  # rare: a fresh context with the empty maps Kubernetes would read
        filled = {kind: dict(variables[kind]) for kind in ("attributes", "capacity")}
        for kind, domain in missing:
            filled[kind][domain] = {}
        context = cel.Context({_VARIABLE: {**variables, **filled}}, LIBRARY)
    else:
        context = _device_context(device)
    try:
        with _EVALUATING:
            result = selector.program.execute(context)
    except Exception as error:  # the bindings raise RuntimeError, KeyError, TypeError...
        why = f"no such key: {error}" if isinstance(error, KeyError) else _first_line(error)
        raise CelError(f"CEL runtime error on device {device.id}: {why}") from None
    if not isinstance(result, bool):
        raise CelError(
            f"CEL expression must evaluate to a bool, got {_shown(result)} on device {device.id}"
        )
    return result


@functools.lru_cache(maxsize=1 << 16)
def selector_matches(expression: str, device: Device) -> bool:
    """:func:`device_matches` of ``expression`` (compiled once) on ``device``, remembered: a
    scheduler asks the same selectors about the same devices on every try (errors are raised
    each time, not remembered)."""
    return device_matches(compile_selector(expression), device)


#: A context is not safe to share between threads while evaluating (the bindings say so).
_EVALUATING = threading.Lock()


@functools.lru_cache(maxsize=65536)
def _device_context(device: Device) -> Any:
    """The evaluation context of ``device``, built once: building one costs more than most
    evaluations (about 80 of 100 microseconds), reusing it leaves about 15."""
    return cel.Context({_VARIABLE: _device_variables(device)}, LIBRARY)


@functools.lru_cache(maxsize=65536)
def _device_variables(device: Device) -> dict[str, Any]:
    """``device`` as the CEL variable: maps by domain (computed once per device)."""
    attributes: dict[str, dict[str, object]] = {}
    for name, value in device.attributes.items():
        domain, _, short = name.rpartition("/")
        shown = semver_value(value) if isinstance(value, SemVer) else value
        attributes.setdefault(domain, {})[short] = shown
    capacity: dict[str, dict[str, object]] = {}
    for name, amount in device.capacity.items():
        domain, _, short = name.rpartition("/")
        capacity.setdefault(domain, {})[short] = quantity_value(amount)
    return {"driver": device.driver, "attributes": attributes, "capacity": capacity}


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0] if "\n" in text and len(text) > 300 else text


def _hint(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
