"""The two CEL implementations on PyPI, side by side on DRA device selectors.

    python benchmarks/cel_selectors.py [--devices 4000] [--repeat 3] [--celpy SITE_PACKAGES]

Issue 32 item 2 asks for a maintained CEL implementation and a comparison on Kubernetes' DRA
CEL environment. The candidates are ``common-expression-language`` (module ``cel``: Rust
bindings of cel-rust; gpufleet's choice, :mod:`gpufleet.model.device_cel`) and ``cel-python``
(module ``celpy``: pure Python; not a dependency: install it anywhere and give its
site-packages with ``--celpy``). Both get the same environment: the ``device`` variable as
Kubernetes builds it (maps by domain) and the quantity and semver libraries as the same
functions (:data:`gpufleet.model.device_cel.LIBRARY`), a quantity and a version as a map of one
key; ``celpy`` calls them with its own types, converted at the boundary.

For each expression of :data:`TABLE`: whether each engine compiles it and gives the expected
answer on an H100, the microseconds to compile it, and the microseconds to evaluate it on one
device (the mean over ``--devices`` GPUs, ``--repeat`` times, the best kept). Results:
benchmarks/results/cel_selectors.md and .json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.model.device_cel import (
    LIBRARY,
    CelError,
    _device_variables,
    compile_selector,
    device_matches,
)
from gpufleet.model.dra import NVIDIA_GPU_DRIVER, Device, SemVer
from gpufleet.testing.dra import make_gpu

RESULTS = Path(__file__).resolve().parent / "results"
GPU = 'device.attributes["gpu.nvidia.com"]'
MEMORY = 'device.capacity["gpu.nvidia.com"].memory'
#: (what it exercises, expression, expected on an H100 of 80 GiB with driver 550.54.15)
TABLE: list[tuple[str, str, bool]] = [
    ("driver", 'device.driver == "gpu.nvidia.com"', True),
    ("string attribute", f'{GPU}.productName == "NVIDIA H100 80GB HBM3"', True),
    ("string function", f'{GPU}.productName.startsWith("NVIDIA H100")', True),
    ("int attribute", f"{GPU}.index < 4", True),
    ("standard attribute", 'device.attributes["resource.kubernetes.io"].pcieRoot != ""', True),
    ("quantity compareTo", f'{MEMORY}.compareTo(quantity("40Gi")) >= 0', True),
    ("quantity isGreaterThan", f'{MEMORY}.isGreaterThan(quantity("80Gi"))', False),
    ("semver", f'{GPU}.driverVersion.isGreaterThan(semver("535.0.0"))', True),
    ("has, absent domain", 'has(device.attributes["other.example.com"].x)', False),
    (
        "typical class + request",
        f'device.driver == "gpu.nvidia.com" && {GPU}.productName.startsWith("NVIDIA H100") '
        f'&& {MEMORY}.compareTo(quantity("40Gi")) >= 0',
        True,
    ),
]


@dataclass
class Outcome:
    compiles: bool
    correct: bool
    compile_us: float
    evaluate_us: float
    note: str = ""


def gpus(count: int) -> list[Device]:
    version = {f"{NVIDIA_GPU_DRIVER}/driverVersion": SemVer(550, 54, 15)}
    return [make_gpu(i % 8, pool=f"node-{i // 8}", extra=version) for i in range(count)]


def _timed(action: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def rust_engine(expression: str, expected: bool, devices: list[Device], repeat: int) -> Outcome:
    """gpufleet's own: common-expression-language through :mod:`gpufleet.model.device_cel`."""
    import cel

    try:
        compile_selector(expression)
    except CelError as error:
        return Outcome(False, False, 0.0, 0.0, str(error)[:80])
    compile_s = _timed(lambda: [cel.compile(expression) for _ in range(100)], repeat) / 100
    selector = compile_selector(expression)
    answer = device_matches(selector, devices[0])
    evaluate_s = _timed(lambda: [device_matches(selector, d) for d in devices], repeat)
    return Outcome(True, answer is expected, compile_s * 1e6, evaluate_s / len(devices) * 1e6)


def celpy_engine(expression: str, expected: bool, devices: list[Device], repeat: int) -> Outcome:
    """cel-python with the same library, its values converted at the boundary."""
    celpy: Any = importlib.import_module("celpy")  # not a dependency: see --celpy
    celtypes = celpy.celtypes

    def to_python(value: Any) -> Any:
        if isinstance(value, celtypes.MapType):
            return {str(k): to_python(v) for k, v in value.items()}
        if isinstance(value, celtypes.BoolType):
            return bool(value)
        if isinstance(value, celtypes.IntType):
            return int(value)
        if isinstance(value, celtypes.StringType):
            return str(value)
        return value

    def wrapped(function: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args: celpy.json_to_cel(function(*(to_python(a) for a in args)))

    functions = {name: wrapped(function) for name, function in LIBRARY.items()}
    environment = celpy.Environment()
    try:
        program = environment.program(environment.compile(expression), functions=functions)
    except Exception as error:  # celpy's parse errors have no common base
        return Outcome(False, False, 0.0, 0.0, str(error).splitlines()[0][:80])

    def compile_many() -> None:
        for _ in range(20):
            environment.program(environment.compile(expression), functions=functions)

    compile_s = _timed(compile_many, repeat) / 20
    activations = [{"device": celpy.json_to_cel(_device_variables(d))} for d in devices]

    def evaluate(activation: dict[str, Any]) -> object:
        try:
            return program.evaluate(activation)
        except Exception as error:  # has() on a missing domain raises in celpy
            return error

    answer = evaluate(activations[0])
    note = "" if isinstance(answer, celtypes.BoolType) else f"gave {answer!r}"[:80]
    evaluate_s = _timed(lambda: [evaluate(a) for a in activations], repeat)
    correct = isinstance(answer, celtypes.BoolType) and bool(answer) is expected
    return Outcome(True, correct, compile_s * 1e6, evaluate_s / len(devices) * 1e6, note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--celpy", help="site-packages holding cel-python (to compare)")
    args = parser.parse_args()
    engines: dict[str, Callable[[str, bool, list[Device], int], Outcome]] = {
        "common-expression-language": rust_engine
    }
    if args.celpy:
        sys.path.append(args.celpy)
        engines["cel-python"] = celpy_engine
    devices = gpus(args.devices)
    rows: list[dict[str, Any]] = []
    for what, expression, expected in TABLE:
        for engine, run in engines.items():
            outcome = run(expression, expected, devices, args.repeat)
            rows.append({"what": what, "engine": engine, **outcome.__dict__})
    versions = {}
    from importlib import metadata

    for engine in engines:
        versions[engine] = metadata.version(engine)
    lines = [
        "# CEL selectors: common-expression-language and cel-python on DRA selectors",
        "",
        f"`python benchmarks/cel_selectors.py --devices {args.devices} --repeat {args.repeat}`"
        f" on {platform.python_implementation()} {platform.python_version()}; versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items()),
        "",
        "| expression | engine | compiles | right answer | compile µs | evaluate µs/device "
        "| note |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['what']} | {row['engine']} | {'yes' if row['compiles'] else 'no'} | "
            f"{'yes' if row['correct'] else 'no'} | {row['compile_us']:.0f} | "
            f"{row['evaluate_us']:.1f} | {row['note']} |"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cel_selectors.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "cel_selectors.json").write_text(json.dumps({"versions": versions, "rows": rows}))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
