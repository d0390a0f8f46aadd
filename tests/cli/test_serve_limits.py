"""``gpufleet serve``'s per-tenant limits: the defaults a shared server needs, the options that
change them (0: off), and bad values refused before anything is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.service.limits import TenantLimits
from gpufleet.service.protocol import Plane

runner = CliRunner()


def serve(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", *args])
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(
    ("args", "limits"),
    [
        ([], TenantLimits(1000, 10_000, 10.0, 50, False)),
        (
            ["--max-active-workloads", "5", "--max-active-pods", "0", "--write-rate", "0.5",
             "--write-burst", "2", "--limit-admins"],
            TenantLimits(5, None, 0.5, 2, True),
        ),
        (["--write-rate", "0", "--max-active-workloads", "0"], TenantLimits(None, 10_000, None)),
    ],
    ids=["defaults", "set", "off"],
)  # fmt: skip
def test_the_limits_reach_the_plane(
    tmp_path: Path, served: list[Plane], args: list[str], limits: TenantLimits
) -> None:
    code, output = serve(tmp_path, *args)
    assert code == 0, output
    (plane,) = served
    assert plane.options.limits == limits


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-active-workloads", "-1"], "--max-active-workloads must be 0 (no limit) or more"),
        (["--write-rate", "-2"], "--write-rate must be 0 (no limit) or more, got -2"),
        (["--write-rate", "nan"], "--write-rate must be 0 (no limit) or more, got nan"),
        (["--write-burst", "0"], "--write-burst must be 1 or more, got 0"),
    ],
    ids=["negative-workloads", "negative-rate", "nan-rate", "no-burst"],
)
def test_bad_limits_are_refused_before_anything_is_stored(
    tmp_path: Path, served: list[Plane], args: list[str], message: str
) -> None:
    code, output = serve(tmp_path, *args)
    assert code == 2, output
    assert message in output
    assert not served
    assert not (tmp_path / "g.db").exists()
