"""Reading the node agent's cluster access: kubeconfig users and clusters the agent speaks
(certificates inline and as files, tokens, token files, insecure), those it refuses with an
error naming the file and the field, and the in-cluster service account."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.kube_client.light_config import KubeconfigError, in_cluster, load_kubeconfig


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key (it serves as the CA too)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("pem")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=test"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def write(tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], **extra: Any) -> Path:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://api.test:6443", **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
        **extra,
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_token_inline(tmp_path: Path) -> None:
    access = load_kubeconfig(write(tmp_path, {}, {"token": "abc"}))
    assert access.server == "https://api.test:6443"
    assert access.authorization() == "Bearer abc"
    assert str(tmp_path / "kubeconfig") in access.source


def test_token_file_is_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    access = load_kubeconfig(write(tmp_path, {}, {"tokenFile": "tok"}))
    assert access.authorization() == "Bearer from-file"


@pytest.mark.parametrize("inline", [True, False], ids=["data-inline", "files"])
def test_certificates(tmp_path: Path, pem: tuple[Path, Path], inline: bool) -> None:
    cert, key = pem
    if inline:
        cluster = {"certificate-authority-data": b64(cert)}
        user = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    else:
        cluster = {"certificate-authority": str(cert)}
        user = {"client-certificate": str(cert), "client-key": str(key)}
    access = load_kubeconfig(write(tmp_path, cluster, user))
    assert access.authorization() is None
    context = access.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "test"),),)]
    assert not list(Path(tmp_path).glob("gpufleet-kube-*"))


def test_insecure_skips_verification(tmp_path: Path) -> None:
    context = load_kubeconfig(write(tmp_path, {"insecure-skip-tls-verify": True}, {})).ssl_context()
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_NONE, False)


def test_a_key_that_is_not_the_certificates_is_a_clear_error(
    tmp_path: Path, pem: tuple[Path, Path]
) -> None:
    cert, _ = pem
    access = load_kubeconfig(
        write(tmp_path, {}, {"client-certificate": str(cert), "client-key": str(cert)})
    )
    with pytest.raises(KubeconfigError, match="bad TLS material"):
        access.ssl_context()


@pytest.mark.parametrize(
    ("cluster", "user", "extra", "expected"),
    [
        (
            {},
            {"exec": {"command": "aws"}},
            {},
            r"users\[name=u\]\.user\.exec is not supported: .*certificates and bearer tokens",
        ),
        (
            {},
            {"auth-provider": {"name": "gcp"}},
            {},
            r"users\[name=u\]\.user\.auth-provider is not supported",
        ),
        ({}, {"username": "admin", "password": "x"}, {}, r"\.user\.username is not supported"),
        ({}, {}, {"current-context": ""}, "current-context is not set"),
        ({}, {}, {"current-context": "other"}, "no context named 'other'"),
        ({"server": ""}, {}, {}, r"clusters\[name=c\]\.cluster\.server is not set"),
        (
            {"certificate-authority-data": "@@@"},
            {},
            {},
            r"certificate-authority-data is not base64",
        ),
        ({"certificate-authority": "a", "certificate-authority-data": "YQ=="}, {}, {}, "not both"),
        ({}, {"client-certificate-data": "YQ=="}, {}, "go together"),
        ({"proxy-url": "http://proxy:3128"}, {}, {}, r"proxy-url: the agent does not use proxies"),
        ({}, {"tokenFile": "missing"}, {}, "cannot read the token file"),
    ],
    ids=[
        "exec-user",
        "auth-provider-user",
        "basic-auth",
        "no-current-context",
        "unknown-current-context",
        "no-server",
        "bad-base64",
        "ca-file-and-data",
        "certificate-without-key",
        "proxy",
        "missing-token-file",
    ],
)
def test_refused(
    tmp_path: Path,
    cluster: dict[str, Any],
    user: dict[str, Any],
    extra: dict[str, Any],
    expected: str,
) -> None:
    path = write(tmp_path, cluster, user, **extra)
    with pytest.raises(KubeconfigError, match=expected) as caught:
        load_kubeconfig(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, "cannot read the kubeconfig"), ("[1, 2", "not YAML"), ("- a\n", "not a kubeconfig")],
    ids=["missing", "not-yaml", "not-a-mapping"],
)
def test_unreadable_kubeconfig(tmp_path: Path, text: str | None, expected: str) -> None:
    path = tmp_path / "kubeconfig"
    if text is not None:
        path.write_text(text)
    with pytest.raises(KubeconfigError, match=expected) as caught:
        load_kubeconfig(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("host", "server"),
    [("10.0.0.1", "https://10.0.0.1:443"), ("fd00::1", "https://[fd00::1]:443")],
    ids=["ipv4", "ipv6"],
)
def test_in_cluster(tmp_path: Path, pem: tuple[Path, Path], host: str, server: str) -> None:
    shutil.copy(pem[0], tmp_path / "ca.crt")
    (tmp_path / "token").write_text("sa-token")
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}
    access = in_cluster(env, tmp_path)
    assert access.server == server
    assert access.authorization() == "Bearer sa-token"
    assert access.ssl_context().get_ca_certs()


def test_in_cluster_needs_the_environment_and_the_account(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="not running in a cluster"):
        in_cluster({}, tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeconfigError, match="no service account CA"):
        in_cluster(env, tmp_path)
