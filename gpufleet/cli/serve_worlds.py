"""How ``gpufleet serve`` builds the plane of each world: the database checked before it is
opened (:func:`planning_store`, :func:`opened_store`), this machine's plane (``--local``:
:func:`local_plane`), a Kubernetes cluster's (``--kubeconfig``: :func:`kube_plane`), the
scenario's settings for the simulated cluster's, and what a start says of them. The command
itself, its flags and the server's life are :mod:`gpufleet.cli.serve`'s."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from gpufleet.cli.inputs import fail, warn, warn_skipped
from gpufleet.cli.serve_observing import join_idle_policies
from gpufleet.io.fleet.catalog import Rejected
from gpufleet.io.fleet.sim_telemetry import TelemetrySettings
from gpufleet.io.kinds import Skipped
from gpufleet.io.kube.binding_signature import BindingKey
from gpufleet.model.idle import IdlePolicy
from gpufleet.service.observatory import STEP_S
from gpufleet.service.plane_book import QUEUE, ServeOptions
from gpufleet.service.seeding import Seed, plan_seed, write_seed
from gpufleet.service.store import Store, StoreError

if TYPE_CHECKING:
    from gpufleet.kube_client.api import KubeApi
    from gpufleet.service.kube_plane import KubeControlPlane
    from gpufleet.service.local_plane import LocalControlPlane


@dataclasses.dataclass(frozen=True, slots=True)
class LocalSettings:
    """``serve --local``'s options."""

    fake_gpus: Path | None
    state_dir: Path
    run_as: list[str]
    grace: float
    mps: bool
    allow_root: bool = False
    shared_proc: bool = False
    observe_every: float = STEP_S


def bundled(name: str) -> Path:
    """A file of the bundled example (cluster.yaml, queues.yaml)."""
    return Path(str(resources.files("gpufleet") / "data" / "serve" / name))


def planning_store(db: Path) -> Store:
    """The database a start is checked against: ``db`` when it exists, else an empty one in
    memory (:func:`opened_store` creates the file once everything is checked)."""
    try:
        return Store(db if db.exists() else ":memory:")
    except StoreError as error:
        raise fail(str(error)) from None


def opened_store(planning: Store, db: Path) -> Store:
    """The database to serve on, the start checked: ``planning`` itself, or, where that was
    the stand-in in memory, ``db``, created now."""
    if planning.path == str(db):
        return planning
    planning.close()
    try:
        return Store(db)
    except StoreError as error:
        raise fail(str(error)) from None


def with_scenario_telemetry(
    options: ServeOptions, told: TelemetrySettings, seed: Seed
) -> ServeOptions:
    """``options`` with the scenario's faults (GPU faults, spot interruptions and node
    failures) and telemetry settings (the command line's ``--usage-profile`` and ``--seed`` win
    over its ``SimulatedTelemetry``)."""
    scenario = seed.telemetry or TelemetrySettings()
    return dataclasses.replace(
        options,
        usage_profile=told.default_profile or scenario.default_profile,
        telemetry_seed=told.seed if told.seed is not None else scenario.seed,
        faults=tuple(seed.faults),
        node_faults=tuple(seed.node_faults),
    )


def local_plane(
    local: LocalSettings,
    planning: Store,
    db: Path,
    options: ServeOptions,
    scenario: list[Path] | None,
    fresh: bool,
    idle: list[IdlePolicy],
) -> tuple[LocalControlPlane, list[IdlePolicy]]:
    """The plane over this machine (its GPUs discovered through NVML, or the fake NVML, which
    stays open for the plane's samples until it stops), its queues and priority classes
    seeded from ``scenario`` (on a new database: the bundled one-box queues); and the idle
    policies it acts on (``idle`` and the scenario's). Everything is checked against
    ``planning`` (:func:`planning_store`) before the database is opened for good."""
    from gpufleet.backends.local.machine import LocalMachine
    from gpufleet.devices.fake import FakeNvml, make_fake_nvml
    from gpufleet.devices.fake_spec import FakeSpecError
    from gpufleet.devices.nvml import NvmlUnavailableError, load_nvml
    from gpufleet.devices.nvml_source import NvmlDeviceSource
    from gpufleet.service.local_isolation import (
        check_private_dev,
        check_process_hiding,
        check_resource_limits,
    )
    from gpufleet.service.local_plane import LocalControlPlane
    from gpufleet.service.local_users import TenantUsers

    devices: NvmlDeviceSource | None = None
    store = planning
    try:
        users = TenantUsers.parse(local.run_as, allow_root=local.allow_root)
        hiding_warning = check_process_hiding(users, local.shared_proc)
        cgroups, limits_warning = check_resource_limits()
        private_dev, dev_warning = check_private_dev(users)
        nvml = make_fake_nvml(local.fake_gpus) if local.fake_gpus is not None else load_nvml()
        try:
            devices = NvmlDeviceSource(nvml)
        except BaseException:
            nvml.nvmlShutdown()
            raise
        inventory = devices.inventory()
        if not inventory.devices:
            raise fail(escape(no_gpus(local.fake_gpus)))
        files = list(scenario or ([bundled("local-queues.yaml")] if fresh else []))
        skipped = Skipped()
        seed = plan_seed(planning, files, options, fresh, skipped)
        if seed.workloads or seed.paused_jobs or seed.faults or seed.node_faults:
            raise fail(
                "--local reads only Queue, PriorityClass and IdlePolicy objects from "
                "--scenario: submit workloads through the API (gpufleet submit, gpufleet run)"
            )
        idle = join_idle_policies([("--idle-policies", idle), ("--scenario", seed.idle_policies)])
        store = opened_store(planning, db)
        write_seed(store, seed)
    except BaseException as error:
        if devices is not None:
            devices.close()
        store.close()
        if isinstance(error, NvmlUnavailableError):
            raise fail(f"cannot read this machine's GPUs: {error}") from None
        if isinstance(error, FakeSpecError):
            raise fail(escape(str(error))) from None
        raise
    warn_skipped(skipped)
    if hiding_warning is not None:
        warn(escape(hiding_warning))
    if limits_warning is not None:
        warn(escape(limits_warning))
    if dev_warning is not None:
        warn(escape(dev_warning))
    fake_dev = nvml.spec.device_dir if isinstance(nvml, FakeNvml) else None
    machine = LocalMachine(  # its supervisor makes the state directory, with its modes
        inventory,
        local.state_dir,
        mps=local.mps,
        grace_s=local.grace,
        allow_root=local.allow_root,
        shared_proc=local.shared_proc,
        cgroups=cgroups,
        private_dev=private_dev,
        device_dir=fake_dev or "/dev",
    )
    plane = LocalControlPlane(
        store, machine, options, users, devices=devices, observe_step_s=local.observe_every
    )
    for rejected in plane.catalog.rejected:
        warn(escape(set_aside_message(rejected, Path(store.path))))
    return plane, idle


def no_gpus(fake_gpus: Path | None) -> str:
    """Why ``serve --local`` refuses a machine without GPUs (it would schedule nothing)."""
    if fake_gpus is not None:
        return f"{fake_gpus}: describes no GPUs (devices: is empty); --local needs at least one"
    return "this machine has no GPUs that NVML can see; --local needs at least one"


def local_summary(plane: LocalControlPlane) -> str:
    """How the server says where it runs: ``this machine (box: 8 GPUs, state in ...), 2 runs
    found again``."""
    node = plane.machine.node
    running = sum(r.active for r in plane.records.values())
    return (
        f"this machine ({node.name}: {node.gpu_count} GPUs, runs in {plane.machine.state_dir}), "
        f"{running} workloads restored"
    )


def kube_api(kubeconfig: Path) -> KubeApi:
    """The cluster's API as ``kubeconfig`` reaches it (the client is imported here: it is
    slow to import)."""
    from gpufleet.kube_client.api import KubeApi, load_client

    if not kubeconfig.is_file():
        raise fail(f"{kubeconfig}: no such file")
    return KubeApi(load_client(str(kubeconfig)))


def kube_plane(
    api: KubeApi,
    store: Store,
    options: ServeOptions,
    scheduler_name: str,
    prometheus_url: str | None = None,
    replica_autoscaling: bool = False,
    binding_key: BindingKey | None = None,
) -> KubeControlPlane:
    """The plane over a Kubernetes cluster through ``api`` (imported here: the client is slow
    to import), observing the GPUs through the Prometheus server at ``prometheus_url`` when
    given, and scaling the workloads annotated for it on the metrics there if
    ``replica_autoscaling``."""
    from gpufleet.backends.kube.scheduler import SchedulerOptions
    from gpufleet.service.kube_plane import KubeControlPlane

    scheduler = SchedulerOptions(
        scheduler_name=scheduler_name,
        policy=options.policy,
        leader_elect=False,
        admission=options.admission,
        profile=options.profile,
        binding_key=binding_key,
    )
    plane = KubeControlPlane(api, store, options, scheduler)
    if prometheus_url is not None:
        from gpufleet.backends.prometheus import PrometheusSeries
        from gpufleet.backends.prometheus.inference import PrometheusInferenceMetrics

        series = PrometheusSeries(prometheus_url)
        plane.observe_with(series)
        if replica_autoscaling:
            plane.autoscale_replicas(PrometheusInferenceMetrics(series))
    return plane


def set_aside_message(rejected: Rejected, db: Path) -> str:
    """What a server starting on a bad stored object says: which, why, and how to fix it."""
    kind, name, error = rejected.kind, rejected.key, rejected.error
    route = "queues" if kind == QUEUE else "priorityclasses"
    why = error.reason if error.field is None else f"{error.field}: {error.reason}"
    return (
        f"stored {kind} {name} is set aside ({why}). Fix it with PUT /api/v1/{route} "
        f"(or `gpufleet serve --db {db} --scenario FIXED.yaml`)"
        + (f", or delete it with DELETE /api/v1/queues/{name}" if kind == QUEUE else "")
    )
