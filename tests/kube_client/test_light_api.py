"""LightKubeApi against the fake API server, from the kubeconfig it writes: list and watch with
a field selector (changes, the end of a stream, 410 both ways, a shutdown from another
thread), the Node's get / patch / status patch, Events, the error mapping and the rate limit; and,
against a tiny recording server on loopback, the bearer token it sends (read again when its
file rotates), the server's path prefix, and the one resend on a connection the server closed
meanwhile."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpufleet.agent.kube.node_pods import pods_on
from gpufleet.kube_client.api_types import (
    NODES,
    PODS,
    ApiError,
    NodeAgentCalls,
    RateLimiter,
    Resource,
    WatchExpiredError,
)
from gpufleet.kube_client.light_api import STRATEGIC_MERGE, LightKubeApi
from gpufleet.kube_client.light_config import ClusterAccess, FileToken, KubeconfigError
from gpufleet.testing import kube_objects as ko
from tests.fakes.kube_api import FakeApiServer

NODE = "gpu-1"
DEADLINE_S = 5.0


class CountingLimiter(RateLimiter):
    def __init__(self) -> None:
        super().__init__(10_000, 10_000)
        self.acquired = 0

    def acquire(self) -> None:
        self.acquired += 1
        super().acquire()


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        fake.create(ko.gpu_node(NODE, gpus=4))
        yield fake


@pytest.fixture
def limiter() -> CountingLimiter:
    return CountingLimiter()


@pytest.fixture
def api(server: FakeApiServer, tmp_path: Path, limiter: CountingLimiter) -> Iterator[LightKubeApi]:
    client = LightKubeApi.connect(str(server.write_kubeconfig(tmp_path / "kubeconfig")), limiter)
    yield client
    client.close()


def names(items: list[dict[str, Any]]) -> list[str]:
    return sorted(item["metadata"]["name"] for item in items)


def test_it_is_a_node_agent_client(api: LightKubeApi) -> None:
    calls: NodeAgentCalls = api  # mypy checks the protocol; this checks the object
    assert calls is api


def test_list_with_a_field_selector(server: FakeApiServer, api: LightKubeApi) -> None:
    server.create(ko.gpu_pod("mine", node=NODE))
    server.create(ko.gpu_pod("elsewhere", node="gpu-2"))
    items, version = api.list(pods_on(NODE))
    assert names(items) == ["mine"]
    assert (items[0]["kind"], items[0]["apiVersion"]) == ("Pod", "v1")
    assert version.isdigit()
    everything, _ = api.list(PODS, "0")
    assert names(everything) == ["elsewhere", "mine"]
    nodes, _ = api.list(NODES)
    assert names(nodes) == [NODE]


def test_watch_yields_changes_until_the_server_ends_it(
    server: FakeApiServer, api: LightKubeApi
) -> None:
    _, version = api.list(pods_on(NODE))
    seen: list[tuple[str, str]] = []
    opened, both = threading.Event(), threading.Event()

    def watch() -> None:
        for kind, obj in api.watch(pods_on(NODE), version, 5, lambda _: opened.set()):
            seen.append((kind, obj["metadata"]["name"]))
            assert (obj["kind"], obj["apiVersion"]) == ("Pod", "v1")
            if len(seen) == 2:
                both.set()

    thread = threading.Thread(target=watch)
    thread.start()
    assert opened.wait(DEADLINE_S)
    server.create(ko.gpu_pod("elsewhere", node="gpu-2"))
    server.create(ko.gpu_pod("mine", node=NODE))
    server.delete("v1", "Pod", "mine")
    assert both.wait(DEADLINE_S), f"two changes expected, saw {seen}"
    server.close_watches()
    thread.join(DEADLINE_S)
    assert not thread.is_alive()
    assert seen == [("ADDED", "mine"), ("DELETED", "mine")]


def test_watch_from_compacted_history_is_expired(server: FakeApiServer, api: LightKubeApi) -> None:
    _, version = api.list(PODS)
    server.create(ko.gpu_pod("later", node=NODE))
    server.compact()
    with pytest.raises(WatchExpiredError, match="too old"):
        list(api.watch(PODS, version, 5))


def test_watch_answered_410_is_expired(server: FakeApiServer, api: LightKubeApi) -> None:
    server.fail_next("GET", "^/api/v1/pods$", 410)
    with pytest.raises(WatchExpiredError):
        list(api.watch(PODS, "1", 5))


def test_shutdown_ends_a_blocked_watch(api: LightKubeApi) -> None:
    handles: list[Any] = []
    opened, ended = threading.Event(), threading.Event()

    def on_open(handle: Any) -> None:
        handles.append(handle)
        opened.set()

    def watch() -> None:
        try:
            for _ in api.watch(PODS, "", 60, on_open):
                pass
        except ApiError:
            pass  # a broken stream is how some servers end; either ends the watch
        ended.set()

    threading.Thread(target=watch, daemon=True).start()
    assert opened.wait(DEADLINE_S)
    handles[0].shutdown()
    assert ended.wait(DEADLINE_S), "the watch did not end after shutdown"


def test_node_get_patch_and_status_patch(server: FakeApiServer, api: LightKubeApi) -> None:
    node = api.get_node(NODE)
    assert node["metadata"]["name"] == NODE
    kept = dict(node["metadata"].get("labels") or {})
    patched = api.patch_node(NODE, {"metadata": {"labels": {"gpufleet.dev/x": "1"}}})
    assert patched["metadata"]["labels"] == {**kept, "gpufleet.dev/x": "1"}
    condition = {"type": "GpuDevicesHealthy", "status": "True", "reason": "Ok", "message": ""}
    api.patch_node_status(NODE, {"status": {"conditions": [condition]}})
    api.patch_node_status(NODE, {"status": {"conditions": [{**condition, "status": "False"}]}})
    stored = server.get("v1", "Node", NODE)
    assert stored is not None
    ours = [c for c in stored["status"]["conditions"] if c["type"] == "GpuDevicesHealthy"]
    assert [c["status"] for c in ours] == ["False"]  # merged by type, not appended


def test_event_create_and_patch(server: FakeApiServer, api: LightKubeApi) -> None:
    body = {
        "metadata": {"name": "gpu-1.abc", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": NODE},
        "reason": "GpuUnhealthy",
        "message": "GPU 0 unhealthy",
        "type": "Warning",
        "count": 1,
    }
    created = api.create_event("default", body)
    assert created["metadata"]["name"] == "gpu-1.abc"
    api.patch_event("default", "gpu-1.abc", {"count": 2})
    stored = server.get("v1", "Event", "gpu-1.abc", "default")
    assert stored is not None
    assert (stored["count"], stored["reason"]) == (2, "GpuUnhealthy")


@pytest.mark.parametrize(
    ("status", "reason"),
    [(404, "Not Found"), (409, "Conflict"), (422, "Unprocessable Entity")],
    ids=["not-found", "conflict", "invalid"],
)
def test_error_answers_are_api_errors(
    server: FakeApiServer, api: LightKubeApi, status: int, reason: str
) -> None:
    server.fail_next("PATCH", f"^/api/v1/nodes/{NODE}$", status)
    with pytest.raises(ApiError) as caught:
        api.patch_node(NODE, {"metadata": {"labels": {"a": "b"}}})
    assert (caught.value.status, caught.value.reason) == (status, reason)


def test_real_errors_carry_the_status_message(api: LightKubeApi) -> None:
    with pytest.raises(ApiError) as missing:
        api.get_node("nope")
    assert missing.value.status == 404
    assert "nope" in missing.value.message
    body = {"metadata": {"name": "twice", "namespace": "default"}, "reason": "R"}
    api.create_event("default", body)
    with pytest.raises(ApiError) as twice:
        api.create_event("default", body)
    assert twice.value.status == 409
    with pytest.raises(ApiError, match="404"):
        list(api.watch(Resource("Queue", "gpufleet.dev", "v1alpha1", "queues", False), "1", 5))


def test_an_unreachable_server_is_status_0(server: FakeApiServer, api: LightKubeApi) -> None:
    server.stop()
    with pytest.raises(ApiError) as caught:
        api.get_node(NODE)
    assert (caught.value.status, caught.value.reason) == (0, "Unreachable")
    with pytest.raises(ApiError) as watching:
        list(api.watch(PODS, "1", 5))
    assert watching.value.status == 0


def test_every_call_passes_the_rate_limit(api: LightKubeApi, limiter: CountingLimiter) -> None:
    api.get_node(NODE)
    api.list(PODS)
    api.patch_node(NODE, {"metadata": {"labels": {"a": "b"}}})
    assert limiter.acquired == 3


class RecordingServer:
    """A tiny HTTP/1.1 server on loopback: answers every request with a Node and records what
    it was sent; with ``close_after_answer`` it closes each connection after its answer
    without saying so (as a server whose keep-alive timeout ran out)."""

    def __init__(self, close_after_answer: bool = False, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[dict[str, str | None]] = []
        recorded = self.requests

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_PATCH(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                recorded.append(
                    {
                        "path": self.path,
                        "authorization": self.headers.get("Authorization"),
                        "content-type": self.headers.get("Content-Type"),
                    }
                )
                data = json.dumps({"metadata": {"name": NODE}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = close_after_answer

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        scheme = "https" if isinstance(self.server.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://{host!s}:{port}"

    def __enter__(self) -> RecordingServer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(DEADLINE_S)


def test_the_token_is_sent_and_read_again_when_its_file_rotates(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    with RecordingServer() as server:
        access = ClusterAccess(server.url, "test", token_file=FileToken(token))
        api = LightKubeApi(access)
        api.patch_node(NODE, {})
        token.write_text("second, longer\n")
        api.patch_node(NODE, {})
        token.unlink()  # mid-rotation: the last token stays in use
        api.patch_node(NODE, {})
        api.close()
    assert [r["authorization"] for r in server.requests] == [
        "Bearer first",
        "Bearer second, longer",
        "Bearer second, longer",
    ]
    assert {r["content-type"] for r in server.requests} == {STRATEGIC_MERGE}


def test_a_server_path_prefix_is_kept(tmp_path: Path) -> None:
    with RecordingServer() as server:
        api = LightKubeApi(ClusterAccess(f"{server.url}/k8s/clusters/c-1", "test"))
        api.patch_node("gpu 1", {})
        api.close()
    assert server.requests[0]["path"] == "/k8s/clusters/c-1/api/v1/nodes/gpu%201"
    assert server.requests[0]["authorization"] is None  # no token: no header


def test_a_connection_the_server_closed_meanwhile_is_replaced_once() -> None:
    with RecordingServer(close_after_answer=True) as server:
        api = LightKubeApi(ClusterAccess(server.url, "test"))
        for _ in range(3):
            assert api.patch_node(NODE, {})["metadata"]["name"] == NODE
        api.close()
    assert len(server.requests) == 3  # each sent once to a server that answered


def test_keep_alive_connections_are_reused(server: FakeApiServer, api: LightKubeApi) -> None:
    api.get_node(NODE)
    opened = len(api._open)
    for _ in range(5):
        api.get_node(NODE)
    assert len(api._open) == opened == 1


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for the name ``api.test`` only, and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=api.test",
         "-addext", "subjectAltName=DNS:api.test"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.parametrize(
    ("server_name", "verified"),
    [("api.test", True), (None, False)],
    ids=["tls-server-name", "address-is-not-the-certificates-name"],
)
def test_tls_verifies_the_server_under_its_tls_server_name(
    certificate: tuple[Path, Path], server_name: str | None, verified: bool
) -> None:
    cert, key = certificate
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(cert, key)
    with RecordingServer(tls=serving) as server:
        access = ClusterAccess(
            server.url, "test", ca_file=str(cert), tls_server_name=server_name, token="t"
        )
        api = LightKubeApi(access)
        if verified:
            assert api.patch_node(NODE, {})["metadata"]["name"] == NODE
        else:
            with pytest.raises(ApiError, match="certificate") as caught:
                api.patch_node(NODE, {})
            assert caught.value.status == 0
        api.close()
    assert [r["authorization"] for r in server.requests] == (["Bearer t"] if verified else [])


@pytest.mark.parametrize(
    "address",
    ["ftp://api.test", "api.test:6443"],
    ids=["other-scheme", "no-scheme"],
)
def test_a_server_that_is_not_http_is_refused(address: str) -> None:
    with pytest.raises(KubeconfigError, match="not an http:// or https:// URL"):
        LightKubeApi(ClusterAccess(address, "kubeconfig k (context c)"))
