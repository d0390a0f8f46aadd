"""A throwaway certificate authority and a server certificate it signed, for tests of
``serve --tls-cert/--tls-key`` and of clients trusting a private CA; made with the ``openssl``
command (None where it is missing)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The names the server certificate is valid for: what the tests connect to.
SERVER_NAMES = "subjectAltName=IP:127.0.0.1,DNS:localhost"


@dataclass(frozen=True, slots=True)
class CertificateFiles:
    """PEM files: the CA's certificate, and the server's certificate and key it signed."""

    ca: Path
    cert: Path
    key: Path


def make_certificates(folder: Path) -> CertificateFiles | None:
    """A CA and a server certificate for 127.0.0.1 and localhost, valid for a day, under
    ``folder``; None without ``openssl``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca = folder / "ca.key", folder / "ca.pem"
    key, request, cert = folder / "server.key", folder / "server.csr", folder / "server.pem"
    extensions = folder / "server.ext"
    extensions.write_text(f"{SERVER_NAMES}\nbasicConstraints=critical,CA:FALSE\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        [openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "1",
         "-subj", "/CN=gpufleet test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        [openssl, "req", *ec, "-keyout", key, "-out", request, "-subj", "/CN=localhost"],
        [openssl, "x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key,
         "-CAcreateserial", "-out", cert, "-days", "1", "-extfile", extensions],
    ]  # fmt: skip
    for step in steps:
        subprocess.run([str(part) for part in step], check=True, capture_output=True)
    return CertificateFiles(ca=ca, cert=cert, key=key)
