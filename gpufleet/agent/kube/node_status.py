"""What the node agent writes on its own Node: labels, annotations and status conditions.

Owns :class:`NodeLabeler` and :class:`NodeConditions`; what the labels, the inventory and the
conditions say is the agent's (gpufleet.agent, gpufleet.devices), not this module's.

Labels. The agent publishes GPU Feature Discovery's labels (``nvidia.com/gpu.product``, ...),
``gpufleet.dev/nvlink-domain`` and the ``gpufleet.dev/gpu-inventory`` annotation in one strategic
merge patch of the Node's metadata. Which labels it set last time is recorded in the
``gpufleet.dev/agent-labels`` annotation, in the same patch (Node Feature Discovery records its
own in ``nfd.node.kubernetes.io/feature-labels`` for the same reason): a label recorded there
and no longer set is removed, and no other label is touched, even under the same prefix
(``nvidia.com/gpu.present`` and ``nvidia.com/gpu.deploy.*`` belong to the GPU operator). The
``owned_label_prefixes`` are a guard: a label outside them is refused before anything is
written, and only labels inside them are ever removed. Nothing is written when the Node
already shows what would be.

Conditions. ``set_condition`` patches one ``status.conditions`` entry (strategic merge by
``type``, the others kept), as the kubelet and node-problem-detector do:
``lastTransitionTime`` moves only when the status changes, ``lastHeartbeatTime`` on every write.
A write happens when status, reason or message change, or when ``heartbeat_s`` have passed
since the last one; a condition already on the Node (an agent restarted) keeps its transition
time.

Both take the Node as just read (``current``) when the caller has it: the labels are compared
with it instead of a read of their own, and the condition is compared with what the Node shows
rather than with what was written last, so that a Node re-created bare (a kubelet registering
again) or a condition changed by someone else is written again at once.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.kube_client.api_types import NodeAgentCalls, rfc3339

#: The annotation recording which labels the agent set (comma-separated, sorted).
AGENT_LABELS_ANNOTATION = "gpufleet.dev/agent-labels"
#: The label prefixes the agent writes by default: GFD's and gpufleet's.
DEFAULT_OWNED_LABEL_PREFIXES = (
    "nvidia.com/gpu.",
    "nvidia.com/mig.",
    # GFD's per-profile labels of the mixed strategy: nvidia.com/mig-1g.10gb.count, ...
    "nvidia.com/mig-",
    "nvidia.com/cuda.",
    "nvidia.com/mps.",
    "gpufleet.dev/",
)
#: The Node condition the agent keeps: False while a GPU is unhealthy.
GPU_HEALTH_CONDITION = "GpuDevicesHealthy"

_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_STATUSES = ("True", "False", "Unknown")


def check_label(key: str, value: str) -> None:
    """Raise ValueError naming the label when ``key`` or ``value`` is not a valid label."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label {key!r}: prefix {prefix!r} is not a DNS subdomain")
    if not name or len(name) > 63 or not _NAME.match(name):
        raise ValueError(f"label {key!r}: name must be 1-63 alphanumerics, '-', '_' or '.'")
    if len(value) > 63 or not _NAME.match(value):
        raise ValueError(
            f"label {key!r}: value {value!r} must be at most 63 alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )


def _recorded(annotations: Mapping[str, str]) -> set[str]:
    text = annotations.get(AGENT_LABELS_ANNOTATION, "")
    return {key.strip() for key in text.split(",") if key.strip()}


def label_patch(
    node: Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    owned_label_prefixes: Iterable[str],
) -> dict[str, Any] | None:
    """The metadata patch that makes ``node`` show ``labels`` and ``annotations`` (see the
    module docstring), or None when it shows them already. Raises ValueError, naming the
    label, for a label outside ``owned_label_prefixes`` or not a valid label."""
    prefixes = tuple(owned_label_prefixes)
    for key, value in labels.items():
        if not key.startswith(prefixes):
            raise ValueError(
                f"label {key!r} is outside the agent's label prefixes {', '.join(prefixes)}"
            )
        check_label(key, value)
    metadata = node.get("metadata") or {}
    current_labels: Mapping[str, str] = metadata.get("labels") or {}
    current_annotations: Mapping[str, str] = metadata.get("annotations") or {}
    label_changes: dict[str, str | None] = {
        key: value for key, value in labels.items() if current_labels.get(key) != value
    }
    for key in _recorded(current_annotations) - set(labels):
        if key.startswith(prefixes) and key in current_labels:
            label_changes[key] = None
    wanted = {**annotations, AGENT_LABELS_ANNOTATION: ",".join(sorted(labels))}
    annotation_changes = {
        key: value for key, value in wanted.items() if current_annotations.get(key) != value
    }
    if not label_changes and not annotation_changes:
        return None
    patch: dict[str, Any] = {}
    if label_changes:
        patch["labels"] = label_changes
    if annotation_changes:
        patch["annotations"] = annotation_changes
    return {"metadata": patch}


class NodeLabeler:
    """See the module docstring."""

    def __init__(self, api: NodeAgentCalls) -> None:
        self.api = api
        self.writes = 0

    def publish(
        self,
        node: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        owned_label_prefixes: Iterable[str] = DEFAULT_OWNED_LABEL_PREFIXES,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        """Make the Node show ``labels`` and ``annotations``; whether it had to write.
        ``current``: the Node as just read (read here when None). Raises ValueError before any
        write for a bad label, ApiError when the API refuses."""
        if current is None:
            current = self.api.get_node(node)
        patch = label_patch(current, labels, annotations, owned_label_prefixes)
        if patch is None:
            return False
        self.api.patch_node(node, patch)
        self.writes += 1
        return True


@dataclass(frozen=True, slots=True)
class _Written:
    status: str
    reason: str
    message: str
    transition: str  # lastTransitionTime on the Node
    at: float | None  # monotonic time of our last write (None: read from the Node)


class NodeConditions:
    """See the module docstring. Thread-safe: one write at a time."""

    def __init__(
        self,
        api: NodeAgentCalls,
        heartbeat_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.wall = wall
        self.writes = 0
        self._written: dict[tuple[str, str], _Written] = {}
        self._lock = threading.Lock()

    def set_condition(
        self,
        node: str,
        type: str,
        status: str,
        reason: str,
        message: str,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        """Set condition ``type`` of ``node``; whether it wrote (see the module docstring).
        ``current``: the Node as just read, to compare with instead of the last write."""
        if status not in _STATUSES:
            raise ValueError(f"condition {type}: status {status!r} is not one of {_STATUSES}")
        if not type or not reason:
            raise ValueError(f"condition {type!r}: type and reason must not be empty")
        with self._lock:
            key = (node, type)
            last = self._written.get(key)
            if current is not None:
                shown = _condition_in(current, type)
                if last is None or shown is None or _says(shown) != _says(last):
                    # Gone (a Node re-created bare) or changed by someone else: the Node wins.
                    last = shown
            elif last is None:
                last = self._from_node(node, type)
            now = self.clock()
            same = last is not None and (last.status, last.reason, last.message) == (
                status,
                reason,
                message,
            )
            recent = last is not None and last.at is not None and now - last.at < self.heartbeat_s
            if same and recent:
                return False
            stamp = rfc3339(self.wall())
            moved = last is None or last.status != status
            transition = stamp if moved or last is None else last.transition
            condition = {
                "type": type,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": transition,
            }
            self.api.patch_node_status(node, {"status": {"conditions": [condition]}})
            self.writes += 1
            self._written[key] = _Written(status, reason, message, transition, now)
            return True

    def _from_node(self, node: str, type: str) -> _Written | None:
        """The condition as the Node shows it now (an agent that restarted), or None."""
        return _condition_in(self.api.get_node(node), type)


def _says(written: _Written) -> tuple[str, str, str]:
    return written.status, written.reason, written.message


def _condition_in(node: Mapping[str, Any], type: str) -> _Written | None:
    """Condition ``type`` as ``node`` shows it, or None."""
    conditions = (node.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == type:
            return _Written(
                str(condition.get("status", "")),
                str(condition.get("reason", "")),
                str(condition.get("message", "")),
                str(condition.get("lastTransitionTime") or ""),
                None,
            )
    return None
