"""requirements.lock is current: it pins, with hashes, exactly what pyproject.toml asks for
(its dependencies, the dev extra and the build's requirements) and what those need in turn, and
the environment the tests run in is that set at those versions. requirements-runtime.lock, which
the container image installs, is the same without the dev extra: the same pins and hashes.

Offline: the closure of pyproject.toml's requirements is followed through the installed
distributions' own metadata, not resolved again (``make lock`` does that, from PyPI). A lock
left behind by a changed pyproject.toml fails here, in CI's ``make test``, as does a ``.venv``
not installed from the lock.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
RUNTIME_LOCK = ROOT / "requirements-runtime.lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}\b")


def locked(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Each pinned package (canonical name) → (version, the sha256 hashes of its files)."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("#") or not line.strip() or line.lstrip().startswith("#"):
            continue
        if match := _PIN.match(line):
            name = canonicalize_name(match.group(1))
            assert name not in pins, f"{name} pinned twice"
            pins[name] = (match.group(2).rstrip(" \\"), frozenset())
        else:
            assert line.startswith("    --hash="), f"not a pin or a hash: {line!r}"
            assert _HASH.search(line), f"not a sha256 hash: {line!r}"
        version, hashes = pins[name]
        pins[name] = (version, hashes | set(_HASH.findall(line)))
    return pins


def project_requirements(dev: bool = True) -> list[Requirement]:
    project = PYPROJECT["project"]
    texts = [
        *project["dependencies"],
        *(project["optional-dependencies"]["dev"] if dev else []),
        *PYPROJECT["build-system"]["requires"],
    ]
    return [Requirement(text) for text in texts]


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    environment = {str(key): str(value) for key, value in default_environment().items()}
    return any(
        requirement.marker.evaluate({**environment, "extra": extra}) for extra in extras or {""}
    )


def closure(roots: list[Requirement]) -> set[str]:
    """Every distribution ``roots`` need on this platform, following installed metadata."""
    seen: set[str] = set()
    todo: list[tuple[Requirement, set[str]]] = [(r, set(r.extras)) for r in roots]
    while todo:
        requirement, extras = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{name} is not installed: run `make`") from None
        for text in requires:
            needed = Requirement(text)
            if _applies(needed, extras):
                todo.append((needed, set(needed.extras)))
    return seen


PINS = locked(LOCK.read_text())
RUNTIME_PINS = locked(RUNTIME_LOCK.read_text())


@pytest.mark.parametrize("pins", [PINS, RUNTIME_PINS], ids=["dev", "runtime"])
def test_every_pin_is_exact_and_hashed(pins: dict[str, tuple[str, frozenset[str]]]) -> None:
    assert pins, "the lock pins nothing"
    assert {name for name, (_, hashes) in pins.items() if not hashes} == set()


@pytest.mark.parametrize("requirement", project_requirements(), ids=str)
def test_every_project_requirement_is_locked_at_a_version_it_allows(
    requirement: Requirement,
) -> None:
    name = canonicalize_name(requirement.name)
    assert name in PINS, f"{requirement} is not in requirements.lock: run `make lock`"
    version = Version(PINS[name][0])
    assert requirement.specifier.contains(version, prereleases=True), (
        f"requirements.lock pins {name}=={version}, which {requirement} excludes: run `make lock`"
    )


def test_the_lock_holds_exactly_what_the_project_needs() -> None:
    """Nothing missing (a dependency of a dependency unpinned: --require-hashes would refuse
    the install) and nothing left over (a dependency dropped from pyproject.toml)."""
    needed = closure(project_requirements())
    assert sorted(needed - set(PINS)) == [], "needed, not locked: run `make lock`"
    assert sorted(set(PINS) - needed) == [], "locked, not needed: run `make lock`"


def test_the_runtime_lock_is_the_dev_lock_without_the_dev_extra() -> None:
    needed = closure(project_requirements(dev=False))
    assert sorted(set(RUNTIME_PINS) ^ needed) == [], "run `make lock`"
    assert {name: pin for name, pin in RUNTIME_PINS.items() if PINS.get(name) != pin} == {}


def test_the_environment_is_the_locked_set() -> None:
    """The tests ran on what the lock pins (``make`` installs .venv from it)."""
    installed = {name: _installed(name) for name in PINS}
    differs = {name: (v, PINS[name][0]) for name, v in installed.items() if v != PINS[name][0]}
    assert differs == {}, "installed (left) is not locked (right): rerun `make` after `make lock`"


def _installed(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


LOCK_CASES = [
    pytest.param("a==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n",
                 {"a": ("1.0", frozenset(["--hash=sha256:" + "0" * 64]))}, id="pin"),
    pytest.param("A_b==2 \\\n    --hash=sha256:" + "1" * 64 + "\n    # via x\n",
                 {"a-b": ("2", frozenset(["--hash=sha256:" + "1" * 64]))}, id="canonical-name"),
    pytest.param("a==1.0\n", {"a": ("1.0", frozenset())}, id="no-hash"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), LOCK_CASES)
def test_lock_parsing(text: str, expected: dict[str, tuple[str, frozenset[str]]]) -> None:
    assert locked(text) == expected


@pytest.mark.parametrize(
    "text", ["a>=1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n", "a==1 \\\n    --hash=md5:00\n"]
)
def test_lock_parsing_refuses_what_is_not_a_hashed_pin(text: str) -> None:
    with pytest.raises(AssertionError):
        locked(text)
