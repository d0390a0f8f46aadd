"""What a workload object (or its pod template; the object wins) says about admission: the
``gpufleet.dev/queue`` label (or Kueue's ``kueue.x-k8s.io/queue-name``), the pod-group labels,
``priorityClassName`` / ``priority``, the
``gpufleet.dev/`` annotations preemptible, expected-runtime, checkpoint-interval,
checkpoint-on-notice, topology, topology-level and mixed-gpu-models, and the autoscalers'
annotations that protect it from disruption (:mod:`.disruption`: it is then not preemptible
unless ``gpufleet.dev/preemptible`` says so), each kept with the field it came from
(:func:`workload_settings`).

It reads settings only: resolving the queue or priority class they name and assembling the
workload is ``assembly``'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gpufleet.io.errors import InputError
from gpufleet.io.kube.disruption import protecting_key, protection
from gpufleet.io.kube.pods import EXPECTED_RUNTIME_ANNOTATION
from gpufleet.io.manifests import Context
from gpufleet.io.quantities import parse_duration_seconds
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.queues import KUEUE_QUEUE_LABEL, QUEUE_LABEL
from gpufleet.model.workload import (
    COSCHEDULING_POD_GROUP_LABEL,
    POD_GROUP_LABEL,
    TopologyMode,
    TopologyRequest,
)

T = TypeVar("T")

PREEMPTIBLE_ANNOTATION = "gpufleet.dev/preemptible"
MIXED_MODELS_ANNOTATION = "gpufleet.dev/mixed-gpu-models"
CHECKPOINT_INTERVAL_ANNOTATION = "gpufleet.dev/checkpoint-interval"
#: "true": the workload saves its progress when told its node is going (a spot interruption's
#: notice), so it loses none of the work done before the notice.
CHECKPOINT_ON_NOTICE_ANNOTATION = "gpufleet.dev/checkpoint-on-notice"
TOPOLOGY_ANNOTATION = "gpufleet.dev/topology"
TOPOLOGY_LEVEL_ANNOTATION = "gpufleet.dev/topology-level"
#: Short names of topology levels; any other level is taken as a node label key.
TOPOLOGY_LEVELS = {
    "nvlink": GFD_LABELS.NVLINK_DOMAIN,
    "rack": GFD_LABELS.RACK,
    "zone": GFD_LABELS.ZONE,
}
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """A value read from an object, with the object and field it came from (for errors)."""

    value: T
    context: Context
    field: str | None

    @property
    def where(self) -> str:
        """``file:document 1 (line 1), Pod ml/x (metadata.labels[...])``, for other errors."""
        place = self.context.source
        if self.context.location is not None:
            place = f"{place}:{self.context.location}"
        return place if self.field is None else f"{place} ({self.field})"

    def error(self, message: str) -> InputError:
        return self.context.error(self.field, message)


@dataclass(frozen=True, slots=True)
class WorkloadSettings:
    """What an object says about the workload its pods join (None: it does not say)."""

    labels: dict[str, str]
    group: Setting[str] | None = None
    queue: Setting[str] | None = None
    priority_class: Setting[str] | None = None
    priority: Setting[int] | None = None
    preemptible: Setting[bool] | None = None
    expected_runtime: Setting[float] | None = None
    checkpoint_interval: Setting[float] | None = None
    checkpoint_on_notice: Setting[bool] | None = None
    topology: Setting[TopologyRequest] | None = None
    mixed_models: Setting[bool] | None = None
    #: The autoscaler annotation that protects it from disruption (``key: "value"``).
    protected: Setting[str] | None = None


def workload_settings(
    context: Context,
    metadata: Mapping[str, Any],
    pod_spec: Mapping[str, Any],
    pod_spec_path: str,
    template_metadata: Mapping[str, Any] | None = None,
    template_metadata_path: str = "spec.template.metadata",
) -> WorkloadSettings:
    """The admission settings of an object (``metadata``) and its pod template, if it has one;
    the object's labels and annotations win over the template's."""
    labels: dict[str, Setting[str]] = {}
    annotations: dict[str, Setting[str]] = {}
    layers = [(metadata, "metadata")]
    if template_metadata is not None:
        layers.insert(0, (template_metadata, template_metadata_path))
    for layer, path in layers:
        for into, what in ((labels, "labels"), (annotations, "annotations")):
            for key, value in context.string_map(layer.get(what), f"{path}.{what}").items():
                into[key] = Setting(value, context, f"{path}.{what}[{key}]")
    group = labels.get(POD_GROUP_LABEL)
    other = labels.get(COSCHEDULING_POD_GROUP_LABEL)
    if group is not None and other is not None and group.value != other.value:
        raise other.error(
            f"names pod group {other.value!r}, but {POD_GROUP_LABEL} names {group.value!r}"
        )
    queue = labels.get(QUEUE_LABEL)
    kueue_queue = labels.get(KUEUE_QUEUE_LABEL)
    if queue is not None and kueue_queue is not None and queue.value != kueue_queue.value:
        raise kueue_queue.error(
            f"names queue {kueue_queue.value!r}, but {QUEUE_LABEL} names {queue.value!r}: "
            f"give one queue (gpufleet reads Kueue's label as its own)"
        )
    class_path, priority_path = f"{pod_spec_path}.priorityClassName", f"{pod_spec_path}.priority"
    class_name, priority = pod_spec.get("priorityClassName"), pod_spec.get("priority")
    return WorkloadSettings(
        {key: setting.value for key, setting in labels.items()},
        group=group or other,
        queue=queue or kueue_queue,
        priority_class=None
        if class_name is None
        else Setting(context.name(class_name, class_path), context, class_path),
        priority=None
        if priority is None
        else Setting(context.int32(priority, priority_path), context, priority_path),
        preemptible=_parsed(annotations.get(PREEMPTIBLE_ANNOTATION), _boolean),
        expected_runtime=_parsed(
            annotations.get(EXPECTED_RUNTIME_ANNOTATION), parse_duration_seconds
        ),
        checkpoint_interval=_parsed(
            annotations.get(CHECKPOINT_INTERVAL_ANNOTATION), parse_duration_seconds
        ),
        checkpoint_on_notice=_parsed(annotations.get(CHECKPOINT_ON_NOTICE_ANNOTATION), _boolean),
        topology=_topology(
            annotations.get(TOPOLOGY_ANNOTATION), annotations.get(TOPOLOGY_LEVEL_ANNOTATION)
        ),
        mixed_models=_parsed(annotations.get(MIXED_MODELS_ANNOTATION), _boolean),
        protected=_protected(annotations),
    )


def _protected(annotations: Mapping[str, Setting[str]]) -> Setting[str] | None:
    plain = {key: setting.value for key, setting in annotations.items()}
    key = protecting_key(plain)
    if key is None:
        return None
    found = annotations[key]
    return Setting(protection(plain) or key, found.context, found.field)


def _parsed(setting: Setting[str] | None, parser: Callable[[str], T]) -> Setting[T] | None:
    if setting is None:
        return None
    value = setting.context.parse(parser, setting.value, setting.field or "")
    return Setting(value, setting.context, setting.field)


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f'expected "true" or "false", got {text!r}')
    return value == "true"


def _topology(
    mode: Setting[str] | None, level: Setting[str] | None
) -> Setting[TopologyRequest] | None:
    if mode is None:
        if level is not None:
            raise level.error(
                f"a topology level needs {TOPOLOGY_ANNOTATION}: required or preferred"
            )
        return None
    modes = [m.value for m in TopologyMode]
    if mode.value not in modes:
        raise mode.error(f"expected {' or '.join(modes)}, got {mode.value!r}")
    key = TOPOLOGY_LEVELS["nvlink"]
    if level is not None:
        key = TOPOLOGY_LEVELS.get(level.value, level.value)
        if not _LABEL_KEY.match(key):
            raise level.error(
                f"expected {', '.join(TOPOLOGY_LEVELS)} or a node label key, got {level.value!r}"
            )
    return Setting(TopologyRequest(TopologyMode(mode.value), key), mode.context, mode.field)
