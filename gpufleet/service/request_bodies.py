"""What a request body holds: its objects (YAML or JSON; one object, several, or a ``List``),
and which of them are workloads to submit.

Apart from :mod:`gpufleet.service.submissions` (which builds workloads of them with the
scenario readers and the model) so that the CLI can tell, before sending a file, that it holds
nothing to submit, with the manifest readers only.
"""

from __future__ import annotations

import json

from gpufleet.io.errors import InputError, shorten
from gpufleet.io.kinds import Skipped, triage
from gpufleet.io.manifests import Manifest, decode_text, describe, parse_manifests
from gpufleet.io.request_shape import check_data
from gpufleet.service.submission_kinds import SOURCE, WORKLOAD_KINDS

#: What a request may hold, for errors.
EXPECTED = f"one of {', '.join(WORKLOAD_KINDS)}"
#: Why kinds gpufleet reads elsewhere are not taken here.
NOT_SUBMITTED = {
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
        for m in body_objects(body, content_type)
        if triage(m, SOURCE, m.location, WORKLOAD_KINDS, EXPECTED, mine, NOT_SUBMITTED)
    ]
    if not workloads:
        raise InputError(SOURCE, f"no workloads in the request ({EXPECTED}): {mine.note()}")
    if skipped is not None:
        skipped.counts.update(mine.counts)
    return workloads


def nothing_to_submit(body: bytes, content_type: str) -> Skipped | None:
    """What a body holds when it is nothing but objects of kinds with no scheduling meaning (a
    client need not send it: ``submit -f DIR`` with a file of ConfigMaps); None when it holds
    anything else, or cannot be read (the server then says what is wrong)."""
    mine = Skipped()
    try:
        for manifest in body_objects(body, content_type):
            if triage(manifest, SOURCE, None, WORKLOAD_KINDS, EXPECTED, mine, NOT_SUBMITTED):
                return None
    except InputError:
        return None
    return mine


def body_objects(body: bytes, content_type: str) -> list[Manifest]:
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
