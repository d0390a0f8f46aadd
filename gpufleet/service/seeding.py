"""Loading a scenario into a control plane's database (``gpufleet serve --scenario``): all of
it, or nothing.

:func:`plan_seed` reads the files and checks everything before anything is written: their
Queues and PriorityClasses as a change of those stored (the one check of every path,
:func:`~gpufleet.io.fleet.catalog.check_change`: an object of the files that is bad, or that breaks
one stored, refuses the whole scenario), and, on a new database, their workloads read against
the result as the operator (an admin) submits them. :func:`write_seed` then writes it all in
one SQLite transaction. A bad scenario leaves the database as it was. A workload's
``gpufleet.dev/submit-at`` is kept: it arrives that long after the start, on the plane's clock,
as in ``simulate`` (until then it is listed, waiting, and may be cancelled). A Job of
``parallelism: 0`` is valid and makes no workload: it is said in :attr:`Seed.paused_jobs`.

A scenario's ``GpuFault``, ``SpotInterruption`` and ``NodeFailure`` objects, its
``SimulatedTelemetry`` object and its ``IdlePolicy`` objects are read too (into :class:`Seed`),
but not stored: they apply to the server that loads them (the caller checks the faults against
its cluster, :func:`~gpufleet.io.fleet.faults.check_faults` and
:func:`~gpufleet.io.fleet.node_faults.check_node_faults`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.io.assembly import DEFAULT_QUEUE
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.catalog import CATALOG_KINDS, PRIORITY_CLASS, QUEUE, check_change, object_key
from gpufleet.io.fleet.faults import GPU_FAULT, gpu_fault_from_object
from gpufleet.io.fleet.idle_policies import KIND as IDLE_POLICY
from gpufleet.io.fleet.idle_policies import check_unique, idle_policy_from_object
from gpufleet.io.fleet.node_faults import NODE_FAULT_KINDS, node_fault_from_object
from gpufleet.io.fleet.sim_telemetry import (
    SIMULATED_TELEMETRY,
    TelemetrySettings,
    merge_settings,
    telemetry_settings_from_object,
)
from gpufleet.io.kinds import Skipped, triage
from gpufleet.io.live_objects import LiveCatalog, live_manifest
from gpufleet.io.manifests import Manifest, input_files, load_objects
from gpufleet.model.faults import GpuFault
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.node_faults import NodeFault
from gpufleet.model.times import format_duration
from gpufleet.service.auth import ADMIN, Principal, check_workload
from gpufleet.service.plane_book import ServeOptions
from gpufleet.service.store import Store, StoredEvent
from gpufleet.service.submissions import WORKLOAD_KINDS, Submitted, read_workloads

#: Who submits a scenario's workloads.
OPERATOR = Principal("operator", ADMIN)


@dataclass(frozen=True, slots=True)
class Seed:
    """What a scenario puts into the database: Queue and PriorityClass documents, by kind and
    name, and the workloads (on a new database only), all checked."""

    objects: dict[tuple[str, str], dict[str, Any]]
    workloads: list[Submitted]
    #: GPU faults to play, by time (from the server's start), and how telemetry is made.
    faults: list[GpuFault] = dataclasses.field(default_factory=list)
    telemetry: TelemetrySettings | None = None
    #: The idle policies the server acts on (with its ``--idle-policies``).
    idle_policies: list[IdlePolicy] = dataclasses.field(default_factory=list)
    #: Spot interruptions and node failures to play (times from the server's start).
    node_faults: list[NodeFault] = dataclasses.field(default_factory=list)
    #: Each Job of parallelism 0 read, a line each: valid, it runs no pods, so no workload.
    paused_jobs: list[str] = dataclasses.field(default_factory=list)


def plan_seed(
    store: Store,
    files: Sequence[Path],
    options: ServeOptions,
    fresh: bool,
    skipped: Skipped | None = None,
) -> Seed:
    """The seed of ``files`` for ``store``, checked as a whole (InputError: nothing is to be
    written). Workloads are read only on a ``fresh`` database (a later start has them).
    Objects of kinds with no scheduling meaning are set aside, counted in ``skipped``."""
    objects: dict[tuple[str, str], tuple[Manifest, str]] = {}  # with the file it came from
    bodies: list[tuple[Manifest, str]] = []  # with the file it came from
    faults: list[GpuFault] = []
    node_faults: list[NodeFault] = []
    node_fault_seen: dict[tuple[str, str], str] = {}
    telemetry: TelemetrySettings | None = None
    idle: list[IdlePolicy] = []
    idle_seen: dict[str, str] = {}
    reads = (
        *CATALOG_KINDS,
        *WORKLOAD_KINDS,
        GPU_FAULT,
        *NODE_FAULT_KINDS,
        SIMULATED_TELEMETRY,
        IDLE_POLICY,
    )
    expected = f"one of {', '.join(reads)}"
    for path in files:
        for file, manifest in _objects_of(path, expected):
            if not triage(manifest, str(file), manifest.location, reads, expected, skipped):
                continue
            kind = manifest.get("kind")
            if kind == GPU_FAULT:
                faults.append(gpu_fault_from_object(manifest, str(file), manifest.location))
                continue
            if kind in NODE_FAULT_KINDS:
                fault = node_fault_from_object(manifest, str(file), manifest.location)
                earlier = node_fault_seen.setdefault((fault.kind, fault.name), fault.where)
                if earlier != fault.where:
                    raise InputError(
                        str(file), f"{fault.label} appears twice (first in {earlier})",
                        manifest.location, "metadata.name",
                    )  # fmt: skip
                node_faults.append(fault)
                continue
            if kind == IDLE_POLICY:
                policy = idle_policy_from_object(manifest, str(file), manifest.location)
                check_unique(idle_seen, policy.name, str(file), manifest.location)
                idle.append(policy)
                continue
            if kind == SIMULATED_TELEMETRY:
                settings = telemetry_settings_from_object(manifest, str(file), manifest.location)
                telemetry = merge_settings(telemetry, settings)
                continue
            if kind not in CATALOG_KINDS:
                bodies.append((manifest, str(file)))
                continue
            key = (str(kind), object_key(manifest))
            if key in objects:
                first, first_file = objects[key]
                raise InputError(
                    str(file),
                    f"{kind} {key[1]!r} appears twice (first in {first_file}:{first.location})",
                    manifest.location,
                    "metadata.name",
                )
            objects[key] = (manifest, str(file))
    stored = {(kind, object_key(doc)): doc for kind in CATALOG_KINDS for doc in store.objects(kind)}
    change = check_change(
        _catalog_objects(stored, {}, store.path),
        _catalog_objects(stored, objects, store.path),
        set(objects),
    )
    if change.problems:
        raise change.problems[0].error
    merged = {**stored, **{key: manifest for key, (manifest, _) in objects.items()}}
    workloads: list[Submitted] = []
    paused: list[str] = []
    if fresh and bodies:
        catalog = LiveCatalog(
            [doc for (kind, _), doc in merged.items() if kind == QUEUE],
            [doc for (kind, _), doc in merged.items() if kind == PRIORITY_CLASS],
            source=store.path,
            where="stored",
        )
        workloads = _read_workloads(bodies, catalog, options, paused)
    return Seed(
        {key: dict(manifest) for key, (manifest, _) in objects.items()},
        workloads,
        sorted(faults, key=lambda fault: fault.at),
        telemetry,
        idle,
        node_faults,
        paused,
    )


def _objects_of(path: Path, expected: str) -> Iterator[tuple[Path, Manifest]]:
    """(file, object) of a file or a directory's YAML files, each file holding at least one
    object (an empty scenario is refused, as ``place --scenario`` refuses it)."""
    for file in input_files(path):
        for manifest in load_objects(file, expected):
            yield file, manifest


def write_seed(store: Store, seed: Seed) -> None:
    """Everything of ``seed`` in one transaction, and the database marked as seeded."""
    now = float(store.meta("clock") or 0.0)
    seq = store.next_seq()
    with store.transaction():
        for (kind, name), document in seed.objects.items():
            store.put_object(kind, name, document)
        events = []
        for i, item in enumerate(seed.workloads):
            # A workload's gpufleet.dev/submit-at counts from the start: it arrives then.
            offset = item.timed.created
            timed = dataclasses.replace(item.timed, created=now + offset)
            store.add_workload(seq + i, OPERATOR.tenant, item.kind, timed, timed.created)
            later = f", arriving in {format_duration(offset)} (submit-at)" if offset > 0 else ""
            events.append(
                StoredEvent(
                    now, timed.workload.key, "Normal", "Submitted",
                    f"{item.kind} by tenant {OPERATOR.tenant} to queue {timed.workload.queue}"
                    f"{later}",
                )
            )  # fmt: skip
        store.add_events(events)
        store.set_meta("seeded", "1")


def _read_workloads(
    bodies: Sequence[tuple[Manifest, str]],
    catalog: LiveCatalog,
    options: ServeOptions,
    paused: list[str],
) -> list[Submitted]:
    """The workloads of a scenario (each object with its file), checked as the operator's
    submission would be; each Job of parallelism 0 (no workload) said in ``paused``."""
    builder = catalog.request_builder()
    queues = builder.queue_models()
    submitted = read_workloads(
        [manifest for manifest, _ in bodies],
        builder,
        OPERATOR.default_namespace(),
        options.default_runtime,
        DEFAULT_QUEUE,
        sources=[file for _, file in bodies],
        keep_submit_at=True,
        paused=paused,
    )
    return [
        Submitted(
            item.kind,
            dataclasses.replace(
                item.timed,
                workload=check_workload(OPERATOR, options.rules, item.timed.workload, queues),
            ),
        )
        for item in submitted
    ]


def _catalog_objects(
    stored: Mapping[tuple[str, str], Mapping[str, Any]],
    files: Mapping[tuple[str, str], tuple[Manifest, str]],
    db: str,
) -> list[tuple[Manifest, str]]:
    """The catalog's objects in name order, the files' replacing the stored ones of the same
    kind and name, each named as its origin names it."""
    out: list[tuple[Manifest, str]] = []
    for key in sorted({*stored, *files}, key=lambda k: (CATALOG_KINDS.index(k[0]), k[1])):
        if key in files:
            out.append(files[key])
        else:
            out.append((live_manifest({"kind": key[0], **stored[key]}, "stored"), db))
    return out
