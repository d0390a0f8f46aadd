"""The Dockerfile (not buildable here: no docker daemon) agrees with the manifests: base image
(pinned by digest), locked dependencies installed by hash, non-root numeric user = the pod's
runAsUser, gpufleet entrypoint, metrics port; and the .dockerignore keeps what the build
needs."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from typing import Any

import pytest

from tests.deploy.support import DEPLOY, REPO_ROOT, load_objects

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
IGNORED = [
    line.strip()
    for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]
(DEPLOYMENT,) = [
    item.obj for item in load_objects(DEPLOY / "scheduler.yaml") if item.kind == "Deployment"
]
POD_SPEC: dict[str, Any] = DEPLOYMENT["spec"]["template"]["spec"]


def _instructions(name: str) -> list[str]:
    return re.findall(rf"^{name}\s+(.+)$", DOCKERFILE, flags=re.MULTILINE)


def _ignored(path: str) -> bool:
    return any(
        fnmatch.fnmatch(path, pattern.removeprefix("**/")) or path.split("/")[0] == pattern
        for pattern in IGNORED
    )


#: ``image:tag@sha256:<64 hex digits>``: pulled by its digest, whatever the tag points to later.
PINNED = re.compile(r"^(?P<image>[^@\s]+)@sha256:[0-9a-f]{64}$")


def _bases() -> list[str]:
    return [line.split()[0] for line in _instructions("FROM")]


def test_bases_are_python_311_slim() -> None:
    bases = _bases()
    assert bases
    assert {base.split("@")[0] for base in bases} == {"python:3.11-slim"}


@pytest.mark.parametrize(
    ("base", "pinned"),
    [
        pytest.param("python:3.11-slim@sha256:" + "0" * 64, True, id="digest"),
        pytest.param("python:3.11-slim", False, id="tag"),
        pytest.param("python@sha256:abc", False, id="short-digest"),
        pytest.param("python:3.11-slim@sha512:" + "0" * 64, False, id="other-algorithm"),
    ],
)
def test_pinned_means_a_full_sha256_digest(base: str, pinned: bool) -> None:
    assert bool(PINNED.match(base)) == pinned


def test_every_base_is_pinned_by_digest() -> None:
    """A tag moves (python:3.11-slim is rebuilt for every Debian and Python fix); a digest names
    one image. Issue 26: the base was a tag."""
    assert [base for base in _bases() if not PINNED.match(base)] == []
    assert len(set(_bases())) == 1, "both stages on the same base"


def test_installs_the_locked_dependencies_by_hash_then_the_project() -> None:
    runs = [line.strip() for line in _instructions("RUN")]
    lock = "pip install --require-hashes -r requirements-runtime.lock"
    project = "pip install --no-deps --no-build-isolation ."
    assert lock in runs
    assert project in runs
    assert runs.index(lock) < runs.index(project)
    assert (REPO_ROOT / "requirements-runtime.lock").is_file()


def test_runs_as_the_pods_non_root_user() -> None:
    (user,) = _instructions("USER")
    uid, gid = (int(part) for part in user.strip().split(":"))
    context = POD_SPEC["securityContext"]
    assert uid != 0
    assert gid != 0
    assert (uid, gid) == (context["runAsUser"], context["runAsGroup"])


def test_entrypoint_is_the_cli_the_deployment_runs() -> None:
    assert _instructions("ENTRYPOINT") == ['["gpufleet"]']
    assert POD_SPEC["containers"][0]["command"][0] == "gpufleet"
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "gpufleet" in scripts


def test_exposes_the_metrics_port() -> None:
    assert _instructions("EXPOSE") == [str(POD_SPEC["containers"][0]["ports"][0]["containerPort"])]


def test_notes_that_it_cannot_be_built_here() -> None:
    assert "cannot be built on the development machine" in DOCKERFILE


KEPT = [
    "pyproject.toml",
    "README.md",
    "requirements-runtime.lock",
    "gpufleet/__init__.py",
    "gpufleet/data/x.csv",
]
DROPPED = [
    ".venv/bin/python",
    ".git/HEAD",
    "tests/deploy/test_x.py",
    "traces/x.csv",
    "gpufleet/io/__pycache__/x.pyc",
    "deploy/scheduler.yaml",
]


@pytest.mark.parametrize("path", KEPT)
def test_build_context_keeps(path: str) -> None:
    assert not _ignored(path)


@pytest.mark.parametrize("path", DROPPED)
def test_build_context_drops(path: str) -> None:
    assert _ignored(path)
