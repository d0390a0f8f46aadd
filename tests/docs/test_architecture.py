"""docs/architecture.md stays true to the code: every module it names exists, every top-level
package is described in it, and its worked example runs (issue 31 item 10). Nothing in the
repository cites a design document that is not in it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "architecture.md"
#: ``gpufleet/...`` paths (files and folders) as the page names them.
PATH = re.compile(r"(?<![\w/.-])gpufleet/[\w./-]*[\w/]")
#: ``gpufleet.x.y`` module names (a label such as ``gpufleet.dev/tenant`` is not one).
MODULE = re.compile(r"(?<![\w/.])gpufleet(?:\.[a-z_][a-z0-9_]*)+(?![\w/])")
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def named_paths(text: str) -> list[str]:
    return sorted(set(PATH.findall(text)))


def named_modules(text: str) -> list[str]:
    return sorted(set(MODULE.findall(text)))


def missing_paths(text: str) -> list[str]:
    return [p for p in named_paths(text) if not (REPO / p).exists()]


def missing_modules(text: str) -> list[str]:
    return [m for m in named_modules(text) if importlib.util.find_spec(m) is None]


def top_level_packages() -> list[str]:
    return sorted(p.parent.name for p in (REPO / "gpufleet").glob("*/__init__.py"))


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        pytest.param("`gpufleet/control/loop.py`", [], id="a-file-that-exists"),
        pytest.param("`gpufleet/backends/sim/`, the sim", [], id="a-folder-that-exists"),
        pytest.param(
            "`gpufleet/control/allocation.py`",
            ["gpufleet/control/allocation.py"],
            id="a-file-renamed-away",
        ),
        pytest.param("(`gpufleet/nowhere/`)", ["gpufleet/nowhere/"], id="a-missing-folder"),
    ],
)
def test_the_path_check_finds_what_is_missing(text: str, missing: list[str]) -> None:
    assert missing_paths(text) == missing


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        pytest.param("`gpufleet.scheduling.core`", [], id="a-module-that-exists"),
        pytest.param("`gpufleet.service.base`", ["gpufleet.service.base"], id="a-renamed-one"),
        pytest.param("the label `gpufleet.dev/tenant`", [], id="a-label-is-no-module"),
    ],
)
def test_the_module_check_finds_what_is_missing(text: str, missing: list[str]) -> None:
    assert missing_modules(text) == missing


def test_every_path_the_page_names_exists() -> None:
    text = PAGE.read_text()
    assert len(named_paths(text)) > 50  # the page names modules, and the pattern finds them
    assert missing_paths(text) == []


def test_every_module_the_page_names_exists() -> None:
    assert missing_modules(PAGE.read_text()) == []


def test_every_top_level_package_is_described() -> None:
    text = PAGE.read_text()
    packages = top_level_packages()
    assert {"scheduling", "backends", "testing"} <= set(packages)
    undescribed = [p for p in packages if f"`gpufleet/{p}/`" not in text]
    assert undescribed == []


def test_the_worked_example_runs() -> None:
    (example,) = PYTHON_BLOCK.findall(PAGE.read_text())
    exec(compile(example, str(PAGE), "exec"), {"__name__": "architecture_example"})


def test_no_file_cites_a_design_document_outside_the_repository() -> None:
    sources = [REPO / "README.md", REPO / "pyproject.toml", *sorted(REPO.glob("gpufleet/**/*.py"))]
    citing = [str(p.relative_to(REPO)) for p in sources if "DESIGN.md" in p.read_text()]
    assert citing == []
