"""``gpufleet scheduler``: run as the GPU scheduler of a Kubernetes cluster."""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.markup import escape

# Light imports only: this command lists the cluster before it imports the scheduling core
# (see the body), so that the API server works while Python imports.
from gpufleet.cli.output import fail, listen_socket
from gpufleet.scheduling.config import AdmissionConfig
from gpufleet.scheduling.policy_names import POLICY_NAMES
from gpufleet.scheduling.profile import Profile

_DEFAULTS = AdmissionConfig()
#: The loop must have turned this recently for /healthz to answer ok.
HEALTHY_WITHIN_S = 60.0
#: /metrics, /healthz and /readyz listen on every address (probes come from the kubelet).
METRICS_HOST = "0.0.0.0"


def scheduler(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            envvar="KUBECONFIG",
            help="kubeconfig file; without one, the in-cluster service account is used",
        ),
    ] = None,
    scheduler_name: Annotated[
        str, typer.Option(help="schedule the pods whose spec.schedulerName is this")
    ] = "gpufleet",
    policy: Annotated[str, typer.Option(help="placement policy (gpufleet policies)")] = "default",
    metrics_port: Annotated[
        int, typer.Option(help="port of /metrics, /healthz and /readyz (0: none)")
    ] = 9090,
    leader_elect: Annotated[
        bool, typer.Option(help="elect one leader among replicas through a Lease")
    ] = True,
    lease_namespace: Annotated[
        str, typer.Option(envvar="POD_NAMESPACE", help="namespace of the leader Lease")
    ] = "gpufleet-system",
    lease_name: Annotated[str, typer.Option(help="name of the leader Lease")] = (
        "gpufleet-scheduler"
    ),
    identity: Annotated[
        str | None, typer.Option(help="this replica's name in the Lease (default: POD_NAME)")
    ] = None,
    kube_api_qps: Annotated[
        float, typer.Option(help="client-side limit on API calls per second")
    ] = 500.0,
    kube_api_burst: Annotated[int, typer.Option(help="client-side burst of API calls")] = 1000,
    # A bind waits on the API server (and etcd) for tens of milliseconds and uses a fraction of
    # a millisecond of CPU: 16 in flight left the API server idle half the time.
    binders: Annotated[int, typer.Option(help="bind and eviction calls in parallel")] = 64,
    seed: Annotated[int, typer.Option(help="seed of the node tie-break order")] = 0,
    min_runtime: Annotated[
        float, typer.Option(help="seconds a workload runs before it may be preempted")
    ] = _DEFAULTS.min_runtime,
    gang_ready_timeout: Annotated[
        float, typer.Option(help="seconds for all pods of a started gang to become ready")
    ] = _DEFAULTS.gang_ready_timeout,
    profile: Annotated[
        Path | None,
        typer.Option(help="scheduling profile YAML: which plugin at each extension point"),
    ] = None,
    guard_gangs: Annotated[
        bool,
        typer.Option(
            help="annotate the pods of the gangs it binds so that Cluster Autoscaler and "
            "Karpenter leave their nodes alone (safe-to-evict: false, do-not-disrupt: true)"
        ),
    ] = True,
    binding_key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="GPUFLEET_BINDING_KEY_FILE",
            help="sign each binding's device annotations with this key (the "
            "gpufleet-binding-key Secret, mounted); node agents honour no other binding",
            dir_okay=False,
        ),
    ] = None,
    insecure_unsigned_bindings: Annotated[
        bool,
        typer.Option(
            help="INSECURE, for tests and demos only: bind without --binding-key-file (agents "
            "holding a key refuse these pods; agents without one trust any pod's annotations)"
        ),
    ] = False,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
) -> None:
    """Run as the GPU scheduler of a Kubernetes cluster, for pods naming --scheduler-name.

    Example: gpufleet scheduler --kubeconfig ~/.kube/config --no-leader-elect
    --binding-key-file binding.key
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if policy not in POLICY_NAMES:
        raise typer.BadParameter(
            f"unknown policy {policy!r} (expected one of {', '.join(POLICY_NAMES)})",
            param_hint="--policy",
        )
    if kubeconfig is not None and not kubeconfig.is_file():
        raise typer.BadParameter(f"no such file: {kubeconfig}", param_hint="--kubeconfig")
    scheduling_profile = None if profile is None else _read_profile(profile, policy)
    # The port first: a busy one is told before anything starts (exit 2, one line).
    metrics_socket = (
        listen_socket(METRICS_HOST, metrics_port, "--metrics-port") if metrics_port else None
    )
    from gpufleet.io.kube.binding_signature import BindingKeyError, read_binding_key

    try:
        binding_key = read_binding_key(binding_key_file, insecure_unsigned_bindings)
    except BindingKeyError as error:
        raise fail(escape(str(error))) from None
    # Until the first core is built, the start makes mostly long-lived objects: the cycle
    # collector would only scan them (the scheduler turns it on again, see control/gc_bursts).
    gc.disable()
    # Imported here: the Kubernetes client takes a third of a second to import, which every
    # other command would pay.
    from gpufleet.kube_client.api import WATCHED, KubeApi, RateLimiter, load_client
    from gpufleet.kube_client.informer import Informers

    try:
        client = load_client(None if kubeconfig is None else str(kubeconfig), binders * 2)
    except Exception as error:  # the config loaders raise several unrelated types
        raise fail(f"cannot load the Kubernetes configuration: {error}") from None
    api = KubeApi(client, RateLimiter(kube_api_qps, kube_api_burst))
    # The API server lists the cluster while the scheduling core is imported.
    informers = Informers(api, WATCHED)
    informers.start()
    from gpufleet.backends.kube.scheduler import KubeScheduler, SchedulerOptions, default_identity
    from gpufleet.metrics.endpoint import HealthServer

    options = SchedulerOptions(
        scheduler_name=scheduler_name,
        policy=policy,
        seed=seed,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        identity=identity or default_identity(),
        binders=binders,
        admission=AdmissionConfig(min_runtime=min_runtime, gang_ready_timeout=gang_ready_timeout),
        guard_gangs=guard_gangs,
        binding_key=binding_key,
    )
    if scheduling_profile is not None:
        options = dataclasses.replace(options, profile=scheduling_profile)
    runner = KubeScheduler(api, options, informers=informers)
    health: HealthServer | None = None
    if metrics_port:
        health = HealthServer(
            runner.metrics,
            healthy=lambda: time.monotonic() - runner.heartbeat < HEALTHY_WITHIN_S,
            ready=lambda: runner.ready,
            port=metrics_port,
            host=METRICS_HOST,
            sock=metrics_socket,
        )
        health.start()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        runner.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logging.getLogger(__name__).info(
        "gpufleet scheduler %s (pid %d) for schedulerName %s",
        options.identity,
        os.getpid(),
        scheduler_name,
    )
    try:
        runner.run()
    finally:
        if health is not None:
            health.stop()
    sys.exit(0)


def _read_profile(path: Path, policy: str) -> Profile:
    """The profile of ``path``, checked before the scheduler connects. This imports the
    scheduling core before the cluster is listed, which only a scheduler given a profile pays."""
    from gpufleet.control.profiles import load_profile
    from gpufleet.io.errors import InputError

    try:
        return load_profile(path, policy)
    except InputError as error:
        raise fail(escape(str(error))) from None
