"""``gpufleet serve``: the control plane (scheduler loop, HTTP API, dashboard). Its tokens are
made with ``gpufleet admin`` (:mod:`gpufleet.cli.admin`)."""

from __future__ import annotations

import dataclasses
import logging
import socket
import ssl
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from rich.markup import escape

from gpufleet.api.app import create_app
from gpufleet.api.front_door import HostPolicy
from gpufleet.api.http_server import (
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_CONNECTIONS,
    HttpLimits,
    TlsFiles,
    raise_open_file_limit,
    server_config,
)
from gpufleet.cli.admin import DEFAULT_DB
from gpufleet.cli.inputs import (
    console,
    fail,
    friendly_errors,
    listen_socket,
    note_paused,
    warn,
    warn_skipped,
)
from gpufleet.cli.serve_limits import (
    LimitAdminsOption,
    MaxActivePodsOption,
    MaxActiveWorkloadsOption,
    WriteBurstOption,
    WriteRateOption,
    tenant_limits,
)
from gpufleet.cli.serve_observing import (
    AlertConfigOption,
    AlertRulesOption,
    AlertWebhookOption,
    BuiltinAlertsOption,
    IdleDryRunOption,
    IdlePoliciesOption,
    ObserveSettings,
    PricesOption,
    PrometheusUrlOption,
    ReplicaAutoscalingOption,
    join_idle_policies,
    observe_settings,
    replica_autoscaling_on,
    start_notifier,
)
from gpufleet.cli.serve_worlds import (
    LocalSettings,
    bundled,
    kube_api,
    kube_plane,
    local_plane,
    local_summary,
    opened_store,
    planning_store,
    set_aside_message,
    with_scenario_telemetry,
)
from gpufleet.control.profiles import load_profile
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.faults import check_faults
from gpufleet.io.fleet.node_faults import check_node_faults
from gpufleet.io.fleet.sim_telemetry import TelemetrySettings, parse_usage_profile, profile_choices
from gpufleet.io.kinds import Skipped
from gpufleet.io.kube.binding_signature import BindingKey, BindingKeyError, read_binding_key
from gpufleet.io.manifests import load_manifests
from gpufleet.io.readers import read_cluster
from gpufleet.model import Node
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.scheduling.policies import POLICY_NAMES
from gpufleet.scheduling.profile import DEFAULT_PROFILE
from gpufleet.service.auth import AdmissionRules, rules_from_object
from gpufleet.service.embedded_plane import EmbeddedControlPlane
from gpufleet.service.idle_actions import ReclaimingPlane, reclaimer_for
from gpufleet.service.limits import (
    DEFAULT_MAX_ACTIVE_PODS,
    DEFAULT_MAX_ACTIVE_WORKLOADS,
    DEFAULT_WRITE_BURST,
    DEFAULT_WRITE_RATE,
    TenantLimits,
)
from gpufleet.service.live_observing import store_shape
from gpufleet.service.observatory import STEP_S
from gpufleet.service.plane_book import ServeOptions
from gpufleet.service.protocol import Plane
from gpufleet.service.seeding import plan_seed, write_seed
from gpufleet.service.tenant_identity import DEFAULT_GROUPS, DEFAULT_USER, TenantIdentity


@dataclasses.dataclass(frozen=True, slots=True)
class HttpSettings:
    """How ``serve`` answers HTTP: its limits per client, the Host names it answers, TLS."""

    limits: HttpLimits = dataclasses.field(default_factory=HttpLimits)
    allowed_hosts: tuple[str, ...] = ()
    tls: TlsFiles | None = None

    @property
    def scheme(self) -> str:
        return "http" if self.tls is None else "https"


@friendly_errors
def serve(
    cluster: Annotated[
        Path | None,
        typer.Option(
            help="cluster spec, Node YAML or trace node CSV (default: a bundled "
            "example of 18 nodes: H100 with MIG, A100, T4, CPU-only)"
        ),
    ] = None,
    scenario: Annotated[
        list[Path] | None,
        typer.Option(
            help="Queue, PriorityClass and workload files to load at start "
            "(default on a new database: the bundled queues and priority classes)"
        ),
    ] = None,
    db: Annotated[Path, typer.Option(help="SQLite database (created if missing)")] = DEFAULT_DB,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
    speed: Annotated[
        float, typer.Option(help="simulated seconds per wall second (60: a minute a second)")
    ] = 60.0,
    policy: Annotated[str, typer.Option(help=f"placement policy: {', '.join(POLICY_NAMES)}")] = (
        "default"
    ),
    rules: Annotated[
        Path | None, typer.Option(help="AdmissionPolicy YAML (limits, tolerations, tenants)")
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(help="scheduling profile YAML: which plugin at each extension point"),
    ] = None,
    default_runtime: Annotated[
        float,
        typer.Option(
            help="simulated seconds a workload runs if it declares no "
            "gpufleet.dev/expected-runtime (Deployments run until deleted)"
        ),
    ] = 3600.0,
    min_runtime: Annotated[
        float, typer.Option(help="seconds a workload runs before it may be preempted")
    ] = AdmissionConfig().min_runtime,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="run on a Kubernetes cluster instead: this process is its gpufleet scheduler "
            "(do not also run `gpufleet scheduler` with the same --scheduler-name)"
        ),
    ] = None,
    scheduler_name: Annotated[
        str, typer.Option(help="with --kubeconfig: schedule the pods whose schedulerName is this")
    ] = "gpufleet",
    impersonate_user: Annotated[
        str,
        typer.Option(
            help="with --kubeconfig: the user each tenant's objects are written as, impersonated "
            "({tenant} is its name), so that the cluster's RBAC and Pod Security judge them"
        ),
    ] = DEFAULT_USER,
    impersonate_group: Annotated[
        list[str] | None,
        typer.Option(
            help="with --kubeconfig: a group of that user ({tenant} is its name; repeatable; "
            f"default: {' and '.join(DEFAULT_GROUPS)})"
        ),
    ] = None,
    no_impersonation: Annotated[
        bool,
        typer.Option(
            "--no-impersonation",
            help="with --kubeconfig, UNSAFE with more than one tenant: write tenants' objects "
            "with this server's own credentials (any tenant may then create whatever those "
            "allow, privileged pods included)",
        ),
    ] = False,
    binding_key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="GPUFLEET_BINDING_KEY_FILE",
            help="with --kubeconfig: sign each binding's device annotations with this key "
            "(the gpufleet-binding-key Secret the node agents verify them with)",
            dir_okay=False,
        ),
    ] = None,
    insecure_unsigned_bindings: Annotated[
        bool,
        typer.Option(
            help="with --kubeconfig, INSECURE, for tests and demos only: bind without "
            "--binding-key-file"
        ),
    ] = False,
    usage_profile: Annotated[
        str | None,
        typer.Option(
            help=f"usage profile of simulated pods that name none ({profile_choices()}; "
            "default: the scenario's SimulatedTelemetry, else by the pod's GPU request)"
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="seed of the scheduler's tie-breaking and of the simulated GPUs' usage "
            "(default 0; the usage's: the scenario's SimulatedTelemetry, else 0)"
        ),
    ] = None,
    alert_rules: AlertRulesOption = None,
    builtin_alerts: BuiltinAlertsOption = True,
    prometheus_url: PrometheusUrlOption = None,
    prices: PricesOption = None,
    alert_config: AlertConfigOption = None,
    alert_webhook: AlertWebhookOption = None,
    idle_policies: IdlePoliciesOption = None,
    idle_dry_run: IdleDryRunOption = False,
    replica_autoscaling: ReplicaAutoscalingOption = None,
    local: Annotated[
        bool,
        typer.Option(
            "--local",
            help="run on this machine's GPUs instead: workloads run as local processes, each "
            "with exactly its GPUs visible (see README: One box)",
        ),
    ] = False,
    fake_gpus: Annotated[
        Path | None,
        typer.Option(
            help="with --local: read the GPUs from this fake NVML YAML instead of the driver "
            "(demos, tests; e.g. examples/agent/fake-gpus.yaml)"
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="with --local: where runs (specs, logs, exit records) and the tenants' working "
            "directories live (default: DB's name with .local, beside it)"
        ),
    ] = None,
    run_as: Annotated[
        list[str] | None,
        typer.Option(
            help="with --local: TENANT=USER, the local user a tenant's processes run as "
            "(needed for each tenant when the server runs as root; repeatable)"
        ),
    ] = None,
    grace: Annotated[
        float,
        typer.Option(help="with --local: seconds from SIGTERM to SIGKILL when a run is stopped"),
    ] = 30.0,
    mps: Annotated[
        bool,
        typer.Option(help="with --local: GPU shares run under MPS, limited to their share"),
    ] = False,
    allow_root: Annotated[
        bool,
        typer.Option(
            help="with --local, as root: tenants without --run-as run as root (a box whose "
            "only user is root, such as a container)"
        ),
    ] = False,
    shared_proc: Annotated[
        bool,
        typer.Option(
            help="with --local, as root with --run-as: let each tenant's processes see the "
            "other tenants' in /proc (by default each run sees only its own user's; use this "
            "where the kernel refuses that, e.g. an unprivileged container)"
        ),
    ] = False,
    observe_every: Annotated[
        float | None,
        typer.Option(
            help="with --local: seconds of the wall clock between the rounds that read the "
            f"GPUs' samples and evaluate the alert rules (default {STEP_S:g}; a whole number "
            "of seconds dividing 600; the series keep one point per round)"
        ),
    ] = None,
    max_active_workloads: MaxActiveWorkloadsOption = DEFAULT_MAX_ACTIVE_WORKLOADS,
    max_active_pods: MaxActivePodsOption = DEFAULT_MAX_ACTIVE_PODS,
    write_rate: WriteRateOption = DEFAULT_WRITE_RATE,
    write_burst: WriteBurstOption = DEFAULT_WRITE_BURST,
    limit_admins: LimitAdminsOption = False,
    header_timeout: Annotated[
        float,
        typer.Option(
            help="seconds a client has to send a request's line and headers; then it gets 408 "
            "and its connection is closed (slow clients holding connections open)"
        ),
    ] = DEFAULT_HEADER_TIMEOUT,
    keep_alive: Annotated[
        int, typer.Option(help="seconds an idle kept-alive connection stays open")
    ] = DEFAULT_KEEP_ALIVE,
    max_connections: Annotated[
        int,
        typer.Option(
            help="open connections (and requests in progress) beyond which requests get 503"
        ),
    ] = DEFAULT_MAX_CONNECTIONS,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="a name clients reach the server by, beyond localhost, this machine's names "
            "and --host (repeatable; *.example.com for a domain, * for any): other Host "
            "headers get 400 (DNS rebinding); IP addresses are always answered"
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(help="serve HTTPS with this PEM certificate (chain)"),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(
            help="with --tls-cert: its PEM private key (default: in the certificate file)"
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
) -> None:
    """Start the control plane: the scheduler on the embedded simulated cluster (or, with
    --local, this machine's GPUs), the HTTP API (/api/v1, /docs), Prometheus /metrics (for an
    admin or a --role metrics token),
    /healthz, /readyz and the dashboard at /."""
    if policy not in POLICY_NAMES:
        raise fail(f"unknown policy {policy!r} (expected one of {', '.join(POLICY_NAMES)})")
    if not speed > 0:
        raise fail(f"--speed must be above 0, got {speed}")
    try:
        profile_default = None if usage_profile is None else parse_usage_profile(usage_profile)
    except ValueError as error:
        raise fail(f"--usage-profile: {error}") from None
    telemetry = TelemetrySettings(profile_default, seed, "the command line")
    limits = tenant_limits(
        max_active_workloads, max_active_pods, write_rate, write_burst, limit_admins
    )
    try:
        observe = observe_settings(
            alert_rules,
            builtin_alerts,
            prometheus_url,
            prices,
            alert_config,
            alert_webhook,
            idle_policies,
            idle_dry_run,
        )
    except InputError as error:
        raise fail(escape(str(error))) from None
    local_settings = None
    if local:
        if kubeconfig is not None or cluster is not None:
            raise fail("--local runs on this machine: it takes neither --kubeconfig nor --cluster")
        if replica_autoscaling:
            raise fail(
                "--replica-autoscaling is not for --local: it scales Deployments through their "
                "replica controllers, and the local machine has none (a replica that ends is "
                "not started again)"
            )
        if grace < 0:
            raise fail(f"--grace must be 0 or more seconds, got {grace:g}")
        if observe_every is not None and not observe_every > 0:
            raise fail(f"--observe-every must be above 0 seconds, got {observe_every:g}")
        if observe_every is not None:
            try:  # the series keep a point per round: a step the store's rings can hold
                store_shape(observe_every)
            except ValueError as error:
                raise fail(f"--observe-every: {error}") from error
        local_settings = LocalSettings(
            fake_gpus,
            state_dir or db.with_name(db.name + ".local"),
            run_as or [],
            grace,
            mps,
            allow_root,
            shared_proc,
            STEP_S if observe_every is None else observe_every,
        )
    elif fake_gpus or state_dir or run_as or mps or allow_root or shared_proc:
        raise fail(
            "--fake-gpus, --state-dir, --run-as, --mps, --allow-root and --shared-proc are "
            "for --local"
        )
    elif observe_every is not None:
        raise fail(
            "--observe-every is for --local (the simulated cluster observes every 15 s of its "
            "clock; with --kubeconfig, every 15 s of Prometheus' series)"
        )
    if observe.prometheus_url is not None and kubeconfig is None:
        raise fail("--prometheus-url is for --kubeconfig: the simulated cluster observes itself")
    if observe.idle_policies and kubeconfig is not None and observe.prometheus_url is None:
        raise fail("--idle-policies with --kubeconfig needs --prometheus-url (the GPUs' series)")
    scaling = replica_autoscaling_on(replica_autoscaling, kubeconfig, observe.prometheus_url)
    tenant_identity = _tenant_identity(
        kubeconfig, impersonate_user, impersonate_group, no_impersonation
    )
    observe = dataclasses.replace(observe, replica_autoscaling=scaling)
    http = _http_settings(
        HttpLimits(header_timeout, keep_alive, max_connections), allowed_host, tls_cert, tls_key
    )
    # The port first: a busy one is told before anything is loaded, stored or said to serve.
    sock = listen_socket(host, port)
    binding_key = None
    if kubeconfig is not None:
        if cluster is not None or scenario or telemetry.default_profile is not None:
            sock.close()
            raise fail(
                "--cluster, --scenario and --usage-profile are for the simulated cluster, "
                "not --kubeconfig"
            )
        try:
            binding_key = read_binding_key(binding_key_file, insecure_unsigned_bindings)
        except BindingKeyError as error:
            sock.close()
            raise fail(escape(str(error))) from None
    try:
        _serve_on(sock, host, cluster, scenario, db, speed, policy, rules, profile,
                  default_runtime, min_runtime, kubeconfig, scheduler_name, telemetry,
                  observe, log_level, tenant_identity, local_settings, binding_key,
                  limits, http)  # fmt: skip
    finally:
        sock.close()


def _tenant_identity(
    kubeconfig: Path | None, user: str, groups: list[str] | None, off: bool
) -> TenantIdentity | None:
    """Who tenants' objects are written as on Kubernetes (None: ``--no-impersonation``)."""
    told = user != DEFAULT_USER or groups is not None
    if kubeconfig is None:
        if off or told:
            raise fail("--impersonate-user, --impersonate-group and --no-impersonation are for "
                       "--kubeconfig")  # fmt: skip
        return TenantIdentity()
    if off:
        if told:
            raise fail("--no-impersonation writes as this server: it takes no "
                       "--impersonate-user or --impersonate-group")  # fmt: skip
        warn("--no-impersonation: every tenant's objects are written with this server's own "
             "credentials; use it only where there is a single tenant")  # fmt: skip
        return None
    try:
        return TenantIdentity(user, DEFAULT_GROUPS if groups is None else tuple(groups))
    except ValueError as error:
        raise fail(f"--impersonate-user/--impersonate-group: {escape(str(error))}") from None


def _serve_on(
    sock: socket.socket,
    host: str,
    cluster: Path | None,
    scenario: list[Path] | None,
    db: Path,
    speed: float,
    policy: str,
    rules: Path | None,
    profile: Path | None,
    default_runtime: float,
    min_runtime: float,
    kubeconfig: Path | None,
    scheduler_name: str,
    telemetry: TelemetrySettings,
    observe: ObserveSettings,
    log_level: str,
    tenant_identity: TenantIdentity | None,
    local: LocalSettings | None = None,
    binding_key: BindingKey | None = None,
    limits: TenantLimits | None = None,
    http: HttpSettings | None = None,
) -> None:
    http = http or HttpSettings()
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    admission_rules = AdmissionRules()
    if rules is not None:
        documents = load_manifests(rules)
        if len(documents) != 1:
            raise fail(f"{rules}: expected one AdmissionPolicy document, got {len(documents)}")
        admission_rules = rules_from_object(documents[0], str(rules))
    scheduling_profile = DEFAULT_PROFILE if profile is None else load_profile(profile, policy)
    # Everything is checked against the database, or an empty one in memory where there is
    # none yet: a start refused for any reason creates no file.
    store = planning_store(db)
    fresh = store.meta("seeded") is None
    plane: Plane
    reclaiming: ReclaimingPlane
    idle = list(observe.idle_policies)
    options = ServeOptions(
        policy=policy,
        seed=telemetry.seed or 0,
        speed=speed,
        default_runtime=default_runtime,
        admission=AdmissionConfig(min_runtime=min_runtime),
        profile=scheduling_profile,
        rules=admission_rules,
        usage_profile=telemetry.default_profile,
        alert_rules=observe.alert_rules,
        tenant_identity=tenant_identity,
        limits=limits or TenantLimits(),
    )
    if kubeconfig is not None:
        try:
            api = kube_api(kubeconfig)
        except BaseException:
            store.close()
            raise
        store = opened_store(store, db)
        plane = reclaiming = kube_plane(
            api,
            store,
            options,
            scheduler_name,
            observe.prometheus_url,
            observe.replica_autoscaling,
            binding_key,
        )
        where = f"Kubernetes ({kubeconfig})"
        if observe.prometheus_url is not None:
            where += f", GPU series from {observe.prometheus_url}"
        if observe.replica_autoscaling:
            where += ", replicas of the workloads annotated gpufleet.dev/max-replicas autoscaled"
    elif local is not None:
        on_this_machine, idle = local_plane(local, store, db, options, scenario, fresh, idle)
        store = on_this_machine.store
        plane = reclaiming = on_this_machine
        where = local_summary(on_this_machine)
    else:
        skipped = Skipped()
        files = list(scenario or ([bundled("queues.yaml")] if fresh else []))
        try:
            # Everything checked first, then written in one transaction: a bad scenario
            # leaves the database as it was.
            nodes: list[Node] = read_cluster(cluster or bundled("cluster.yaml"), skipped)
            seed = plan_seed(store, files, options, fresh, skipped)
            check_faults(seed.faults, nodes)
            check_node_faults(seed.node_faults, nodes)
            idle = join_idle_policies(
                [("--idle-policies", idle), ("--scenario", seed.idle_policies)]
            )
        except BaseException:
            store.close()
            raise
        store = opened_store(store, db)
        try:
            write_seed(store, seed)
        except BaseException:
            store.close()
            raise
        warn_skipped(skipped)
        note_paused(seed.paused_jobs)
        options = with_scenario_telemetry(options, telemetry, seed)
        embedded = EmbeddedControlPlane(store, nodes, options)
        for rejected in embedded.catalog.rejected:
            warn(escape(set_aside_message(rejected, db)))
        for key, queue in embedded.held.items():
            warn(escape(f"workload {key} waits until queue {queue} is fixed"))
        plane = reclaiming = embedded
        restored = sum(r.active for r in embedded.records.values())
        where = f"{len(nodes)} simulated nodes at {speed:g}x, {restored} workloads restored"
        if options.faults:
            where += f", {len(options.faults)} GPU faults to play"
        if options.node_faults:
            where += f", {len(options.node_faults)} spot interruptions and node failures to play"
    if reclaimer_for(reclaiming, idle, observe.idle_dry_run) is not None:
        names = ", ".join(p.name for p in idle)
        where += f", idle policies {names}" + (" (dry run)" if observe.idle_dry_run else "")
    hosts = HostPolicy.serving(host, http.allowed_hosts)
    app = create_app(plane, prices=observe.prices, hosts=hosts)
    port = sock.getsockname()[1]
    url = f"{http.scheme}://{host}:{port}"
    notifier = None
    if observe.routing is not None and plane.observatory is not None:
        # Subscribed before the loop's first turn, which takes in the runs that ended while no
        # server ran (``serve --local``): their notices are sent.
        notifier = start_notifier(plane, observe.routing, url)
        where += f", alerts sent to {len(observe.routing.routes)} route(s)"
    plane.start()
    console.print(f"gpufleet control plane on {url}/ ({where}, policy {policy}, database {db})")
    files_warning = raise_open_file_limit(http.limits.max_connections)
    if files_warning is not None:
        warn(escape(files_warning))
    if store.meta("tokens") is None:
        console.print(
            f"no tokens yet: make one with `gpufleet admin create-token --db {db} "
            "--tenant admin --role admin`"
        )
    try:
        config = server_config(app, host, port, http.limits, http.tls, log_level)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        if notifier is not None:
            notifier.stop()
        plane.stop()
        store.close()


def _http_settings(
    limits: HttpLimits, allowed_hosts: list[str] | None, cert: Path | None, key: Path | None
) -> HttpSettings:
    """``serve``'s HTTP flags, checked (a missing certificate or key file is told before
    anything starts)."""
    problems = limits.problems()
    if key is not None and cert is None:
        problems.append("--tls-key needs --tls-cert")
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        if path is not None and not path.is_file():
            problems.append(f"{flag} {path}: no such file")
    if problems:
        raise fail("; ".join(problems))
    tls = None if cert is None else TlsFiles(cert, key)
    if tls is not None:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls.cert, tls.key)
        except (ssl.SSLError, OSError) as error:
            raise fail(escape(f"--tls-cert/--tls-key: cannot use them: {error}")) from None
    return HttpSettings(limits, tuple(allowed_hosts or ()), tls)
