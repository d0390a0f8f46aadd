"""Every PriorityClass gpufleet ships keeps the value the seed articles give a class of the same
name: a PriorityClass's value is immutable, so a cluster that applied the articles' manifests
could not apply ours (and one that applied ours would order pods unlike the articles)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
SEEDS = REPO_ROOT.parent / "shared" / "seeds"
SHIPPED = [
    REPO_ROOT / "deploy" / "examples" / "priority-classes.yaml",
    REPO_ROOT / "deploy" / "helm" / "gpufleet" / "files" / "examples" / "priority-classes.yaml",
    REPO_ROOT / "examples" / "tenancy" / "priorities.yaml",
    REPO_ROOT / "gpufleet" / "data" / "serve" / "queues.yaml",
]
#: What the seed articles give (002: inference-critical and training-batch; 004: production),
#: for when the articles themselves are not on this machine.
SEED_VALUES = {"inference-critical": 1_000_000, "training-batch": 100_000, "production": 1_000}

# The articles flatten YAML indentation: "kind: PriorityClass ... name: X ... value: N".
_SEED_CLASS = re.compile(r"kind: PriorityClass\s+metadata:\s+name: (\S+)\s+value: (\d+)")


def shipped_classes() -> list[tuple[str, str, int]]:
    found = []
    for path in SHIPPED:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "PriorityClass":
                found.append((path.name, doc["metadata"]["name"], int(doc["value"])))
    return found


def test_the_seed_values_are_the_articles() -> None:
    if not SEEDS.is_dir():
        pytest.skip(f"{SEEDS} is not on this machine")
    articles = {
        m[1]: int(m[2]) for p in SEEDS.glob("*.txt") for m in _SEED_CLASS.finditer(p.read_text())
    }
    assert articles == SEED_VALUES


@pytest.mark.parametrize(("file", "name", "value"), shipped_classes(), ids=lambda v: str(v))
def test_a_shipped_class_named_as_in_the_articles_has_their_value(
    file: str, name: str, value: int
) -> None:
    if name in SEED_VALUES:
        assert value == SEED_VALUES[name], (
            f"{file}: {name} is {value}, the articles say {SEED_VALUES[name]}"
        )
