"""Dynamic Resource Allocation's kinds (``resource.k8s.io/v1``) read into the model.

Owns the readers of DeviceClass, ResourceClaim, ResourceClaimTemplate and ResourceSlice
(:func:`device_class_from_object`, :func:`resource_claim_from_object`,
:func:`claim_template_from_object`, :func:`resource_slice_from_object`), of a pod's
``spec.resourceClaims`` and ``status.resourceClaimStatuses`` (:func:`pod_resource_claims`),
and :class:`DraCatalog`, which collects a scenario's DRA objects and checks them together: each
name once, and every request's ``deviceClassName`` a DeviceClass read (the error names the
claim and the field). Unknown fields are refused before these readers run
(:mod:`gpufleet.io.kube.schema`); here the values are checked as the API server validates them:
request names unique, ``exactly`` or ``firstAvailable`` and not both, ``allocationMode``
ExactCount (``count`` 1 to 128) or All, constraints naming the claim's requests, attribute
values of one type, capacities quantities, each device once in its slice, and every CEL
selector compiled (an invalid one is an error at its ``...selectors[i].cel.expression``).

What gpufleet does not do yet is refused, not dropped: consumable capacity requests
(``capacity``), ``distinctAttribute``, binding conditions, per-device node selection. It reads
no files and decides nothing about scheduling.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpufleet.io.errors import quoted
from gpufleet.io.kube.affinity import node_selector_term
from gpufleet.io.manifests import Context, describe, named_object
from gpufleet.io.names import NameRule
from gpufleet.io.quantities import parse_quantity
from gpufleet.model.device_cel import CelError, compile_selector, parse_semver
from gpufleet.model.dra import (
    MAX_COUNT,
    RESOURCE_API_VERSION,
    AllocatedDevice,
    AllocationMode,
    AttributeValue,
    CelSelector,
    ClaimSpec,
    ConsumerRef,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    DeviceTaint,
    DeviceTaintEffect,
    DeviceToleration,
    DraObjects,
    ExactRequest,
    MatchAttribute,
    OpaqueConfig,
    PodResourceClaim,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    qualified,
)
from gpufleet.model.pod import Pod
from gpufleet.model.selectors import NodeSelectorTerm

DEVICE_CLASS = "DeviceClass"
RESOURCE_CLAIM = "ResourceClaim"
RESOURCE_CLAIM_TEMPLATE = "ResourceClaimTemplate"
RESOURCE_SLICE = "ResourceSlice"
DRA_KINDS = (DEVICE_CLASS, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, RESOURCE_SLICE)
API_VERSIONS = (RESOURCE_API_VERSION,)
_NOT_YET = "not supported by gpufleet yet"
_ATTRIBUTE_TYPES = ("int", "bool", "string", "version")


# ---------------------------------------------------------------------------- DeviceClass
def device_class_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> DeviceClass:
    context, name, _ = named_object(obj, source, location, DEVICE_CLASS, API_VERSIONS, False)
    spec = context.mapping(obj.get("spec"), "spec")
    config = tuple(
        _opaque(context, context.mapping(item, f"spec.config[{i}]"), f"spec.config[{i}]", ())
        for i, item in enumerate(context.sequence(spec.get("config"), "spec.config"))
    )
    extended = spec.get("extendedResourceName")
    return DeviceClass(
        name,
        _selectors(context, spec.get("selectors"), "spec.selectors"),
        config,
        None if extended is None else context.text(extended, "spec.extendedResourceName"),
    )


# ------------------------------------------------------------------- claims and templates
def resource_claim_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> ResourceClaim:
    context, name, namespace = named_object(obj, source, location, RESOURCE_CLAIM, API_VERSIONS)
    spec = claim_spec(context, obj.get("spec"), "spec")
    status = context.mapping(obj.get("status"), "status")
    allocation = context.mapping(status.get("allocation"), "status.allocation")
    devices = context.mapping(allocation.get("devices"), "status.allocation.devices")
    results = context.sequence(devices.get("results"), "status.allocation.devices.results")
    allocated = tuple(
        _allocated(context, item, f"status.allocation.devices.results[{i}]")
        for i, item in enumerate(results)
    )
    selector = _node_selector(context, allocation.get("nodeSelector"), "status.allocation")
    reserved = tuple(
        _consumer(context, item, f"status.reservedFor[{i}]")
        for i, item in enumerate(context.sequence(status.get("reservedFor"), "status.reservedFor"))
    )
    return ResourceClaim(name, namespace, spec, allocated, selector, reserved)


def claim_template_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> ResourceClaimTemplate:
    context, name, namespace = named_object(
        obj, source, location, RESOURCE_CLAIM_TEMPLATE, API_VERSIONS
    )
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    metadata = context.mapping(spec.get("metadata"), "spec.metadata")
    labels = context.labels(metadata.get("labels"), "spec.metadata.labels")
    return ResourceClaimTemplate(
        name, namespace, claim_spec(context, spec.get("spec"), "spec.spec"), labels
    )


def claim_spec(context: Context, value: object, path: str) -> ClaimSpec:
    """A ResourceClaimSpec at ``path``: its requests, constraints and configuration."""
    spec = context.mapping(value, path)
    devices = context.mapping(spec.get("devices"), f"{path}.devices")
    path = f"{path}.devices"
    requests: list[DeviceRequest] = []
    names: set[str] = set()
    for i, item in enumerate(context.sequence(devices.get("requests"), f"{path}.requests")):
        request = _request(context, item, f"{path}.requests[{i}]")
        if request.name in names:
            raise context.error(
                f"{path}.requests[{i}].name", f"request name {quoted(request.name)} is used twice"
            )
        names.add(request.name)
        requests.append(request)
    known = names | {name for r in requests for name, _ in r.alternatives}
    constraints = tuple(
        _constraint(context, item, f"{path}.constraints[{i}]", known)
        for i, item in enumerate(
            context.sequence(devices.get("constraints"), f"{path}.constraints")
        )
    )
    config = tuple(
        _claim_config(context, item, f"{path}.config[{i}]", known)
        for i, item in enumerate(context.sequence(devices.get("config"), f"{path}.config"))
    )
    return ClaimSpec(tuple(requests), constraints, config)


def _request(context: Context, value: object, path: str) -> DeviceRequest:
    request = context.mapping(value, path)
    name = context.name(request.get("name"), f"{path}.name", NameRule.LABEL)
    exactly, first = request.get("exactly"), request.get("firstAvailable")
    if (exactly is None) == (first is None):
        raise context.error(path, "expected exactly one of exactly and firstAvailable")
    if exactly is not None:
        return DeviceRequest(name, exactly=_exact(context, exactly, f"{path}.exactly"))
    alternatives: list[tuple[str, ExactRequest]] = []
    items = context.sequence(first, f"{path}.firstAvailable")
    if not items:
        raise context.error(f"{path}.firstAvailable", "expected at least one sub-request")
    for i, item in enumerate(items):
        where = f"{path}.firstAvailable[{i}]"
        sub = context.name(
            context.mapping(item, where).get("name"), f"{where}.name", NameRule.LABEL
        )
        if sub in dict(alternatives):
            raise context.error(f"{where}.name", f"sub-request name {quoted(sub)} is used twice")
        alternatives.append((sub, _exact(context, item, where)))
    return DeviceRequest(name, first_available=tuple(alternatives))


def _exact(context: Context, value: object, path: str) -> ExactRequest:
    exact = context.mapping(value, path)
    if exact.get("capacity") is not None:
        raise context.error(f"{path}.capacity", f"consumable capacity requests are {_NOT_YET}")
    device_class = context.name(exact.get("deviceClassName"), f"{path}.deviceClassName")
    mode_text = context.text(exact.get("allocationMode"), f"{path}.allocationMode", "ExactCount")
    try:
        mode = AllocationMode(mode_text)
    except ValueError:
        raise context.error(
            f"{path}.allocationMode", f"expected ExactCount or All, got {quoted(mode_text)}"
        ) from None
    count = 1
    if exact.get("count") is not None:
        if mode is AllocationMode.ALL:
            raise context.error(f"{path}.count", "must not be given with allocationMode All")
        count = context.integer(exact["count"], f"{path}.count", 1, MAX_COUNT)
    admin = exact.get("adminAccess", False)
    if not isinstance(admin, bool):
        raise context.error(f"{path}.adminAccess", f"expected true or false, got {describe(admin)}")
    tolerations = tuple(
        _toleration(context, item, f"{path}.tolerations[{i}]")
        for i, item in enumerate(context.sequence(exact.get("tolerations"), f"{path}.tolerations"))
    )
    selectors = _selectors(context, exact.get("selectors"), f"{path}.selectors")
    return ExactRequest(device_class, selectors, mode, count, admin, tolerations)


def _selectors(context: Context, value: object, path: str) -> tuple[CelSelector, ...]:
    """CEL selectors, each compiled here so that an invalid one is refused where it is."""
    selectors: list[CelSelector] = []
    for i, item in enumerate(context.sequence(value, path)):
        where = f"{path}[{i}].cel"
        cel = context.mapping(context.mapping(item, f"{path}[{i}]").get("cel"), where, True)
        expression = context.text(cel.get("expression"), f"{where}.expression")
        try:
            compile_selector(expression)
        except CelError as error:
            raise context.error(f"{where}.expression", str(error)) from None
        selectors.append(CelSelector(expression, f"{where}.expression"))
    return tuple(selectors)


def _toleration(context: Context, value: object, path: str) -> DeviceToleration:
    item = context.mapping(value, path)
    operator = context.text(item.get("operator"), f"{path}.operator", "Equal")
    if operator not in ("Equal", "Exists"):
        raise context.error(f"{path}.operator", f"expected Equal or Exists, got {quoted(operator)}")
    key = None if item.get("key") is None else context.text(item["key"], f"{path}.key")
    value_text = context.text(item.get("value"), f"{path}.value", "")
    if operator == "Exists" and value_text:
        raise context.error(f"{path}.value", "must be empty with operator Exists")
    if key is None and operator != "Exists":
        raise context.error(f"{path}.key", "required unless operator is Exists")
    effect = None if item.get("effect") is None else _effect(context, item["effect"], path)
    return DeviceToleration(key, operator, value_text, effect)


def _effect(context: Context, value: object, path: str) -> DeviceTaintEffect:
    text = context.text(value, f"{path}.effect")
    try:
        return DeviceTaintEffect(text)
    except ValueError:
        known = ", ".join(effect.value for effect in DeviceTaintEffect)
        raise context.error(
            f"{path}.effect", f"expected one of {known}, got {quoted(text)}"
        ) from None


def _constraint(context: Context, value: object, path: str, known: set[str]) -> MatchAttribute:
    item = context.mapping(value, path)
    if item.get("distinctAttribute") is not None:
        raise context.error(f"{path}.distinctAttribute", f"distinctAttribute is {_NOT_YET}")
    attribute = context.text(item.get("matchAttribute"), f"{path}.matchAttribute")
    if "/" not in attribute:
        raise context.error(
            f"{path}.matchAttribute",
            f"expected a fully qualified attribute name (domain/name), got {quoted(attribute)}",
        )
    requests = _request_names(context, item.get("requests"), f"{path}.requests", known)
    return MatchAttribute(attribute, requests)


def _claim_config(context: Context, value: object, path: str, known: set[str]) -> OpaqueConfig:
    item = context.mapping(value, path)
    requests = _request_names(context, item.get("requests"), f"{path}.requests", known)
    return _opaque(context, item, path, requests)


def _opaque(
    context: Context, item: Mapping[str, Any], path: str, requests: tuple[str, ...]
) -> OpaqueConfig:
    opaque = context.mapping(item.get("opaque"), f"{path}.opaque", required=True)
    driver = context.name(opaque.get("driver"), f"{path}.opaque.driver")
    parameters = context.mapping(opaque.get("parameters"), f"{path}.opaque.parameters", True)
    return OpaqueConfig(driver, parameters, requests)


def _request_names(context: Context, value: object, path: str, known: set[str]) -> tuple[str, ...]:
    names: list[str] = []
    for i, item in enumerate(context.sequence(value, path)):
        name = context.text(item, f"{path}[{i}]")
        if name not in known:
            listing = ", ".join(sorted(known)) or "none"
            raise context.error(
                f"{path}[{i}]", f"no request {quoted(name)} in this claim (requests: {listing})"
            )
        names.append(name)
    return tuple(names)


def _allocated(context: Context, value: object, path: str) -> AllocatedDevice:
    item = context.mapping(value, path)
    device = DeviceId(
        context.text(item.get("driver"), f"{path}.driver"),
        context.text(item.get("pool"), f"{path}.pool"),
        context.text(item.get("device"), f"{path}.device"),
    )
    admin = item.get("adminAccess") is True
    return AllocatedDevice(context.text(item.get("request"), f"{path}.request"), device, admin)


def _consumer(context: Context, value: object, path: str) -> ConsumerRef:
    item = context.mapping(value, path)
    return ConsumerRef(
        context.text(item.get("resource"), f"{path}.resource"),
        context.text(item.get("name"), f"{path}.name"),
        context.text(item.get("uid"), f"{path}.uid"),
        context.text(item.get("apiGroup"), f"{path}.apiGroup", ""),
    )


def _node_selector(context: Context, value: object, path: str) -> tuple[NodeSelectorTerm, ...]:
    selector = context.mapping(value, f"{path}.nodeSelector")
    terms = context.sequence(selector.get("nodeSelectorTerms"), f"{path}.nodeSelector")
    return tuple(
        node_selector_term(context, term, f"{path}.nodeSelector.nodeSelectorTerms[{t}]")
        for t, term in enumerate(terms)
    )


# -------------------------------------------------------------------------- ResourceSlice
def resource_slice_from_object(
    obj: Mapping[str, Any], source: str, location: str | None = None
) -> ResourceSlice:
    """A ResourceSlice; a device named twice in it is an error at the second."""
    context, name, _ = named_object(obj, source, location, RESOURCE_SLICE, API_VERSIONS, False)
    spec = context.mapping(obj.get("spec"), "spec", required=True)
    driver = context.name(spec.get("driver"), "spec.driver")
    pool = context.mapping(spec.get("pool"), "spec.pool", required=True)
    pool_name = context.text(pool.get("name"), "spec.pool.name")
    generation = context.integer(pool.get("generation", 0), "spec.pool.generation", 0)
    count = context.integer(pool.get("resourceSliceCount", 1), "spec.pool.resourceSliceCount", 1)
    if spec.get("perDeviceNodeSelection"):
        raise context.error(
            "spec.perDeviceNodeSelection", f"per-device node selection is {_NOT_YET}"
        )
    node_name = (
        None if spec.get("nodeName") is None else context.text(spec["nodeName"], "spec.nodeName")
    )
    all_nodes = spec.get("allNodes") is True
    selector = _node_selector(context, spec.get("nodeSelector"), "spec")
    if sum((node_name is not None, all_nodes, bool(selector))) != 1:
        raise context.error(
            "spec", "expected exactly one of nodeName, nodeSelector and allNodes: true"
        )
    counter_sets: list[CounterSet] = []
    for i, item in enumerate(context.sequence(spec.get("sharedCounters"), "spec.sharedCounters")):
        where = f"spec.sharedCounters[{i}]"
        entry = context.mapping(item, where)
        counters = _counters(context, entry.get("counters"), f"{where}.counters")
        counter_sets.append(
            CounterSet(context.name(entry.get("name"), f"{where}.name", NameRule.LABEL), counters)
        )
    sets = {counter_set.name for counter_set in counter_sets}
    devices: list[Device] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(context.sequence(spec.get("devices"), "spec.devices")):
        device = _device(context, item, f"spec.devices[{i}]", driver, pool_name, sets)
        if device.name in seen:
            raise context.error(
                f"spec.devices[{i}].name",
                f"device {quoted(device.name)} is listed twice (first at spec.devices"
                f"[{seen[device.name]}])",
            )
        seen[device.name] = i
        devices.append(device)
    return ResourceSlice(
        name, driver, pool_name, generation, count, tuple(devices), node_name, all_nodes,
        selector, tuple(counter_sets),
    )  # fmt: skip


def _device(
    context: Context, value: object, path: str, driver: str, pool: str, sets: set[str]
) -> Device:
    item = context.mapping(value, path)
    for unsupported in ("nodeName", "nodeSelector", "allNodes", "bindsToNode",
                        "bindingConditions", "bindingFailureConditions"):  # fmt: skip
        if item.get(unsupported):
            raise context.error(f"{path}.{unsupported}", f"{unsupported} is {_NOT_YET}")
    name = context.name(item.get("name"), f"{path}.name", NameRule.LABEL)
    attributes: dict[str, AttributeValue] = {}
    for key, raw in context.mapping(item.get("attributes"), f"{path}.attributes").items():
        attributes[qualified(key, driver)] = _attribute(context, raw, f"{path}.attributes[{key}]")
    capacity: dict[str, Fraction] = {}
    for key, raw in context.mapping(item.get("capacity"), f"{path}.capacity").items():
        where = f"{path}.capacity[{key}]"
        entry = context.mapping(raw, where, required=True)
        if entry.get("requestPolicy") is not None:
            raise context.error(
                f"{where}.requestPolicy", f"capacity request policies are {_NOT_YET}"
            )
        capacity[qualified(key, driver)] = context.parse(
            parse_quantity, entry.get("value"), f"{where}.value"
        )
    taints = tuple(
        _taint(context, taint, f"{path}.taints[{t}]")
        for t, taint in enumerate(context.sequence(item.get("taints"), f"{path}.taints"))
    )
    consumes: list[CounterConsumption] = []
    for c, raw in enumerate(
        context.sequence(item.get("consumesCounters"), f"{path}.consumesCounters")
    ):
        where = f"{path}.consumesCounters[{c}]"
        entry = context.mapping(raw, where)
        counter_set = context.text(entry.get("counterSet"), f"{where}.counterSet")
        if counter_set not in sets:
            raise context.error(
                f"{where}.counterSet", f"no counter set {quoted(counter_set)} in this slice"
            )
        consumes.append(
            CounterConsumption(
                counter_set, _counters(context, entry.get("counters"), f"{where}.counters")
            )
        )
    shareable = item.get("allowMultipleAllocations") is True
    return Device(name, driver, pool, attributes, capacity, taints, tuple(consumes), shareable)


def _attribute(context: Context, value: object, path: str) -> AttributeValue:
    entry = context.mapping(value, path, required=True)
    given = [key for key in _ATTRIBUTE_TYPES if entry.get(key) is not None]
    if len(given) != 1:
        raise context.error(path, f"expected exactly one of {', '.join(_ATTRIBUTE_TYPES)}")
    (kind,) = given
    raw = entry[kind]
    if kind == "int":
        return context.integer(raw, f"{path}.int")
    if kind == "bool":
        if not isinstance(raw, bool):
            raise context.error(f"{path}.bool", f"expected true or false, got {describe(raw)}")
        return raw
    text = context.text(raw, f"{path}.{kind}")
    if kind == "version":
        try:
            return parse_semver(text)
        except CelError as error:
            raise context.error(f"{path}.version", str(error)) from None
    return text


def _counters(context: Context, value: object, path: str) -> tuple[tuple[str, Fraction], ...]:
    counters: list[tuple[str, Fraction]] = []
    for key, raw in context.mapping(value, path).items():
        entry = context.mapping(raw, f"{path}[{key}]", required=True)
        amount = context.parse(parse_quantity, entry.get("value"), f"{path}[{key}].value")
        counters.append((key, amount))
    return tuple(sorted(counters))


def _taint(context: Context, value: object, path: str) -> DeviceTaint:
    item = context.mapping(value, path)
    key = context.text(item.get("key"), f"{path}.key")
    effect = _effect(context, item.get("effect"), path)
    return DeviceTaint(key, context.text(item.get("value"), f"{path}.value", ""), effect)


# ------------------------------------------------------------------------------------ pods
def pod_resource_claims(
    context: Context, spec: Mapping[str, Any], status: Mapping[str, Any], path: str
) -> tuple[PodResourceClaim, ...]:
    """A pod's ``spec.resourceClaims`` (at ``path``), with the generated claims' names its
    ``status.resourceClaimStatuses`` gives."""
    generated: dict[str, str | None] = {}
    statuses = context.sequence(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses")
    for i, item in enumerate(statuses):
        where = f"status.resourceClaimStatuses[{i}]"
        entry = context.mapping(item, where)
        claim = entry.get("resourceClaimName")
        generated[context.text(entry.get("name"), f"{where}.name")] = (
            None if claim is None else context.text(claim, f"{where}.resourceClaimName")
        )
    claims: list[PodResourceClaim] = []
    for i, item in enumerate(
        context.sequence(spec.get("resourceClaims"), f"{path}.resourceClaims")
    ):
        where = f"{path}.resourceClaims[{i}]"
        entry = context.mapping(item, where)
        name = context.name(entry.get("name"), f"{where}.name", NameRule.LABEL)
        if any(claim.name == name for claim in claims):
            raise context.error(f"{where}.name", f"claim name {quoted(name)} is used twice")
        by_name, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if (by_name is None) == (template is None):
            raise context.error(
                where, "expected exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        claims.append(
            PodResourceClaim(
                name,
                None if by_name is None else context.name(by_name, f"{where}.resourceClaimName"),
                None if template is None
                else context.name(template, f"{where}.resourceClaimTemplateName"),
                generated.get(name),
            )
        )  # fmt: skip
    return tuple(claims)


# ----------------------------------------------------------------------------- the catalog
@dataclass
class DraCatalog:
    """A scenario's DRA objects, each name once, checked together by :meth:`check`."""

    classes: dict[str, tuple[DeviceClass, Context]] = field(default_factory=dict)
    claims: dict[str, tuple[ResourceClaim, Context]] = field(default_factory=dict)
    templates: dict[str, tuple[ResourceClaimTemplate, Context]] = field(default_factory=dict)
    slices: dict[str, tuple[ResourceSlice, Context]] = field(default_factory=dict)

    def add(self, obj: Mapping[str, Any], source: str, location: str | None) -> None:
        """One DRA object (its kind one of :data:`DRA_KINDS`)."""
        kind = obj.get("kind")
        context = Context(source, location)
        if kind == DEVICE_CLASS:
            device_class = device_class_from_object(obj, source, location)
            _once(self.classes, device_class.name, device_class, context, kind)
        elif kind == RESOURCE_CLAIM:
            claim = resource_claim_from_object(obj, source, location)
            _once(self.claims, claim.key, claim, context, kind)
        elif kind == RESOURCE_CLAIM_TEMPLATE:
            template = claim_template_from_object(obj, source, location)
            _once(self.templates, template.key, template, context, kind)
        else:
            resource_slice = resource_slice_from_object(obj, source, location)
            _once(self.slices, resource_slice.name, resource_slice, context, str(kind))

    def copy(self) -> DraCatalog:
        return DraCatalog(
            dict(self.classes), dict(self.claims), dict(self.templates), dict(self.slices)
        )

    def objects(self) -> DraObjects:
        """What was read, checked (:meth:`check`)."""
        self.check()
        return DraObjects(
            {name: value for name, (value, _) in self.classes.items()},
            {key: value for key, (value, _) in self.claims.items()},
            {key: value for key, (value, _) in self.templates.items()},
            tuple(value for value, _ in self.slices.values()),
        )

    def check_pod_claims(self, context: Context, pod: Pod, spec_path: str | None) -> None:
        """Each claim ``pod`` names is a ResourceClaim of its namespace read, and each template
        a ResourceClaimTemplate (``spec_path``: where its pod spec is, if one place)."""
        for i, claim in enumerate(pod.resource_claims):
            where = f"{spec_path}.resourceClaims[{i}]" if spec_path else None
            if claim.resource_claim is not None:
                key, kind, what = claim.resource_claim, RESOURCE_CLAIM, "resourceClaimName"
                known: Mapping[str, object] = self.claims
            else:
                key, kind, what = (
                    claim.template or "",
                    RESOURCE_CLAIM_TEMPLATE,
                    ("resourceClaimTemplateName"),
                )
                known = self.templates
            if f"{pod.namespace}/{key}" not in known:
                raise context.error(
                    f"{where}.{what}" if where else None,
                    f"pod {pod.key} names {kind} {quoted(key)} of claim {quoted(claim.name)}, "
                    f"which is not defined in namespace {pod.namespace}",
                )

    def check(self) -> None:
        """Every request's device class is a DeviceClass read; a device is named once in its
        pool, whichever of the pool's slices lists it."""
        first: dict[DeviceId, str] = {}
        for name, (resource_slice, context) in self.slices.items():
            for i, device in enumerate(resource_slice.devices):
                seen = first.setdefault(device.id, name)
                if seen != name:
                    raise context.naming(f"{RESOURCE_SLICE} {name}").error(
                        f"spec.devices[{i}].name",
                        f"device {quoted(device.name)} of pool {quoted(device.pool)} is listed "
                        f"by ResourceSlice {seen} too",
                    )
        for key, (claim, context) in self.claims.items():
            self._check_classes(claim.spec, context.naming(f"{RESOURCE_CLAIM} {key}"), "spec")
        for key, (template, context) in self.templates.items():
            named = context.naming(f"{RESOURCE_CLAIM_TEMPLATE} {key}")
            self._check_classes(template.spec, named, "spec.spec")

    def _check_classes(self, spec: ClaimSpec, context: Context, path: str) -> None:
        for i, request in enumerate(spec.requests):
            where = f"{path}.devices.requests[{i}]"
            if request.exactly is not None:
                self._check_class(request.exactly, context, f"{where}.exactly")
            for j, (_, exact) in enumerate(request.first_available):
                self._check_class(exact, context, f"{where}.firstAvailable[{j}]")

    def _check_class(self, exact: ExactRequest, context: Context, path: str) -> None:
        if exact.device_class in self.classes:
            return
        known = sorted(self.classes)
        close = difflib.get_close_matches(exact.device_class, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = f"defined: {', '.join(known)}" if known else "none are defined"
        raise context.error(
            f"{path}.deviceClassName",
            f"device class {quoted(exact.device_class)} does not exist ({listing}){hint}",
        )


def _once(
    seen: dict[str, tuple[Any, Context]], key: str, value: object, context: Context, kind: str
) -> None:
    if key in seen:
        first = seen[key][1]
        raise context.naming(f"{kind} {key}").error(
            "metadata.name", f"{kind} {key!r} appears twice (first in {first.source}:"
            f"{first.location})"
        )  # fmt: skip
    seen[key] = (value, context)
