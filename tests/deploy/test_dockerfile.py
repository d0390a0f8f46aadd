"""The Dockerfile (not buildable here: no docker daemon) agrees with the manifests: base image,
non-root numeric user = the pod's runAsUser, gpufleet entrypoint, metrics port; and the
.dockerignore keeps what ``pip install .`` needs."""

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


def test_bases_are_python_311_slim() -> None:
    bases = [line.split()[0] for line in _instructions("FROM")]
    assert bases
    assert set(bases) == {"python:3.11-slim"}


def test_installs_the_project_with_pip() -> None:
    assert any(line.strip() == "pip install ." for line in _instructions("RUN"))


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


KEPT = ["pyproject.toml", "README.md", "gpufleet/__init__.py", "gpufleet/data/x.csv"]
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
