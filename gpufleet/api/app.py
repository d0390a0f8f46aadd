"""The FastAPI application of ``gpufleet serve``: routes over a control plane
(:class:`~gpufleet.service.protocol.Plane`).

Routes are listed in :mod:`gpufleet.api`. Handlers are plain functions (FastAPI runs them in
its thread pool), since every call takes the control plane's lock; only the event stream is
async. Request bodies are read up to ``max_body`` bytes and refused beyond (413).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import plotly
import yaml
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.responses import FileResponse, PlainTextResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet import __version__
from gpufleet.api import alert_views, attach, cost_views, docs, errors, views
from gpufleet.api.errors import ApiError
from gpufleet.api.front_door import FrontDoor, HostPolicy
from gpufleet.api.metrics import ApiMetrics
from gpufleet.api.schemas import (
    API_PREFIX,
    AlertList,
    AlertStateName,
    Change,
    ChangeKind,
    ClusterSummary,
    CostReport,
    EventView,
    Explanation,
    History,
    LogChunk,
    NodeView,
    PriorityClassView,
    QueueView,
    Role,
    SubmitResult,
    TokenCreated,
    TokenView,
    UngateRequest,
    WhoAmI,
    WorkloadDetail,
    WorkloadSummary,
)
from gpufleet.economics import PriceList
from gpufleet.io.fleet.prices import default_prices
from gpufleet.io.kinds import Skipped
from gpufleet.io.manifests import describe
from gpufleet.io.quantities import parse_long_duration
from gpufleet.service.auth import METRICS, Principal
from gpufleet.service.capabilities import (
    RESUME,
    SUSPEND,
    UNGATE,
    WaitingChanges,
    no_logs,
    no_waiting_changes,
)
from gpufleet.service.plane_book import PRIORITY_CLASS, QUEUE
from gpufleet.service.plane_book import Change as PlaneChange
from gpufleet.service.protocol import Plane
from gpufleet.service.tokens import TokenRefusedError

STATIC = Path(__file__).parent / "static"
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
MAX_BODY = 1 << 20
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")
#: Changes a slow stream reader may fall behind by before it is told to resync.
STREAM_BACKLOG = 2000
HEARTBEAT_S = 15.0
#: How often a quiet stream looks whether its reader left or the server is stopping.
POLL_S = 1.0


def create_app(
    plane: Plane,
    max_body: int = MAX_BODY,
    prices: PriceList | None = None,
    hosts: HostPolicy | None = None,
) -> FastAPI:
    """The API over ``plane`` (which the caller starts and stops); ``prices`` prices its cost
    (None: gpufleet's default price list, read when first needed); ``hosts``: the Host headers
    it answers (:mod:`~gpufleet.api.front_door`; None: any, for apps that no browser reaches,
    such as tests'). Every response carries the security headers."""
    app = FastAPI(
        title="gpufleet",
        version=__version__,
        description="The gpufleet control plane: submit GPU workloads, watch queues and nodes.",
        docs_url=None,  # /docs and /redoc from the app's own assets, not a CDN: api.docs
        redoc_url=None,
    )
    errors.install(app)
    docs.install(app)
    priced: list[PriceList] = [prices] if prices is not None else []

    def price_list() -> PriceList:
        if not priced:
            priced.append(default_prices())
        return priced[0]

    metrics = ApiMetrics(plane, price_list)
    app.state.plane = plane
    app.state.price_list = price_list

    app.add_middleware(_Timing, metrics=metrics)
    attach.install(app, plane)
    app.add_middleware(FrontDoor, hosts=hosts)  # outermost: a refused Host reaches nothing

    # ----------------------------------------------------------------------------- probes
    @app.get("/healthz", response_class=PlainTextResponse, include_in_schema=False)
    def healthz() -> PlainTextResponse:
        if not plane.healthy():
            return PlainTextResponse("scheduling loop stalled\n", status_code=503)
        return PlainTextResponse("ok\n")

    @app.get("/readyz", response_class=PlainTextResponse, include_in_schema=False)
    def readyz() -> PlainTextResponse:
        if not plane.running:
            return PlainTextResponse("not running\n", status_code=503)
        return PlainTextResponse("ok\n")

    @app.get("/metrics", include_in_schema=False)
    def prometheus(_: Scraper) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # ----------------------------------------------------------------------------- dashboard
    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/static/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="text/javascript")

    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")

    # ----------------------------------------------------------------------------- reading
    @app.get(f"{API_PREFIX}/whoami")
    def whoami(caller: Caller) -> WhoAmI:
        with plane.lock:
            queues = caller.allowed_queues(plane.core.quotas.queues)
        return WhoAmI(
            tenant=caller.tenant,
            role=Role(caller.role),
            queues=queues,
            namespaces=[] if caller.is_admin else list(caller.namespaces),
        )

    @app.get(f"{API_PREFIX}/cluster")
    def cluster(_: Caller) -> ClusterSummary:
        return views.cluster(plane)

    @app.get(f"{API_PREFIX}/history")
    def history(_: Caller, since: float | None = None) -> History:
        return views.history(plane, since)

    @app.get(f"{API_PREFIX}/workloads")
    def list_workloads(
        caller: Caller,
        state: str | None = None,
        queue: str | None = None,
        namespace: str | None = None,
    ) -> list[WorkloadSummary]:
        return views.workloads(plane, caller, state, queue, namespace)

    @app.get(f"{API_PREFIX}/workloads/{{namespace}}/{{name}}")
    def get_workload(
        caller: Caller, namespace: str, name: str, kind: KindQuery = None
    ) -> WorkloadDetail:
        with plane.lock:
            key = plane.find(caller, namespace, name, kind).key
        return views.workload_detail(plane, caller, key)

    @app.get(f"{API_PREFIX}/workloads/{{namespace}}/{{name}}/explain")
    def explain(caller: Caller, namespace: str, name: str, kind: KindQuery = None) -> Explanation:
        with plane.lock:
            key = plane.find(caller, namespace, name, kind).key
        return views.explanation(plane, caller, key)

    @app.get(f"{API_PREFIX}/workloads/{{namespace}}/{{name}}/logs")
    def logs(
        caller: Caller,
        namespace: str,
        name: str,
        kind: KindQuery = None,
        pod: str | None = None,
        attempt: Annotated[int | None, Query(ge=1)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        tail: Annotated[int | None, Query(ge=0)] = None,
    ) -> LogChunk:
        """The output of one run of a pod of the workload (its first pod and latest run
        unless told), from byte ``offset``, or its last ``tail`` bytes (``offset`` then
        says where they start): ``serve --local`` keeps every run's log."""
        with plane.lock:
            key = plane.find(caller, namespace, name, kind).key
        logs = plane.logs
        if logs is None:
            plane.visible(caller, key)
            raise no_logs(key, plane.backend_name)
        found = logs.pod_log(caller, key, pod, attempt, offset, tail=tail)
        return LogChunk(
            pod=found.pod,
            attempt=found.attempt,
            attempts=found.attempts,
            offset=found.offset,
            next_offset=found.next_offset,
            text=found.text,
            running=found.running,
            finished=found.finished,
        )

    @app.get(f"{API_PREFIX}/queues")
    def list_queues(_: Caller) -> list[QueueView]:
        return views.queues(plane)

    @app.get(f"{API_PREFIX}/queues/{{name}}")
    def get_queue(_: Caller, name: str) -> QueueView:
        return views.queue(plane, name)

    @app.get(f"{API_PREFIX}/priorityclasses")
    def list_priority_classes(_: Caller) -> list[PriorityClassView]:
        return views.priority_classes(plane)

    @app.get(f"{API_PREFIX}/nodes")
    def list_nodes(caller: Caller) -> list[NodeView]:
        return views.nodes(plane, caller)

    @app.get(f"{API_PREFIX}/nodes/{{name}}")
    def get_node(caller: Caller, name: str) -> NodeView:
        return views.nodes(plane, caller, name)[0]

    @app.get(f"{API_PREFIX}/cost")
    def cost(caller: Caller, by: str = "namespace", window: str = "7d") -> CostReport:
        """Cost per group (namespace, queue, tenant, workload, label:KEY, annotation:KEY, or
        a label key such as team; several joined by commas) over a window such as 7d."""
        return cost_views.cost_view(plane, caller, price_list(), by, window)

    @app.get(f"{API_PREFIX}/alerts")
    def list_alerts(caller: Caller, state: AlertStateName | None = None) -> AlertList:
        """Alerts on the GPUs' series: pending, firing and recently resolved."""
        return alert_views.alert_list(plane, caller, state)

    @app.get(f"{API_PREFIX}/events")
    def list_events(caller: Caller, workload: str | None = None) -> list[EventView]:
        return views.events(plane, caller, workload)

    # ----------------------------------------------------------------------------- writing
    @app.post(f"{API_PREFIX}/workloads", status_code=201)
    async def submit(caller: Caller, request: Request, dry_run: bool = False) -> SubmitResult:
        body = await _read_body(request, max_body)
        content_type = _content_type(request)
        skipped = Skipped()
        paused: list[str] = []
        records = await asyncio.to_thread(
            plane.submit, caller, body, content_type, dry_run, skipped, paused
        )
        explained: dict[str, Any] = {}
        return SubmitResult(
            accepted=[views.workload_summary(r, explained) for r in records],
            skipped=dict(skipped.counts),
            paused=paused,
        )

    @app.delete(f"{API_PREFIX}/workloads/{{namespace}}/{{name}}")
    def cancel(
        caller: Caller, namespace: str, name: str, kind: KindQuery = None
    ) -> WorkloadSummary:
        with plane.lock:
            key = plane.find(caller, namespace, name, kind).key
        record = plane.cancel(caller, key)
        return views.workload_summary(record, {})

    @app.post(f"{API_PREFIX}/workloads/{{namespace}}/{{name}}/ungate")
    def ungate(
        caller: Caller,
        namespace: str,
        name: str,
        kind: KindQuery = None,
        body: UngateRequest | None = None,
    ) -> WorkloadSummary:
        """Remove scheduling gates (``spec.schedulingGates``) from the workload's pods: those
        named, else all; once none is left it joins its queue (409: it has none of them)."""
        with plane.lock:
            key = plane.find(caller, namespace, name, kind).key
        record = _waiting_changes(plane, caller, key, UNGATE).ungate(
            caller, key, body.gates if body is not None else ()
        )
        return views.workload_summary(record, {})

    @app.post(f"{API_PREFIX}/workloads/{{namespace}}/{{name}}/resume")
    def resume(
        caller: Caller, namespace: str, name: str, kind: KindQuery = None
    ) -> WorkloadSummary:
        """Resume a suspended Job (``spec.suspend``): it joins its queue (409: not suspended)."""
        with plane.lock:
            key = plane.find(caller, namespace, name, kind).key
        record = _waiting_changes(plane, caller, key, RESUME).resume(caller, key)
        return views.workload_summary(record, {})

    @app.post(f"{API_PREFIX}/workloads/{{namespace}}/{{name}}/suspend")
    def suspend(
        caller: Caller, namespace: str, name: str, kind: KindQuery = None
    ) -> WorkloadSummary:
        """Suspend a waiting Job: it leaves its queue until resumed (409: not a Job, suspended
        already, or started)."""
        with plane.lock:
            key = plane.find(caller, namespace, name, kind).key
        record = _waiting_changes(plane, caller, key, SUSPEND).suspend(caller, key)
        return views.workload_summary(record, {})

    @app.put(f"{API_PREFIX}/queues")
    async def put_queue(caller: Caller, request: Request) -> QueueView:
        document = await _one_document(request, max_body)
        name = await asyncio.to_thread(plane.put_object, caller, QUEUE, document)
        return views.queue(plane, name)

    @app.delete(f"{API_PREFIX}/queues/{{name}}", status_code=204)
    def delete_queue(caller: Caller, name: str) -> Response:
        plane.delete_object(caller, QUEUE, name)
        return Response(status_code=204)

    @app.put(f"{API_PREFIX}/priorityclasses")
    async def put_priority_class(caller: Caller, request: Request) -> PriorityClassView:
        document = await _one_document(request, max_body)
        name = await asyncio.to_thread(plane.put_object, caller, PRIORITY_CLASS, document)
        return next(c for c in views.priority_classes(plane) if c.name == name)

    @app.post(f"{API_PREFIX}/tokens", status_code=201)
    def create_token(
        caller: Caller,
        tenant: str,
        role: Role = Role.TENANT,
        queue: Annotated[list[str] | None, Query()] = None,
        name: str = "",
        expires_in: Annotated[
            str, Query(description="how long it lasts: 30d, 12h, 90m... or never")
        ] = "90d",
    ) -> TokenCreated:
        token, stored = plane.create_token(
            caller, tenant, role.value, queue or [], name, _lifetime(expires_in)
        )
        return TokenCreated(
            token=token, id=stored.id, tenant=tenant, role=role, name=name, expires=stored.expires
        )

    @app.get(f"{API_PREFIX}/tokens")
    def list_tokens(caller: Caller) -> list[TokenView]:
        """Every token (never a token itself: its id, tenant, times)."""
        return [views.token_view(t) for t in plane.list_tokens(caller)]

    @app.delete(f"{API_PREFIX}/tokens/{{token_id}}")
    def revoke_token(caller: Caller, token_id: str) -> TokenView:
        """Revoke a token: refused from the next request on."""
        return views.token_view(plane.revoke_token(caller, token_id))

    # ----------------------------------------------------------------------------- stream
    @app.get(f"{API_PREFIX}/stream")
    async def stream(caller: StreamCaller, request: Request) -> StreamingResponse:
        """Server-sent events of every change the caller may see; the one route that takes
        ``?token=`` (the dashboard's EventSource cannot send headers)."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Sequence[PlaneChange] | None] = asyncio.Queue(STREAM_BACKLOG)

        def deliver(changes: Sequence[PlaneChange]) -> None:
            def put() -> None:
                try:
                    inbox.put_nowait(changes)
                except asyncio.QueueFull:  # too far behind: drop, and tell it to resync
                    while not inbox.empty():
                        inbox.get_nowait()
                    inbox.put_nowait(None)

            loop.call_soon_threadsafe(put)

        unsubscribe = plane.subscribe(deliver)
        visible_change = _visibility(plane, caller)

        async def messages() -> AsyncIterator[str]:
            seq = 0
            try:
                yield _sse(_change(seq, ChangeKind.CLUSTER, None, plane, {"hello": True}))
                quiet = 0.0
                while not plane.stopping and not await request.is_disconnected():
                    try:
                        batch = await asyncio.wait_for(inbox.get(), POLL_S)
                    except TimeoutError:
                        quiet += POLL_S
                        if quiet >= HEARTBEAT_S:
                            quiet = 0.0
                            yield ": keep-alive\n\n"
                        continue
                    quiet = 0.0
                    if batch is None:
                        seq += 1
                        yield _sse(_change(seq, ChangeKind.CLUSTER, None, plane, {"resync": True}))
                        continue
                    for change in batch:
                        if not visible_change(change):
                            continue
                        seq += 1
                        yield _sse(
                            Change(
                                seq=seq,
                                kind=change.kind,
                                key=change.key,
                                time=change.time,
                                data=change.data,
                            )
                        )
            finally:
                unsubscribe()

        return StreamingResponse(
            messages(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return app


class _Timing:
    """Request latency per route into the metrics: plain ASGI, as this wraps every request
    (Starlette's BaseHTTPMiddleware costs a task and a stream per request)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.observe_request(
                scope["method"],
                getattr(scope.get("route"), "path", None),
                status[0],
                time.perf_counter() - started,
            )


#: What is not a write (writes count against the tenant's rate).
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return (credentials.strip() if scheme.lower() == "bearer" else None) or None


async def _principal(request: Request) -> Principal:
    """The caller, from ``Authorization: Bearer`` (401 without a valid one; 429 for a write
    over its tenant's rate). A ``?token=`` is refused: a token in an address ends up in logs,
    histories and Referer headers."""
    found = _bearer(request)
    if found is None:
        if "token" in request.query_params:
            raise ApiError(
                401,
                f"?token= is accepted only by {API_PREFIX}/stream (where EventSource cannot "
                "send headers): send Authorization: Bearer <token>",
            )
        raise ApiError(401, "authentication required: send Authorization: Bearer <token>")
    return _authenticate(request, found)


async def _stream_principal(
    request: Request, token: Annotated[str | None, Query()] = None
) -> Principal:
    """The caller of the event stream: from ``Authorization: Bearer`` or ``?token=``."""
    found = _bearer(request) or token
    if not found:
        raise ApiError(401, "authentication required: send Authorization: Bearer <token>")
    return _authenticate(request, found)


async def _scraper(request: Request) -> Principal:
    """The caller of ``/metrics``: an admin or a metrics token (403 for a tenant's: the page
    names every tenant's pods), from ``Authorization: Bearer`` (Prometheus' ``authorization``
    in its scrape config)."""
    found = _bearer(request)
    if found is None:
        raise ApiError(
            401,
            "authentication required: /metrics names every tenant's workloads; send "
            "Authorization: Bearer <token> of an admin or of a metrics token (`gpufleet admin "
            "create-token --role metrics`)",
        )
    who = _authenticate(request, found, scraping=True)
    if not who.may_scrape:
        raise ApiError(
            403,
            "/metrics names every tenant's workloads: it is served to an admin or a metrics "
            "token (`gpufleet admin create-token --role metrics`), not to a tenant's",
        )
    return who


def _authenticate(request: Request, found: str, scraping: bool = False) -> Principal:
    plane: Plane = request.app.state.plane
    try:
        who = plane.authenticate(found)
    except TokenRefusedError as error:
        raise ApiError(401, str(error)) from None
    if who.role == METRICS and not scraping:
        raise ApiError(403, "a metrics token reads /metrics only")
    if request.method not in READ_METHODS:
        plane.throttle(who)
    return who


def _lifetime(expires_in: str) -> float | None:
    """Seconds from ``expires_in`` (``30d``, ``12h``); None for ``never``."""
    if expires_in.strip().lower() == "never":
        return None
    try:
        return parse_long_duration(expires_in)
    except ValueError as error:
        raise ApiError(422, str(error), "expires_in") from None


Caller = Annotated[Principal, Depends(_principal)]
StreamCaller = Annotated[Principal, Depends(_stream_principal)]
Scraper = Annotated[Principal, Depends(_scraper)]
#: Which kind's workload a name means, where kinds share it (names are unique per kind and
#: namespace, as in Kubernetes): Job, PyTorchJob... (any case).
KindQuery = Annotated[
    str | None,
    Query(description="the workload's kind, where several kinds use its name (any case)"),
]


def _visibility(plane: Plane, caller: Principal) -> Callable[[PlaneChange], bool]:
    """Whether the caller may see a change of the stream: a tenant sees changes about its
    own workloads only, alerts as ``GET /alerts`` shows them (an alert on a pod gpufleet does
    not own, only to its namespace's tenant), and other news (nodes, queues) as everyone."""

    def tenant_of(key: str | None) -> str | None:
        record = plane.records.get(key) if key is not None else None
        return record.tenant if record is not None else None

    def visible(change: PlaneChange) -> bool:
        if caller.is_admin or change.kind not in PRIVATE_CHANGES:
            return True
        if change.kind is ChangeKind.ALERT:
            labels = change.data.get("labels")
            found = labels if isinstance(labels, dict) else {}
            return alert_views.may_see_alert(caller, found, tenant_of(change.key))
        if change.key is None:  # news of the cluster: a node, a budget
            return True
        owner = tenant_of(change.key)
        return owner is not None and caller.may_see(owner)

    return visible


#: Changes about one workload: a tenant sees only its own.
PRIVATE_CHANGES = (ChangeKind.WORKLOAD, ChangeKind.EVENT, ChangeKind.ALERT)


def _change(
    seq: int, kind: ChangeKind, key: str | None, plane: Plane, data: dict[str, object]
) -> Change:
    return Change(seq=seq, kind=kind, key=key, time=plane.now(), data=data)


def _sse(change: Change) -> str:
    return f"id: {change.seq}\nevent: {change.kind.value}\ndata: {change.model_dump_json()}\n\n"


def _content_type(request: Request) -> str:
    content_type = request.headers.get("content-type", "application/yaml").split(";")[0].strip()
    content_type = content_type.lower()
    if "json" in content_type or content_type in YAML_TYPES:
        return content_type
    raise ApiError(
        415,
        f"unsupported Content-Type {content_type!r}: send application/json or application/yaml",
    )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes is over the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _one_document(request: Request, limit: int) -> dict[str, Any]:
    body = await _read_body(request, limit)
    content_type = _content_type(request)
    try:
        text = body.decode("utf-8")
        document = json.loads(text) if "json" in content_type else yaml.safe_load(text)
    except (UnicodeDecodeError, ValueError, RecursionError, yaml.YAMLError) as error:
        # ValueError: JSON errors, and what YAML scalars Python refuses (a date 2024-13-01)
        raise ApiError(400, f"cannot read the body: {error}") from None
    if not isinstance(document, dict):
        raise ApiError(
            422, f"expected one object (a mapping) in the body, got {describe(document)}"
        )
    return document


def _waiting_changes(plane: Plane, caller: Principal, key: str, change: str) -> WaitingChanges:
    """The plane's owner's changes; where its world has none, a 409 saying who makes
    ``change`` there (a 404 for a workload the caller may not see)."""
    changes = plane.waiting_changes
    if changes is None:
        plane.visible(caller, key)
        raise no_waiting_changes(key, plane.backend_name, change)
    return changes
