"""Turn a request body (YAML or JSON; one object, several, or a ``List``) into workloads.

The objects are read exactly as ``gpufleet simulate`` reads scenario files (the same builder,
so the same checks and the same workloads), against the queues and priority classes the
control plane holds now; objects of kinds with no scheduling meaning (a ConfigMap beside a
Deployment) are set aside and counted, as every reader does (:mod:`gpufleet.io.kinds`).
Objects without a namespace go into the caller's default namespace. A Job of
``parallelism: 0`` is valid and runs nothing: it makes no workload and is said so (a line for
the caller, as ``Scenario.paused_jobs``).
What this module does not do: decide whether the caller may submit them (see
:mod:`gpufleet.service.auth`) or store them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.io.assembly import ScenarioBuilder
from gpufleet.io.errors import InputError, shorten
from gpufleet.io.kinds import Skipped, triage
from gpufleet.io.manifests import Manifest, decode_text, describe, parse_manifests
from gpufleet.io.request_shape import check_data
from gpufleet.model.queues import QUEUE_LABEL, QUEUE_LABELS
from gpufleet.model.workload import TimedWorkload

SOURCE = "request"
WORKLOAD_KINDS = (
    "Pod", "Job", "Deployment", "StatefulSet", "ReplicaSet", "PyTorchJob", "MPIJob",
    "RayCluster", "RayJob", "PodGroup",
)  # fmt: skip
#: Kinds that serve, not run to an end: without a run time of their own they run until deleted.
RUN_UNTIL_DELETED = ("Deployment", "StatefulSet", "ReplicaSet", "RayCluster")
_EXPECTED = f"one of {', '.join(WORKLOAD_KINDS)}"
#: Why kinds gpufleet reads elsewhere are not taken here.
_NOT_SUBMITTED = {
    **dict.fromkeys(
        ("Queue", "PriorityClass"),
        "manage queues and priority classes with PUT /api/v1/queues or /api/v1/priorityclasses",
    ),
    **dict.fromkeys(("Node", "ClusterSpec"), "a cluster: the control plane's nodes are its own"),
    "ResourceQuota": "quotas are the queues' (PUT /api/v1/queues)",
    "AdmissionPolicy": "admission rules are the server's (serve --rules)",
    **dict.fromkeys(
        ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"),
        "Dynamic Resource Allocation's objects are not submitted yet; give them with the "
        "scenario (serve --scenario)",
    ),
}


@dataclass(frozen=True, slots=True)
class Submitted:
    """One workload of a request: its kind (the object it came from) and its model form."""

    kind: str
    timed: TimedWorkload


def parse_body(body: bytes, content_type: str, skipped: Skipped | None = None) -> list[Manifest]:
    """The workload objects of a request body. JSON when the content type says so, else YAML (a
    JSON document is YAML too). Objects of kinds with no scheduling meaning (a ConfigMap) are
    set aside and counted in ``skipped`` (never written anywhere); a body of nothing else, or
    with an object that makes pods but is not read (a DaemonSet), raises InputError, as does
    anything else wrong, naming the document at fault. A YAML alias is refused, and a body
    bounded in size and nesting, before anything is built of it
    (:mod:`gpufleet.io.request_shape`)."""
    mine = Skipped()
    workloads = [
        m
        for m in _objects(body, content_type)
        if triage(m, SOURCE, m.location, WORKLOAD_KINDS, _EXPECTED, mine, _NOT_SUBMITTED)
    ]
    if not workloads:
        raise InputError(SOURCE, f"no workloads in the request ({_EXPECTED}): {mine.note()}")
    if skipped is not None:
        skipped.counts.update(mine.counts)
    return workloads


def nothing_to_submit(body: bytes, content_type: str) -> Skipped | None:
    """What a body holds when it is nothing but objects of kinds with no scheduling meaning (a
    client need not send it: ``submit -f DIR`` with a file of ConfigMaps); None when it holds
    anything else, or cannot be read (the server then says what is wrong)."""
    mine = Skipped()
    try:
        for manifest in _objects(body, content_type):
            if triage(manifest, SOURCE, None, WORKLOAD_KINDS, _EXPECTED, mine, _NOT_SUBMITTED):
                return None
    except InputError:
        return None
    return mine


def _objects(body: bytes, content_type: str) -> list[Manifest]:
    """Every object of a body, ``List`` items flattened."""
    text = decode_text(body, SOURCE)
    if not text.strip():
        raise InputError(SOURCE, "the body is empty; expected a workload object")
    if "json" in content_type:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(
                SOURCE, f"invalid JSON: {error.msg}", f"line {error.lineno} column {error.colno}"
            ) from None
        except (ValueError, RecursionError) as error:  # 5,000-digit numbers, deep nesting
            raise InputError(SOURCE, f"invalid JSON: {shorten(str(error))}") from None
        check_data(data, SOURCE, "the body")
        items = data if isinstance(data, list) else [data]
        manifests = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise InputError(SOURCE, f"expected an object, got {describe(item)}", f"item {i}")
            manifests.append(Manifest(item, i, 0, where=f"item {i}"))
    else:
        manifests = parse_manifests(text, SOURCE, untrusted=True)
    out: list[Manifest] = []
    for manifest in manifests:
        if manifest.get("kind") == "List":
            for i, item in enumerate(manifest.get("items") or []):
                if not isinstance(item, dict):
                    raise InputError(
                        SOURCE, f"expected an object, got {describe(item)}", f"items[{i}]"
                    )
                out.append(Manifest(item, i, 0, where=f"{manifest.location}, items[{i}]"))
        else:
            out.append(manifest)
    if not out:
        raise InputError(SOURCE, "no objects in the body; expected a workload object")
    return out


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
        triage(manifest, source, manifest.location, WORKLOAD_KINDS, _EXPECTED, None, _NOT_SUBMITTED)
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
