"""CHANGELOG.md is kept (issue 33 item 5): in Keep a Changelog's form, newest first, its newest
version the package's; and every other place that names gpufleet's version (the Helm chart,
the image tags of deploy/ and the Dockerfile) names the same one."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest
import yaml

from tests.packaging.support import REPO_ROOT, pyproject_version

CHANGELOG = REPO_ROOT / "CHANGELOG.md"
#: ``## [1.2.3] - 2026-12-02`` or ``## [Unreleased]``.
RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<day>\d{4}-\d{2}-\d{2}))?$", re.M)
SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
#: Keep a Changelog's kinds of change.
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
#: ``ghcr.io/gpufleet/gpufleet:<tag>`` wherever an image is named.
IMAGE_TAG = re.compile(r"ghcr\.io/gpufleet/gpufleet:([\w.+-]*\w)")


def releases(text: str) -> list[tuple[str, str | None]]:
    """(version, day) of each ``## [...]`` heading, in the file's order."""
    return [(m["version"], m["day"]) for m in RELEASE.finditer(text)]


def released_versions(text: str) -> list[tuple[int, int, int]]:
    found = []
    for version, day in releases(text):
        if version == "Unreleased":
            continue
        match = SEMVER.match(version)
        assert match, f"{version}: not MAJOR.MINOR.PATCH"
        assert day is not None, f"{version}: no date"
        date.fromisoformat(day)
        found.append((int(match[1]), int(match[2]), int(match[3])))
    return found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("## [Unreleased]\n\n## [0.2.0] - 2026-12-02\n", [(0, 2, 0)], id="kept"),
        pytest.param(
            "## [0.3.0] - 2027-01-05\n## [0.2.0] - 2026-12-02\n",
            [(0, 3, 0), (0, 2, 0)],
            id="two-releases",
        ),
        pytest.param("## [1.0] - 2026-12-02\n", AssertionError, id="not-semver"),
        pytest.param("## [0.2.0]\n", AssertionError, id="undated"),
        pytest.param("## [0.2.0] - 2026-13-02\n", ValueError, id="no-such-day"),
    ],
)
def test_the_release_headings_are_read(
    text: str, expected: list[tuple[int, int, int]] | type[Exception]
) -> None:
    if isinstance(expected, list):
        assert released_versions(text) == expected
    else:
        with pytest.raises(expected):
            released_versions(text)


def test_the_newest_version_is_the_packages() -> None:
    versions = released_versions(CHANGELOG.read_text())
    assert versions, "no release in CHANGELOG.md"
    assert ".".join(map(str, versions[0])) == pyproject_version()


def test_releases_are_newest_first_and_unreleased_on_top() -> None:
    text = CHANGELOG.read_text()
    headings = releases(text)
    assert [version for version, _ in headings].count("Unreleased") <= 1
    if ("Unreleased", None) in headings:
        assert headings[0] == ("Unreleased", None)
    versions = released_versions(text)
    assert versions == sorted(set(versions), reverse=True)
    days = [day or "" for version, day in headings if version != "Unreleased"]
    assert days == sorted(days, reverse=True)


def test_changes_are_grouped_by_keep_a_changelogs_kinds() -> None:
    kinds = set(re.findall(r"^### (.+)$", CHANGELOG.read_text(), flags=re.M))
    assert kinds
    assert kinds <= KINDS


def _chart_versions(path: Path) -> list[str]:
    """The chart's own version and its appVersion: one number, as the project keeps them."""
    chart = yaml.safe_load(path.read_text())
    return [str(chart["version"]), str(chart["appVersion"])]


def _image_tags(path: Path) -> list[str]:
    return IMAGE_TAG.findall(path.read_text())


def _version_labels(path: Path) -> list[str]:
    return re.findall(r"app\.kubernetes\.io/version: \"?([^\s\"{]+)", path.read_text())


@pytest.mark.parametrize(
    ("place", "read"),
    [
        pytest.param("deploy/helm/gpufleet/Chart.yaml", _chart_versions, id="chart"),
        pytest.param("deploy/scheduler.yaml", _image_tags, id="scheduler-image"),
        pytest.param("deploy/agent.yaml", _image_tags, id="agent-image"),
        pytest.param("deploy/scheduler.yaml", _version_labels, id="scheduler-label"),
        pytest.param("deploy/agent.yaml", _version_labels, id="agent-label"),
        pytest.param("deploy/README.md", _image_tags, id="deploy-readme"),
        pytest.param("Dockerfile", _image_tags, id="dockerfile"),
    ],
)
def test_every_place_naming_the_version_names_the_packages(
    place: str, read: Callable[[Path], list[str]]
) -> None:
    found = read(REPO_ROOT / place)
    assert found, f"{place} names no version"
    assert set(found) == {pyproject_version()}
