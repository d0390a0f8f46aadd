"""The fault suite's audit-log reading (no cluster needed): only 2xx Binding creates of the
run's namespace count, from where the log ended when the monitor started, across a rotation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.invariants import AuditBindings


def _line(name: str, code: int = 201, namespace: str = "e2e-x", sub: str = "binding") -> str:
    event = {
        "stage": "ResponseComplete",
        "verb": "create",
        "objectRef": {"resource": "pods", "namespace": namespace, "name": name, "subresource": sub},
        "responseStatus": {"code": code},
    }
    return json.dumps(event, separators=(",", ":")) + "\n"


@pytest.mark.parametrize(
    ("lines", "bindings"),
    [
        pytest.param([_line("a"), _line("a")], {"a": 2}, id="bound-twice"),
        pytest.param([_line("a"), _line("a", code=409)], {"a": 1}, id="refused-not-counted"),
        pytest.param([_line("a", namespace="other")], {}, id="other-namespace"),
        pytest.param([_line("a", sub="eviction")], {}, id="eviction-not-a-binding"),
    ],
)
def test_counts_successful_bindings(
    tmp_path: Path, lines: list[str], bindings: dict[str, int]
) -> None:
    log = tmp_path / "audit.log"
    log.write_text(_line("before"))
    audit = AuditBindings(log, "e2e-x")
    with log.open("a") as handle:
        handle.writelines(lines)
    audit.read()
    assert dict(audit.bindings) == bindings


def test_reads_on_across_a_partial_line_and_a_rotation(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("")
    audit = AuditBindings(log, "e2e-x")
    whole = _line("a")
    log.write_text(whole[:20])
    audit.read()
    with log.open("a") as handle:
        handle.write(whole[20:])
    audit.read()
    log.rename(tmp_path / "audit-1.log")  # rotated, as the API server does: a new file
    log.write_text(_line("a"))
    audit.read()
    assert audit.bindings["a"] == 2
