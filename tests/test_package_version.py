"""``gpufleet.__version__`` (and so ``gpufleet --version``) names the version of the code that
runs: a source checkout's pyproject.toml, else the installed metadata (issue 33 item 5; the
installed side is run for real by tests/packaging/test_installed_wheel.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import gpufleet
from gpufleet.cli.main import app
from gpufleet.package_version import UNKNOWN_VERSION, current_version, version_of
from tests.packaging.support import REPO_ROOT, pyproject_version


def _project(name: str, version: str | None) -> str:
    line = f'version = "{version}"\n' if version is not None else 'dynamic = ["version"]\n'
    return f'[project]\nname = "{name}"\n{line}'


@pytest.mark.parametrize(
    ("pyproject", "installed", "expected"),
    [
        pytest.param(_project("gpufleet", "0.3.0"), "0.2.0", "0.3.0", id="checkout-over-metadata"),
        pytest.param(_project("gpufleet", "0.3.0"), None, "0.3.0", id="checkout-not-installed"),
        pytest.param(_project("other", "9.9.9"), "0.2.0", "0.2.0", id="another-projects-pyproject"),
        pytest.param(None, "0.2.0", "0.2.0", id="installed-wheel"),
        pytest.param(None, None, UNKNOWN_VERSION, id="neither"),
        pytest.param("[project\nname =", "0.2.0", "0.2.0", id="broken-pyproject"),
        pytest.param(_project("gpufleet", None), "0.2.0", "0.2.0", id="dynamic-version"),
    ],
)
def test_the_version_is_the_checkouts_else_the_installed_one(
    tmp_path: Path, pyproject: str | None, installed: str | None, expected: str
) -> None:
    package = tmp_path / "gpufleet"
    package.mkdir()
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    assert version_of(package, lambda: installed) == expected


def test_this_checkout_reports_its_pyprojects_version() -> None:
    assert Path(gpufleet.__file__).resolve().parent.parent == REPO_ROOT
    assert current_version() == gpufleet.__version__ == pyproject_version()


@pytest.mark.parametrize("args", [pytest.param(["--version"], id="option"), ["version"]])
def test_the_cli_prints_the_version(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == pyproject_version()
