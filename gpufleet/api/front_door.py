"""What every request and response of ``gpufleet serve`` passes first: the Host check and the
security headers (issue 26 item 12).

**Host check** (against DNS rebinding: a page on ``evil.example`` whose name is made to resolve
to the server's address would otherwise read the API from the victim's browser, Host
``evil.example``). A request is answered 400 unless its Host is an allowed name (by default
``localhost``, this machine's hostname and fully qualified name, and the address the server is
bound to if it is a name; ``serve --allowed-host`` adds more, ``*.example.com`` for a domain's
names, ``*`` turns the check off) or an IP address: rebinding needs a name, so an address is
harmless, and it is what Kubernetes' probes and clients of a bare address send. A request
without a Host (HTTP/1.0) passes: browsers always send one.

**Headers** on every response: :data:`CSP` (everything from this server only, no inline
script, no framing), ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY`` and
``Referrer-Policy: no-referrer``. The dashboard needs ``'unsafe-inline'`` only for styles
(plotly.js writes its own ``<style>`` and ``style`` attributes; the page's gauges use
``style="--fill: ..."``). The API docs pages (:data:`DOCS_PATHS`) get :data:`DOCS_CSP`, which
names what FastAPI's Swagger UI and ReDoc pages need today (their bundles from
cdn.jsdelivr.net, an inline script, Google's fonts, FastAPI's favicon): once they are served
from this server (issue 26 item 14), :data:`DOCS_CSP` drops every ``https:`` source.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.errors import error_response

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: The pages of FastAPI's API docs, and what they load (see the module docstring).
DOCS_PATHS = frozenset(("/docs", "/docs/oauth2-redirect", "/redoc"))
DOCS_CDN = "https://cdn.jsdelivr.net"
DOCS_CSP = (
    f"default-src 'self'; script-src 'self' 'unsafe-inline' {DOCS_CDN}; "
    f"style-src 'self' 'unsafe-inline' {DOCS_CDN} https://fonts.googleapis.com; "
    "img-src 'self' data: https://fastapi.tiangolo.com https://cdn.redoc.ly; "
    "font-src 'self' https://fonts.gstatic.com; worker-src 'self' blob:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
COMMON_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
ANY_HOST = "*"
HOST_REFUSED = "this server does not answer to the Host in the request (serve --allowed-host)"


@dataclasses.dataclass(frozen=True, slots=True)
class HostPolicy:
    """Which Host headers reach the app (see the module docstring): ``names`` exactly (any
    case), names under each of ``domains`` (``example.com`` for ``*.example.com``), and IP
    addresses; everything with ``any_host``."""

    names: frozenset[str] = frozenset()
    domains: frozenset[str] = frozenset()
    any_host: bool = False

    @classmethod
    def of(cls, allowed: Iterable[str]) -> HostPolicy:
        """From names as ``--allowed-host`` takes them: ``name``, ``*.domain`` or ``*``."""
        names, domains = set(), set()
        any_host = False
        for entry in (e.strip().lower().rstrip(".") for e in allowed):
            if entry == ANY_HOST:
                any_host = True
            elif entry.startswith("*."):
                domains.add(entry[2:])
            elif entry:
                names.add(entry)
        return cls(frozenset(names), frozenset(domains), any_host)

    @classmethod
    def serving(cls, bind: str, allowed: Iterable[str] = ()) -> HostPolicy:
        """The default for a server bound to ``bind`` (localhost names, this machine's names,
        ``bind`` itself), and ``allowed``."""
        machine = (socket.gethostname(), socket.getfqdn())
        return cls.of([*LOCAL_NAMES, *machine, bind, *allowed])

    def allows(self, host: str) -> bool:
        """Whether a request with this Host header (``name``, ``name:port``, ``[v6]:port``)
        may reach the app."""
        if self.any_host:
            return True
        name = _host_name(host)
        if name is None:
            return False
        if _is_address(name):
            return True
        if name in self.names:
            return True
        return any(name.endswith(f".{domain}") for domain in self.domains)


def _host_name(host: str) -> str | None:
    """The name or address of a Host header, without its port (None: not a Host at all)."""
    host = host.strip().lower()
    if host.startswith("["):
        address, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return address
    name, colon, port = host.partition(":")
    if colon and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class FrontDoor:
    """The Host check and the security headers, as plain ASGI (it wraps every request)."""

    def __init__(self, app: ASGIApp, hosts: HostPolicy | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = (DOCS_CSP if scope["path"] in DOCS_PATHS else CSP).encode()

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"content-security-policy", csp),
                    *COMMON_HEADERS,
                ]
            await send(message)

        if self.hosts is not None:
            host = _header(scope, b"host")
            if host is not None and not self.hosts.allows(host):
                refusal = error_response(400, HOST_REFUSED, field="Host")
                await refusal(scope, receive, with_headers)
                return
        await self.app(scope, receive, with_headers)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None
