"""Shared helpers of the packaging tests: the source a fresh clone holds, the wheel built from
it, and a fresh virtual environment with that wheel installed.

Everything runs offline: the wheel is built with the setuptools and wheel of the environment
running the tests (locked in requirements.lock, as ``make`` and the Dockerfile build), and
installed without its dependencies, which the test environment lends (see :func:`install`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "gpufleet"
#: Not the project's files: built or cached beside it (the fallback when git is not there).
_NOT_SOURCE = {
    ".git",
    ".venv",
    "build",
    "dist",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
}
#: pip told to use no index and to ask nothing of the network or the user.
_OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def pyproject_version(root: Path = REPO_ROOT) -> str:
    """The version ``pyproject.toml`` gives the project."""
    return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])


def source_files(root: Path = REPO_ROOT) -> list[str]:
    """The files a fresh clone of ``root`` holds, as paths relative to it (plus files not yet
    committed that git does not ignore): git's list where ``root`` is a checkout, else every
    file outside the build and cache folders."""
    if (root / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            check=True,
            capture_output=True,
        ).stdout.decode()
        return sorted(p for p in listed.split("\0") if p and (root / p).is_file())
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file()
        and not _NOT_SOURCE & set(path.relative_to(root).parts)
        and not any(part.endswith(".egg-info") for part in path.parts)
    )


def package_files(root: Path = REPO_ROOT) -> set[str]:
    """The source files of the ``gpufleet`` package: what its wheel must carry."""
    return {path for path in source_files(root) if path.startswith(f"{PACKAGE}/")}


def build_wheel(workdir: Path, root: Path = REPO_ROOT) -> Path:
    """The wheel ``pip install .`` builds from a fresh clone of ``root``, built in ``workdir``.

    Built from a copy of the clone's files, never in ``root``: setuptools keeps ``build/``
    between builds, and a file deleted from the source would stay in the next wheel from it."""
    copy = workdir / "source"
    for relative in source_files(root):
        target = copy / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, target)
    wheels = workdir / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), str(copy)],
        check=True,
        env={**os.environ, **_OFFLINE},
    )  # fmt: skip
    (wheel,) = wheels.glob("*.whl")
    return wheel


def wheel_names(wheel: Path) -> set[str]:
    """The files in ``wheel``."""
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if not name.endswith("/")}


@dataclass(frozen=True, slots=True)
class Venv:
    """A virtual environment with the wheel installed."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def site_packages(self) -> Path:
        (found,) = self.root.glob("lib/python*/site-packages")
        return found


#: The name of the file by which the test environment lends its packages to the new one.
LENDING_PTH = "zz-lent-dependencies.pth"


def install(wheel: Path, where: Path) -> Venv:
    """A fresh virtual environment at ``where`` with ``wheel`` installed in it, no
    dependencies of its own: a ``.pth`` file appends this environment's site-packages to its
    path, after its own, so gpufleet is imported from the wheel and numpy, fastapi, ... from
    the packages the tests run with (at the locked versions).

    Why so: installing the dependencies into the new environment would need the network (or a
    wheel of each of the 52 packages of requirements-runtime.lock, which nothing here keeps),
    and ``--system-site-packages`` would lend the system Python's packages, which lack them. The
    lent folder's own ``.pth`` files are not read (only a site folder's are), so an editable
    install of gpufleet there stays off the path; the tests check gpufleet comes from the
    wheel."""
    subprocess.run([_base_python(), "-m", "venv", "--without-pip", str(where)], check=True)
    venv = Venv(where)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--quiet",
         "--no-deps", str(wheel)],
        check=True,
        env={**os.environ, **_OFFLINE},
    )  # fmt: skip
    lent = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (venv.site_packages / LENDING_PTH).write_text("".join(f"{path}\n" for path in lent))
    return venv


def _base_python() -> str:
    """The interpreter this environment was made from (a venv made from a venv's python would
    still be made from the base one; this says so)."""
    return str(getattr(sys, "_base_executable", sys.executable))


def clean_environment() -> dict[str, str]:
    """This process's environment without what would put other code on the new one's path."""
    return {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV"}
    }
