"""``gpufleet serve --idle-policies FILE [--idle-dry-run]`` and IdlePolicy objects in a
``--scenario`` file: the reclaimer is subscribed to the plane's rounds with them, and a bad or
doubled policy is one clear error before anything is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.service.embedded_plane import EmbeddedControlPlane
from gpufleet.service.idle_actions import IdleReclaimer
from gpufleet.service.store import Store

runner = CliRunner()

POLICY = """
apiVersion: gpufleet.dev/v1alpha1
kind: IdlePolicy
metadata: {name: NAME}
spec:
  threshold: 10
  window: 30m
  actions:
    - {action: Notify}
    - {action: Stop, after: 30m}
"""


def serve(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", *args])
    return result.exit_code, " ".join(result.output.split())


def reclaimer_of(plane: EmbeddedControlPlane) -> IdleReclaimer:
    observatory = plane.observatory
    assert observatory is not None
    owners = [getattr(s, "__self__", None) for s in observatory._subscribers]
    found = [owner for owner in owners if isinstance(owner, IdleReclaimer)]
    assert len(found) == 1
    reclaimer = found[0]
    assert isinstance(reclaimer, IdleReclaimer)
    return reclaimer


def write(tmp_path: Path, file: str, text: str) -> str:
    path = tmp_path / file
    path.write_text(text)
    return str(path)


def test_policies_from_options_and_the_scenario_act_on_the_plane(
    tmp_path: Path,
    served: list[EmbeddedControlPlane],
) -> None:
    policies = write(tmp_path, "idle.yaml", POLICY.replace("NAME", "notebooks"))
    scenario = write(tmp_path, "scenario.yaml", POLICY.replace("NAME", "debug"))
    code, output = serve(tmp_path, "--idle-policies", policies, "--scenario", scenario)
    assert code == 0, output
    assert "idle policies notebooks, debug" in output
    reclaimer = reclaimer_of(served[0])
    assert [p.name for p in reclaimer.engine.policies] == ["debug", "notebooks"]
    assert not reclaimer.engine.dry_run
    code, output = serve(tmp_path, "--idle-policies", policies, "--idle-dry-run")
    assert code == 0, output
    assert "idle policies notebooks (dry run)" in output
    assert reclaimer_of(served[1]).engine.dry_run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--idle-policies", "BAD"], "spec.threshold", id="malformed-policy"),
        pytest.param(
            ["--idle-policies", "GOOD", "--scenario", "GOOD"],
            "IdlePolicy 'notebooks' is given twice",
            id="same-name-twice",
        ),
        pytest.param(
            ["--idle-policies", "GOOD", "--kubeconfig", "kubeconfig"],
            "--idle-policies with --kubeconfig needs --prometheus-url",
            id="kube-without-prometheus",
        ),
    ],
)
def test_bad_policies_are_refused_before_anything_is_stored(
    tmp_path: Path,
    served: list[EmbeddedControlPlane],
    args: list[str],
    message: str,
) -> None:
    named = {
        "GOOD": write(tmp_path, "good.yaml", POLICY.replace("NAME", "notebooks")),
        "BAD": write(
            tmp_path,
            "bad.yaml",
            POLICY.replace("NAME", "x").replace("threshold: 10", "threshold: 300"),
        ),
    }
    code, output = serve(tmp_path, *[named.get(a, a) for a in args])
    assert code in (1, 2), output
    assert message in output
    assert not served
    db = tmp_path / "g.db"
    if db.exists():  # opened, but nothing written
        store = Store(db)
        assert store.meta("seeded") is None
        assert store.objects("Queue") == []
        store.close()
