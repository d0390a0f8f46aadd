"""CEL device selectors in Kubernetes' DRA environment (issue 32 item 2): the attributes,
capacities, quantity and semver libraries evaluate as Kubernetes does; an invalid expression is
refused when compiled, saying why; evaluation errors are errors, never a silent false."""

from __future__ import annotations

import contextlib
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.device_cel import (
    CelError,
    compile_selector,
    device_matches,
    parse_quantity,
    parse_semver,
)
from gpufleet.model.dra import NVIDIA_GPU_DRIVER, SemVer
from gpufleet.testing.dra import make_gpu

H100 = make_gpu(
    0,
    extra={
        f"{NVIDIA_GPU_DRIVER}/driverVersion": SemVer(550, 54, 15),
        f"{NVIDIA_GPU_DRIVER}/mig": False,
        "example.com/rack": "r1",
    },
)
GPU = 'device.attributes["gpu.nvidia.com"]'
MEMORY = 'device.capacity["gpu.nvidia.com"].memory'

MATCHES = [
    pytest.param('device.driver == "gpu.nvidia.com"', True, id="driver"),
    pytest.param('device.driver == "other.example.com"', False, id="driver-other"),
    pytest.param(f'{GPU}.productName == "NVIDIA H100 80GB HBM3"', True, id="string-attribute"),
    pytest.param(f'{GPU}.productName.startsWith("NVIDIA A100")', False, id="string-function"),
    pytest.param(f"{GPU}.index == 0", True, id="int-attribute"),
    pytest.param(f"{GPU}.mig == false", True, id="bool-attribute"),
    pytest.param('device.attributes["example.com"].rack == "r1"', True, id="other-domain"),
    pytest.param(
        'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"', True,
        id="standard-attribute",
    ),
    pytest.param(f'{MEMORY}.compareTo(quantity("40Gi")) >= 0', True, id="quantity-compareTo"),
    pytest.param(f'{MEMORY}.isGreaterThan(quantity("80Gi"))', False, id="quantity-greater"),
    pytest.param(f'{MEMORY}.isLessThan(quantity("81Gi"))', True, id="quantity-less"),
    pytest.param(f'{MEMORY} == quantity("80Gi")', True, id="quantity-equal"),
    pytest.param(f'{MEMORY} == quantity("85899345920")', True, id="quantity-equal-bytes"),
    pytest.param(f"{MEMORY}.asInteger() == 85899345920", True, id="quantity-asInteger"),
    pytest.param(f'{MEMORY}.sub(quantity("40Gi")).isGreaterThan(quantity("39Gi"))', True,
                 id="quantity-sub"),
    pytest.param('quantity("1.5").add(1).compareTo(quantity("2500m")) == 0', True,
                 id="quantity-add-int"),
    pytest.param('quantity("100m").isInteger()', False, id="quantity-isInteger"),
    pytest.param('quantity("-2").sign() == -1', True, id="quantity-sign"),
    pytest.param('isQuantity("40Gi") && !isQuantity("40 GiB")', True, id="isQuantity"),
    pytest.param(f'{GPU}.driverVersion.isGreaterThan(semver("550.0.0"))', True, id="semver"),
    pytest.param(f'{GPU}.driverVersion.isLessThan(semver("550.54.15"))', False,
                 id="semver-equal-not-less"),
    pytest.param(f"{GPU}.driverVersion.major() == 550 && {GPU}.driverVersion.minor() == 54",
                 True, id="semver-parts"),
    pytest.param('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True, id="semver-prerelease"),
    pytest.param('semver("v1.2", true).patch() == 0', True, id="semver-normalize"),
    pytest.param('isSemver("1.2.3") && !isSemver("1.2")', True, id="isSemver"),
    pytest.param('has(device.attributes["absent.example.com"].x)', False, id="has-absent-domain"),
    pytest.param(f"has({GPU}.productName)", True, id="has-present"),
    pytest.param('["a", "b"].exists(name, name == "b")', True, id="macro-bound-variable"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "expected"), MATCHES)
def test_selector_on_a_gpu(expression: str, expected: bool) -> None:
    assert device_matches(compile_selector(expression), H100) is expected


INVALID = [
    pytest.param('device.driver ==', "invalid CEL expression", id="syntax"),
    pytest.param("", "empty", id="empty"),
    pytest.param('devcie.driver == "x"', "did you mean 'device'", id="misspelt-variable"),
    pytest.param('device.driver.startswith("x")', "did you mean 'startsWith'",
                 id="misspelt-function"),
    pytest.param('cel.bind(d, device.driver, d == "x")', "cel.bind is not supported",
                 id="cel-bind"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "message"), INVALID)
def test_an_invalid_selector_is_refused_when_compiled(expression: str, message: str) -> None:
    with pytest.raises(CelError, match=message):
        compile_selector(expression)


FAILING = [
    pytest.param(f"{GPU}.absent == 1", "CEL runtime error", id="missing-attribute"),
    pytest.param(f"{MEMORY} > 3", "CEL runtime error", id="quantity-against-int"),
    pytest.param(f"{GPU}.index", "must evaluate to a bool", id="not-a-bool"),
    pytest.param(f'{MEMORY}.isGreaterThan(semver("1.0.0"))', "expected a quantity",
                 id="quantity-against-semver"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "message"), FAILING)
def test_an_evaluation_error_is_an_error_naming_the_device(expression: str, message: str) -> None:
    with pytest.raises(CelError, match=message) as raised:
        device_matches(compile_selector(expression), H100)
    assert "gpu.nvidia.com/node-a/gpu-0" in str(raised.value) or "device" in str(raised.value)


def test_a_selector_is_compiled_once() -> None:
    expression = 'device.driver == "cached.example.com"'
    assert compile_selector(expression) is compile_selector(expression)


QUANTITIES = [
    pytest.param("40Gi", Fraction(40 * 2**30), id="binary"),
    pytest.param("1.5", Fraction(3, 2), id="decimal"),
    pytest.param("100m", Fraction(1, 10), id="milli"),
    pytest.param("1e3", Fraction(1000), id="exponent"),
    pytest.param("2k", Fraction(2000), id="kilo"),
    pytest.param("-1", Fraction(-1), id="negative"),
]


@pytest.mark.parametrize(("text", "value"), QUANTITIES)
def test_quantity_parsing(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@given(st.integers(0, 2**40), st.integers(0, 2**40))
def test_quantity_comparison_is_exact(left: int, right: int) -> None:
    expression = (
        f'quantity("{left}m").compareTo(quantity("{right}m")) == {(left > right) - (left < right)}'
    )
    assert device_matches(compile_selector(expression), H100)


_VERSIONS = st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20))


@given(_VERSIONS, _VERSIONS)
def test_semver_orders_as_its_numbers(
    left: tuple[int, int, int], right: tuple[int, int, int]
) -> None:
    a, b = ".".join(map(str, left)), ".".join(map(str, right))
    expected = "true" if left > right else "false"
    expression = f'semver("{a}").isGreaterThan(semver("{b}")) == {expected}'
    assert device_matches(compile_selector(expression), H100)
    assert (parse_semver(a).sort_key() > parse_semver(b).sort_key()) is (left > right)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param('quantity("1").compareTo(1) == 0', id="quantity-against-int"),
        pytest.param('semver("1.0.0").compareTo(quantity("1")) == 0', id="semver-against-quantity"),
    ],
)
def test_comparing_a_quantity_or_version_with_another_type_is_an_error(expression: str) -> None:
    with pytest.raises(CelError, match="expected a"):
        device_matches(compile_selector(expression), H100)


_PIECES = st.sampled_from(
    ["device", ".", "driver", "attributes", "capacity", '["gpu.nvidia.com"]', "(", ")", " == ",
     " && ", "!", " < ", "1", "2.5", '"x"', "quantity", "semver", "compareTo", "has", ",", "[]",
     "{}", ":", "?", "-", "productName"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join) | st.text(max_size=30))
def test_any_text_compiles_and_evaluates_or_says_why(expression: str) -> None:
    """Whatever a user writes, the reader gets a selector or a CelError, and evaluating it a
    bool or a CelError: never another exception from the bindings."""
    try:
        selector = compile_selector(expression)
    except CelError:
        return
    with contextlib.suppress(CelError):
        assert isinstance(device_matches(selector, H100), bool)
