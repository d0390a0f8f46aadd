"""The README's metrics table documents every family of gpufleet/metrics/families.py, with its
type, labels, where it is served and what it means, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.metrics import families

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `((?:gpufleet|DCGM|kube)_\w+)` \| (\w+) \| ([^|]*) \| (\w+) \| ([^|]+) \|$")


def documented() -> dict[str, tuple[str, tuple[str, ...], str, str]]:
    """Name -> (type, labels, served by, meaning) of the rows of the README's Metrics table."""
    section = README.read_text(encoding="utf-8").split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        found = ROW.match(line)
        if found:
            name, kind, labels, scope, meaning = found.groups()
            rows[name] = (kind, tuple(re.findall(r"`(\w+)`", labels)), scope, meaning.strip())
    return rows


def test_every_family_is_documented_with_its_type_labels_scope_and_meaning() -> None:
    scope = {
        **{family.name: "all" for family in families.SCHEDULER},
        **{family.name: "Kubernetes" for family in families.KUBERNETES},
        **{family.name: "serve" for family in families.SERVE},
        **{family.name: "devices" for family in families.DEVICES},
        **{family.name: "pods" for family in families.POD_STARTS},
    }
    expected = {
        family.name: (str(family.kind), family.labels, scope[family.name], family.help)
        for family in families.ALL
    }
    assert documented() == expected
