"""Turn a request body (YAML or JSON; one object, several, or a ``List``) into workloads.

The objects are read exactly as ``gpufleet simulate`` reads scenario files (the same builder,
so the same checks and the same workloads), against the queues and priority classes the
control plane holds now; objects of kinds with no scheduling meaning (a ConfigMap beside a
Deployment) are set aside and counted, as every reader does (:mod:`gpufleet.io.kinds`).
Objects without a namespace go into the caller's default namespace. A Job of
``parallelism: 0`` is valid and runs nothing: it makes no workload and is said so (a line for
the caller, as ``Scenario.paused_jobs``). Which objects of a body are workloads is
:mod:`gpufleet.service.request_bodies`.
What this module does not do: decide whether the caller may submit them (see
:mod:`gpufleet.service.auth`) or store them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.io.assembly import ScenarioBuilder
from gpufleet.io.errors import InputError
from gpufleet.io.kinds import triage
from gpufleet.io.manifests import Manifest
from gpufleet.model.queues import QUEUE_LABEL, QUEUE_LABELS
from gpufleet.model.workload import TimedWorkload
from gpufleet.service.request_bodies import EXPECTED, NOT_SUBMITTED
from gpufleet.service.request_bodies import parse_body as parse_body
from gpufleet.service.submission_kinds import SOURCE as SOURCE
from gpufleet.service.submission_kinds import WORKLOAD_KINDS as WORKLOAD_KINDS

#: Kinds that serve, not run to an end: without a run time of their own they run until deleted.
RUN_UNTIL_DELETED = ("Deployment", "StatefulSet", "ReplicaSet", "RayCluster")


@dataclass(frozen=True, slots=True)
class Submitted:
    """One workload of a request: its kind (the object it came from) and its model form."""

    kind: str
    timed: TimedWorkload


def _defaulted(
    manifest: Manifest, builder: ScenarioBuilder, namespace: str, home_queue: str | None
) -> Manifest:
    """``manifest`` with the caller's namespace and queue filled in where it names none."""
    metadata = manifest.get("metadata")
    if not isinstance(metadata, dict):
        return manifest  # the builder reports it
    metadata = dict(metadata)
    if not metadata.get("namespace"):
        metadata["namespace"] = namespace
    labels = metadata.get("labels")
    if home_queue is not None and (labels is None or isinstance(labels, dict)):
        template = (manifest.get("spec") or {}).get("template") if manifest.get("spec") else None
        template_labels = ((template or {}).get("metadata") or {}).get("labels") or {}
        named = any(
            label in (labels or {})
            or (isinstance(template_labels, dict) and label in template_labels)
            for label in QUEUE_LABELS
        )
        if not named and str(metadata["namespace"]) not in builder.namespace_queues:
            metadata["labels"] = {**(labels or {}), QUEUE_LABEL: home_queue}
    return Manifest({**manifest, "metadata": metadata}, 0, 0, where=manifest.location)


def read_workloads(
    manifests: Sequence[Manifest],
    catalog: ScenarioBuilder,
    default_namespace: str,
    default_runtime: float | None,
    home_queue: str | None = None,
    sources: Sequence[str] | None = None,
    keep_submit_at: bool = False,
    paused: list[str] | None = None,
) -> list[Submitted]:
    """The workloads of ``manifests``, read against the control plane's queues and priority
    classes (``catalog``, from :meth:`~gpufleet.io.live_objects.LiveCatalog.request_builder`;
    it is not changed). A workload's pods run for its ``gpufleet.dev/sim-duration``, else its
    expected run time; one that declares neither runs for ``default_runtime`` simulated seconds
    (None: until it ends), except Deployment replicas and RayClusters (services), which run
    until deleted. An object that names no queue, in a namespace no queue is the default for,
    goes to ``home_queue`` (the caller's own) when given. Each workload is keyed with its kind
    (``namespace/Kind/name``: names are unique per kind and namespace, as in Kubernetes).
    ``sources``: the file each manifest came from, named in errors (default: the request).
    A workload's ``created`` is 0, or with ``keep_submit_at`` its ``gpufleet.dev/submit-at``
    (a scenario's offset from the start: ``serve --scenario``). A Job of ``parallelism: 0``
    is valid and makes no workload: its line is added to ``paused``."""
    builder = catalog.fork()
    known_queues = set(builder.queues)
    for manifest, source in zip(manifests, sources or [SOURCE] * len(manifests), strict=True):
        triage(manifest, source, manifest.location, WORKLOAD_KINDS, EXPECTED, None, NOT_SUBMITTED)
        builder.add(_defaulted(manifest, builder, default_namespace, home_queue), source)
    scenario = builder.scenario()
    if paused is not None:
        paused.extend(scenario.paused_jobs)
    out: list[Submitted] = []
    for timed in scenario.workloads:
        kind = scenario.kinds.get(timed.workload.key, "Pod")
        # The control plane keys every workload with its kind (names are unique per kind and
        # namespace): a Job and a PyTorchJob of one name are two workloads.
        workload = dataclasses.replace(timed.workload, kind=kind)
        if workload.queue not in known_queues and known_queues:
            raise InputError(SOURCE, f"queue {workload.queue!r} is not defined")
        duration = timed.duration  # sim-duration, else expected-runtime
        if duration is None and kind not in RUN_UNTIL_DELETED:
            duration = default_runtime
        created = timed.created if keep_submit_at else 0.0
        timed = dataclasses.replace(timed, workload=workload, created=created, duration=duration)
        out.append(Submitted(kind, timed))
    return out
