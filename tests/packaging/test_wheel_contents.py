"""The wheel ``pip install .`` builds (issue 33 item 5): every file of the package, the
dashboard's static files and the data files among them, and nothing else; its metadata names
the project's version, dependencies and the ``gpufleet`` command."""

from __future__ import annotations

import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tests.packaging.support import (
    PACKAGE,
    REPO_ROOT,
    package_files,
    pyproject_version,
    source_files,
    wheel_names,
)

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _dist_info() -> str:
    return f"{PACKAGE}-{pyproject_version()}.dist-info"


def _metadata_file(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(f"{_dist_info()}/{name}").decode()


def _requirements(texts: list[str]) -> set[tuple[str, str, str]]:
    """Requirements as (name, specifiers, marker), the way setuptools writes them or not."""
    parsed = [Requirement(text) for text in texts]
    return {(r.name, str(SpecifierSet(str(r.specifier))), str(r.marker or "")) for r in parsed}


def test_the_package_has_files_the_code_reads() -> None:
    """The comparison below means something only if the package has data beside its code."""
    folders = {path.rsplit("/", 1)[0] for path in package_files() if not path.endswith(".py")}
    assert {f"{PACKAGE}/{folder}" for folder in ("data", "data/serve", "api/static")} <= folders
    assert {f"{PACKAGE}/agent/protos", PACKAGE} <= folders  # the protos, py.typed


def test_the_wheel_carries_every_file_of_the_package_and_no_other(wheel: Path) -> None:
    """The dashboard's static files, the data files, the protos and py.typed included: a file
    the package-data globs of pyproject.toml miss is named here (they listed extensions, and a
    new kind of data file would have been left out without a word)."""
    carried = {name for name in wheel_names(wheel) if name.startswith(f"{PACKAGE}/")}
    assert sorted(package_files() - carried) == [], "files of the package missing from the wheel"
    assert sorted(carried - package_files()) == [], "files in the wheel that the source lacks"


def test_the_wheel_holds_only_the_package_and_its_metadata(wheel: Path) -> None:
    tops = {name.split("/")[0] for name in wheel_names(wheel)}
    assert tops == {PACKAGE, _dist_info()}
    assert {"tests", "benchmarks"} <= {path.split("/")[0] for path in source_files()}


def test_the_metadata_names_the_projects_version_and_dependencies(wheel: Path) -> None:
    metadata = Parser().parsestr(_metadata_file(wheel, "METADATA"))
    assert metadata["Name"] == PACKAGE
    assert metadata["Version"] == PYPROJECT["project"]["version"]
    assert metadata["Requires-Python"] == PYPROJECT["project"]["requires-python"]
    required = [r for r in metadata.get_all("Requires-Dist", []) if "extra ==" not in r]
    assert _requirements(required) == _requirements(PYPROJECT["project"]["dependencies"])


def test_the_wheel_installs_the_gpufleet_command(wheel: Path) -> None:
    entry_points = _metadata_file(wheel, "entry_points.txt")
    assert "[console_scripts]\ngpufleet = gpufleet.cli.main:app" in entry_points


def test_the_wheel_is_pure_python_and_named_by_the_version(wheel: Path) -> None:
    assert wheel.name == f"{PACKAGE}-{pyproject_version()}-py3-none-any.whl"
