"""``--binding-key-file``: ``gpufleet scheduler``, ``gpufleet serve --kubeconfig`` and
``gpufleet agent`` refuse to start without the key that signs device bindings (or a bad one),
unless told ``--insecure-unsigned-bindings``; with it, the key reaches what signs and checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.kube.binding_signature import BindingKey
from gpufleet.service.kube_plane import KubeControlPlane
from gpufleet.service.protocol import Plane
from gpufleet.testing.agent_builders import TEST_BINDING_KEY, write_binding_key
from tests.fakes.kube_api import FakeApiServer

runner = CliRunner()
EXAMPLE_GPUS = Path(__file__).resolve().parents[2] / "examples" / "agent" / "fake-gpus.yaml"


@pytest.fixture(autouse=True)
def no_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFLEET_BINDING_KEY_FILE", raising=False)


def _command(name: str, tmp_path: Path) -> list[str]:
    """The command, up to where it reads the key (with a kubeconfig that cannot connect)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    if name == "scheduler":
        return ["scheduler", "--kubeconfig", str(kubeconfig), "--metrics-port", "0"]
    if name == "serve":
        return ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", "--kubeconfig",
                str(kubeconfig)]  # fmt: skip
    return ["agent", "--node-name", "gpu-1", "--fake-gpus", str(EXAMPLE_GPUS), "--kubeconfig",
            str(kubeconfig), "--metrics-address", "127.0.0.1:0"]  # fmt: skip


COMMANDS = ["scheduler", "serve", "agent"]


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize(
    ("key_args", "message"),
    [
        pytest.param(lambda _: [], "--binding-key-file is required", id="no-key"),
        pytest.param(
            lambda tmp: ["--binding-key-file", str(tmp / "absent")],
            "cannot read the binding key",
            id="missing-file",
        ),
        pytest.param(
            lambda tmp: ["--binding-key-file", str(_short_key(tmp))],
            "needs at least 32 bytes",
            id="short-key",
        ),
        pytest.param(
            lambda tmp: [
                "--binding-key-file",
                str(write_binding_key(tmp / "key")),
                "--insecure-unsigned-bindings",
            ],
            "give one, not both",
            id="both",
        ),
    ],
)
def test_refuses_to_start_without_a_good_key(
    tmp_path: Path, name: str, key_args: object, message: str
) -> None:
    args = [*_command(name, tmp_path), *key_args(tmp_path)]  # type: ignore[operator]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "g.db").exists(), "nothing is stored when it does not start"


def _short_key(tmp_path: Path) -> Path:
    path = tmp_path / "short"
    path.write_text("hunter2\n")
    return path


@pytest.mark.parametrize("name", ["scheduler", "agent"])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "insecure"])
def test_with_a_key_or_the_insecure_flag_it_goes_on_to_connect(
    tmp_path: Path, name: str, with_key: bool
) -> None:
    extra = (
        ["--binding-key-file", str(write_binding_key(tmp_path / "key"))]
        if with_key
        else ["--insecure-unsigned-bindings"]
    )
    result = runner.invoke(app, [*_command(name, tmp_path), *extra])
    said = " ".join(result.output.split())
    assert "binding" not in said, said
    assert "cannot load the Kubernetes configuration" in said


def test_the_key_comes_from_the_environment_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_BINDING_KEY_FILE", str(write_binding_key(tmp_path / "key")))
    result = runner.invoke(app, _command("scheduler", tmp_path))
    assert "cannot load the Kubernetes configuration" in result.output


def test_serve_without_kubeconfig_needs_no_key(tmp_path: Path, served: list[Plane]) -> None:
    result = runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("with_key", "expected"), [(True, TEST_BINDING_KEY), (False, None)], ids=["key", "insecure"]
)
def test_serve_on_kubernetes_signs_with_the_key(
    tmp_path: Path, served: list[Plane], with_key: bool, expected: BindingKey | None
) -> None:
    extra = (
        ["--binding-key-file", str(write_binding_key(tmp_path / "key"))]
        if with_key
        else ["--insecure-unsigned-bindings"]
    )
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        args = ["serve", "--db", str(tmp_path / "g.db"), "--port", "0"]
        result = runner.invoke(app, [*args, "--kubeconfig", str(kubeconfig), *extra])
    assert result.exit_code == 0, result.output
    (plane,) = served
    assert isinstance(plane, KubeControlPlane)
    assert plane.scheduler_options.binding_key == expected
