"""Where the node agent's API server is and how it proves who it is: a kubeconfig or the pod's
service account, read without the official ``kubernetes`` package.

Owns :class:`ClusterAccess` (the server, its CA, the client certificate, the bearer token) and
its two sources: :func:`load_kubeconfig` (the current context of one kubeconfig file: server,
``certificate-authority`` / ``-data``, ``insecure-skip-tls-verify``, ``tls-server-name``,
``client-certificate`` / ``-data`` with ``client-key`` / ``-data``, ``token``, ``tokenFile``;
relative paths are relative to the file, as kubectl reads them) and :func:`in_cluster`
(``KUBERNETES_SERVICE_HOST``/``PORT`` and the service account's ``token`` and ``ca.crt``). A
token read from a file is read again when the file changes (the kubelet rotates projected
service account tokens), as client-go does. It refuses, with an error naming the file and the
field, what the agent does not speak: ``exec`` and ``auth-provider`` plugins, basic auth,
proxies. It makes no calls: :mod:`.light_api` does.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import ssl
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: Where the kubelet mounts a pod's service account.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

SUPPORTED = "the agent supports client certificates and bearer tokens (token, tokenFile)"


class KubeconfigError(ValueError):
    """A kubeconfig (or the in-cluster configuration) the agent cannot use; the message names
    the file and the field."""


class FileToken:
    """A bearer token in a file, read again whenever the file changes; the last token read
    stays in use while the file is briefly absent (mid-rotation)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._token = ""
        self.read()

    def read(self) -> str:
        with self._lock:
            try:
                info = self.path.stat()
                stamp = (info.st_mtime_ns, info.st_size)
                if stamp != self._stamp:
                    self._token = self.path.read_text().strip()
                    self._stamp = stamp
            except OSError as error:
                if self._stamp is None:
                    message = f"cannot read the token file {self.path}: {error}"
                    raise KubeconfigError(message) from None
            return self._token


@dataclass(frozen=True)
class ClusterAccess:
    """One API server and the credentials to use there. ``source`` says where they came from,
    for error messages. PEM texts (``ca_pem``, ``cert_pem``, ``key_pem``) come from the
    ``-data`` fields; the file fields are absolute paths."""

    server: str
    source: str
    ca_file: str | None = None
    ca_pem: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None
    token_file: FileToken | None = None

    def authorization(self) -> str | None:
        """The ``Authorization`` header's value, or None (no token: a certificate or nothing)."""
        token = self.token_file.read() if self.token_file is not None else self.token
        return f"Bearer {token}" if token else None

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS settings: only the cluster's CA when one is given (the system's otherwise),
        no verification when ``insecure``, the client certificate when one is given."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_pem)
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.cert_file or self.cert_pem:
                _load_client_certificate(context, self)
        except (ssl.SSLError, OSError) as error:
            raise KubeconfigError(f"{self.source}: bad TLS material: {error}") from None
        return context


def _load_client_certificate(context: ssl.SSLContext, access: ClusterAccess) -> None:
    """``load_cert_chain`` reads files only: inline PEM goes through private temporary files,
    removed at once."""
    written: list[str] = []
    try:
        cert, key = access.cert_file, access.key_file
        for pem, is_cert in ((access.cert_pem, True), (access.key_pem, False)):
            if pem is None:
                continue
            handle, name = tempfile.mkstemp(prefix="gpufleet-kube-", suffix=".pem")
            written.append(name)
            with os.fdopen(handle, "wb") as out:
                out.write(pem)
            cert, key = (name, key) if is_cert else (cert, name)
        assert cert is not None
        context.load_cert_chain(cert, key)
    finally:
        for name in written:
            with contextlib.suppress(OSError):
                os.unlink(name)


def _named(entries: Any, name: str, kind: str, where: str) -> Mapping[str, Any]:
    """The entry called ``name`` of a kubeconfig list (``clusters``, ``users``, ``contexts``),
    its ``kind`` part (``cluster``, ``user``, ``context``)."""
    for entry in entries or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            body = entry.get(kind) or {}
            if not isinstance(body, Mapping):
                raise KubeconfigError(f"{where}: {kind}s[name={name}].{kind} is not a mapping")
            return body
    raise KubeconfigError(f"{where}: no {kind} named {name!r} in {kind}s")


def _decoded(value: Any, where: str, field: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"{where}: {field} is not base64") from None


def load_kubeconfig(path: str | Path) -> ClusterAccess:
    """The current context of the kubeconfig at ``path``; :class:`KubeconfigError` naming the
    file and the field for anything missing, malformed or unsupported."""
    file = Path(path)
    where = str(file)
    try:
        config = yaml.safe_load(file.read_text())
    except OSError as error:
        raise KubeconfigError(f"cannot read the kubeconfig {where}: {error}") from None
    except yaml.YAMLError as error:
        raise KubeconfigError(f"{where}: not YAML: {error}") from None
    if not isinstance(config, Mapping):
        raise KubeconfigError(f"{where}: not a kubeconfig (a mapping of clusters, users, contexts)")
    current = config.get("current-context")
    if not current:
        raise KubeconfigError(f"{where}: current-context is not set")
    context = _named(config.get("contexts"), str(current), "context", where)
    cluster_name, user_name = context.get("cluster"), context.get("user")
    if not cluster_name:
        raise KubeconfigError(f"{where}: contexts[name={current}].context.cluster is not set")
    cluster = _named(config.get("clusters"), str(cluster_name), "cluster", where)
    user = _named(config.get("users"), str(user_name), "user", where) if user_name else {}
    cluster_at = f"clusters[name={cluster_name}].cluster"
    user_at = f"users[name={user_name}].user"
    base = file.parent

    def local(value: Any) -> str:
        return str(base / Path(str(value)).expanduser())

    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"{where}: {cluster_at}.server is not set")
    if cluster.get("proxy-url"):
        raise KubeconfigError(f"{where}: {cluster_at}.proxy-url: the agent does not use proxies")
    for refused in ("exec", "auth-provider", "username", "password"):
        if user.get(refused):
            raise KubeconfigError(f"{where}: {user_at}.{refused} is not supported: {SUPPORTED}")
    for entries, at, field in (
        (cluster, cluster_at, "certificate-authority"),
        (user, user_at, "client-certificate"),
        (user, user_at, "client-key"),
    ):
        if entries.get(field) and entries.get(f"{field}-data"):
            raise KubeconfigError(f"{where}: {at}: give {field} or {field}-data, not both")
    if bool(user.get("client-certificate") or user.get("client-certificate-data")) != bool(
        user.get("client-key") or user.get("client-key-data")
    ):
        raise KubeconfigError(
            f"{where}: {user_at}: client-certificate(-data) and client-key(-data) go together"
        )

    def pem(field: str, at: str) -> bytes | None:
        value = (cluster if at == cluster_at else user).get(field)
        return _decoded(value, where, f"{at}.{field}") if value else None

    def optional(entries: Mapping[str, Any], field: str) -> str | None:
        value = entries.get(field)
        return str(value) if value else None

    ca_pem = pem("certificate-authority-data", cluster_at)
    token = optional(user, "token")
    token_path = optional(user, "tokenFile")
    token_file = None
    if token_path and not token:  # client-go: a token given inline wins over tokenFile
        try:
            token_file = FileToken(Path(local(token_path)))
        except KubeconfigError as error:
            raise KubeconfigError(f"{where}: {user_at}.tokenFile: {error}") from None
    return ClusterAccess(
        server=str(server).rstrip("/"),
        source=f"kubeconfig {where} (context {current})",
        ca_file=local(cluster["certificate-authority"])
        if cluster.get("certificate-authority")
        else None,
        ca_pem=ca_pem.decode() if ca_pem else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=optional(cluster, "tls-server-name"),
        cert_file=local(user["client-certificate"]) if user.get("client-certificate") else None,
        key_file=local(user["client-key"]) if user.get("client-key") else None,
        cert_pem=pem("client-certificate-data", user_at),
        key_pem=pem("client-key-data", user_at),
        token=token,
        token_file=token_file,
    )


def in_cluster(
    environ: Mapping[str, str] = os.environ, account_dir: Path = SERVICE_ACCOUNT_DIR
) -> ClusterAccess:
    """The API server of the cluster this pod runs in, with its service account."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
            "are not set): give a kubeconfig"
        )
    if ":" in host:  # IPv6
        host = f"[{host}]"
    ca = account_dir / "ca.crt"
    if not ca.is_file():
        raise KubeconfigError(f"in-cluster configuration: no service account CA at {ca}")
    return ClusterAccess(
        server=f"https://{host}:{port}",
        source=f"in-cluster service account ({account_dir})",
        ca_file=str(ca),
        token_file=FileToken(account_dir / "token"),
    )
