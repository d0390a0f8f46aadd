"""``serve``'s HTTP flags (limits per client, allowed hosts, TLS) reach the server it runs, and
the CLI talks to a server on https:// whose certificate a private CA signed (issue 26, items 8
and 12)."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.api.http_server import HeadDeadlineProtocol, HttpLimits, TlsFiles
from gpufleet.cli.client import ApiClient, ServerUnreachableError
from gpufleet.cli.main import app
from gpufleet.cli.remote_config import CA_FILE_ENV, read_config_file
from gpufleet.testing.service import ServiceHarness, make_harness, queue_doc
from gpufleet.testing.threaded_server import threaded_server
from gpufleet.testing.tls import CertificateFiles, make_certificates

runner = CliRunner()


@pytest.fixture
def configs(monkeypatch: pytest.MonkeyPatch) -> list[uvicorn.Config]:
    """``serve`` builds everything, then returns; the server settings it would have run."""
    found: list[uvicorn.Config] = []

    def run(server: uvicorn.Server, **_: object) -> None:
        found.append(server.config)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return found


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    made = make_certificates(tmp_path_factory.mktemp("tls"))
    if made is None:
        pytest.skip("no openssl command to make test certificates")
    return made


def _serve(tmp_path: Path, *flags: str) -> object:
    return runner.invoke(app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", *flags])


def test_the_flags_reach_the_server(
    tmp_path: Path, configs: list[uvicorn.Config], certificates: CertificateFiles
) -> None:
    result = _serve(
        tmp_path,
        "--header-timeout", "3", "--keep-alive", "2", "--max-connections", "50",
        "--allowed-host", "gpu.example", "--allowed-host", "*.corp.example",
        "--tls-cert", str(certificates.cert), "--tls-key", str(certificates.key),
    )  # fmt: skip
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "on https://127.0.0.1:" in result.output  # type: ignore[attr-defined]
    config = configs[0]
    assert (config.timeout_keep_alive, config.limit_concurrency) == (2, 50)
    assert isinstance(config.http, type)
    assert issubclass(config.http, HeadDeadlineProtocol)
    assert config.http.header_timeout == 3
    assert (config.ssl_certfile, config.ssl_keyfile) == (
        str(certificates.cert),
        str(certificates.key),
    )
    served = config.app
    for host, status in [
        ("gpu.example", 200),
        ("a.corp.example", 200),
        ("localhost:8080", 200),
        ("10.0.0.7:8080", 200),
        ("rebound.attacker.example", 400),
    ]:
        client = TestClient(served, base_url=f"http://{host}")  # type: ignore[arg-type]
        assert client.get("/static/dashboard.css").status_code == status, host


def test_the_defaults(tmp_path: Path, configs: list[uvicorn.Config]) -> None:
    result = _serve(tmp_path)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    config = configs[0]
    defaults = HttpLimits()
    assert (config.timeout_keep_alive, config.limit_concurrency) == (5, 1000)
    assert defaults.header_timeout == 10
    assert config.http.header_timeout == defaults.header_timeout  # type: ignore[union-attr]
    assert config.ssl_certfile is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--header-timeout", "0"], "--header-timeout must be above 0 seconds"),
        (["--keep-alive", "0"], "--keep-alive must be 1 second or more"),
        (["--max-connections", "0"], "--max-connections must be 1 or more"),
        (["--tls-key", "k.pem"], "--tls-key needs --tls-cert"),
        (["--tls-cert", "missing.pem"], "--tls-cert missing.pem: no such file"),
        (["--tls-cert", "garbage.pem"], "--tls-cert/--tls-key: cannot use them"),
    ],
    ids=["header-timeout", "keep-alive", "max-connections", "key-alone", "no-cert", "bad-cert"],
)
def test_bad_flags_are_told_before_anything_starts(
    tmp_path: Path,
    configs: list[uvicorn.Config],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.pem").write_text("x")
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    result = _serve(tmp_path, *flags)
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert message in " ".join(result.output.split())  # type: ignore[attr-defined]
    assert not configs
    assert not (tmp_path / "g.db").exists()


@pytest.mark.parametrize("key", [None, "other"], ids=["cert-without-key", "key-of-another-cert"])
def test_a_certificate_without_its_key_is_refused_before_anything_starts(
    tmp_path: Path, configs: list[uvicorn.Config], certificates: CertificateFiles, key: str | None
) -> None:
    flags = ["--tls-cert", str(certificates.cert)]
    if key is not None:
        other = make_certificates(tmp_path / "other")
        assert other is not None
        flags += ["--tls-key", str(other.key)]
    result = _serve(tmp_path, *flags)
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    said = " ".join(result.output.split())  # type: ignore[attr-defined]
    assert "--tls-cert/--tls-key: cannot use them" in said
    assert not configs
    assert not (tmp_path / "g.db").exists()


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    return make_harness(tmp_path, queues=[queue_doc("team-a", 8, namespaces=["team-a"])])


def test_the_cli_talks_to_a_server_on_https_with_a_private_ca(
    harness: ServiceHarness,
    certificates: CertificateFiles,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", CA_FILE_ENV, "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    config_file = tmp_path / "config.yaml"
    monkeypatch.setenv("GPUFLEET_CONFIG", str(config_file))
    token = harness.tokens["team-a"]
    tls = TlsFiles(certificates.cert, certificates.key)
    with threaded_server(harness.app, tls=tls) as url:
        assert url.startswith("https://")
        with pytest.raises(ServerUnreachableError, match="certificate this client does not trust"):
            ApiClient(url, token).whoami()
        assert ApiClient(url, token, ca_file=str(certificates.ca)).whoami().tenant == "team-a"

        refused = runner.invoke(app, ["whoami", "--server", url, "--token", token])
        assert refused.exit_code == 1
        assert "GPUFLEET_CA_FILE" in refused.output

        monkeypatch.setenv(CA_FILE_ENV, str(certificates.ca))
        trusted = runner.invoke(app, ["whoami", "--server", url, "--token", token])
        assert trusted.exit_code == 0, trusted.output
        assert "team-a" in trusted.output
        monkeypatch.delenv(CA_FILE_ENV)

        login = ["login", "--server", url, "--token", token, "--ca-file", str(certificates.ca)]
        logged_in = runner.invoke(app, login)
        assert logged_in.exit_code == 0, logged_in.output
        assert read_config_file(config_file).ca_file == str(certificates.ca.resolve())
        from_config = runner.invoke(app, ["whoami"])
        assert from_config.exit_code == 0, from_config.output
        assert "team-a" in from_config.output
