"""``gpufleet serve --kubeconfig`` writes each tenant's objects impersonating it, as the user
and groups its templates name; ``--no-impersonation`` turns that off, loudly; bad templates
and the options without ``--kubeconfig`` are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.service.protocol import Plane
from gpufleet.service.tenant_identity import TenantIdentity
from gpufleet.testing.agent_builders import write_binding_key
from tests.fakes.kube_api import FakeApiServer

runner = CliRunner()


def serve(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", *args])
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(
    ("args", "identity"),
    [
        pytest.param([], TenantIdentity(), id="on-by-default"),
        pytest.param(
            ["--impersonate-user", "oidc:{tenant}", "--impersonate-group", "staff",
             "--impersonate-group", "team:{tenant}"],
            TenantIdentity("oidc:{tenant}", ("staff", "team:{tenant}")),
            id="templates",
        ),
        pytest.param(["--no-impersonation"], None, id="turned-off"),
    ],
)  # fmt: skip
def test_the_tenants_identity_on_kubernetes(
    tmp_path: Path, served: list[Plane], args: list[str], identity: TenantIdentity | None
) -> None:
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        key = write_binding_key(tmp_path / "binding.key")
        code, output = serve(
            tmp_path, "--kubeconfig", str(kubeconfig), "--binding-key-file", str(key), *args
        )
    assert code == 0, output
    (plane,) = served
    assert plane.options.tenant_identity == identity
    assert ("warning: --no-impersonation" in output) is (identity is None)
    if identity is not None:
        assert identity.user_of("team-a") != identity.user_of("team-b")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--no-impersonation"], "are for --kubeconfig", id="simulated-off"),
        pytest.param(
            ["--impersonate-user", "u:{tenant}"], "are for --kubeconfig", id="simulated-user"
        ),
        pytest.param(
            ["--kubeconfig", "K", "--impersonate-user", "gpufleet"],
            "must hold {tenant}", id="one-user-for-all",
        ),
        pytest.param(
            ["--kubeconfig", "K", "--impersonate-group", "g:{team}"],
            "the only field a template may hold is {tenant}", id="unknown-field",
        ),
        pytest.param(
            ["--kubeconfig", "K", "--impersonate-user", "u:{tenant"],
            "write a brace as", id="unbalanced-brace",
        ),
        pytest.param(
            ["--kubeconfig", "K", "--no-impersonation", "--impersonate-group", "g"],
            "--no-impersonation writes as this server", id="off-and-templates",
        ),
    ],
)  # fmt: skip
def test_refused(tmp_path: Path, served: list[Plane], args: list[str], message: str) -> None:
    code, output = serve(tmp_path, *args)
    assert code == 2, output
    assert message in output
    assert not served
