"""The Queue and PodGroup CRDs: valid apiextensions.k8s.io/v1 with structural schemas, printer
columns that point at fields the schemas define, every example Queue and PodGroup valid under
its schema, and schema and gpufleet's own readers agreeing on what they accept."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpufleet.io import fields
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.queues import pod_group_from_object, queue_from_object
from tests.deploy.crd_schema import (
    PRESERVE_UNKNOWN,
    json_schema,
    jsonpath_fields,
    resolve,
    structural_errors,
)
from tests.deploy.support import CRDS, DEPLOY_EXAMPLES, REPO_ROOT, Loaded, load_objects

GROUP = "gpufleet.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True, slots=True)
class ExpectedCrd:
    file: str
    scope: str
    plural: str
    singular: str
    kind: str
    short_names: list[str]
    columns: list[tuple[str, str, str]]  # name, type, jsonPath


EXPECTED = [
    ExpectedCrd(
        "queues.gpufleet.dev.yaml",
        "Cluster",
        "queues",
        "queue",
        "Queue",
        ["gfq"],
        [
            ("Parent", "string", ".spec.parent"),
            ("GPU Quota", "string", ".spec.quota.nvidia\\.com/gpu"),
            ("GPU Used", "string", ".status.usage.nvidia\\.com/gpu"),
            ("Borrowed", "string", ".status.borrowed.nvidia\\.com/gpu"),
            ("Pending", "integer", ".status.pending"),
            ("Running", "integer", ".status.running"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ],
    ),
    ExpectedCrd(
        "podgroups.gpufleet.dev.yaml",
        "Namespaced",
        "podgroups",
        "podgroup",
        "PodGroup",
        ["gfpg"],
        [
            ("Min", "integer", ".spec.minMember"),
            ("Placed", "integer", ".status.placed"),
            ("Phase", "string", ".status.phase"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ],
    ),
]
EXPECTED_IDS = [expected.kind for expected in EXPECTED]


def _crd(file: str) -> dict[str, Any]:
    (loaded,) = load_objects(CRDS / file)
    return loaded.obj


def _version(crd: Mapping[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    assert isinstance(version, dict)
    return version


def _schema(kind: str) -> dict[str, Any]:
    expected = next(item for item in EXPECTED if item.kind == kind)
    schema = _version(_crd(expected.file))["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


def test_crds_directory_holds_exactly_the_two_crds() -> None:
    assert sorted(path.name for path in CRDS.iterdir()) == sorted(e.file for e in EXPECTED)


# --------------------------------------------------------------------- (b) CRD structure
@pytest.mark.parametrize("expected", EXPECTED, ids=EXPECTED_IDS)
def test_crd_names_and_scope(expected: ExpectedCrd) -> None:
    crd = _crd(expected.file)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    assert spec["group"] == GROUP
    assert spec["scope"] == expected.scope
    names = spec["names"]
    assert names["plural"] == expected.plural
    assert names["singular"] == expected.singular
    assert names["kind"] == expected.kind
    assert names["listKind"] == f"{expected.kind}List"
    assert names["shortNames"] == expected.short_names
    assert f"{names['plural']}.{GROUP}" == expected.file.removesuffix(".yaml")


@pytest.mark.parametrize("expected", EXPECTED, ids=EXPECTED_IDS)
def test_crd_version_is_served_stored_with_status(expected: ExpectedCrd) -> None:
    version = _version(_crd(expected.file))
    assert version["name"] == VERSION
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("expected", EXPECTED, ids=EXPECTED_IDS)
def test_crd_schema_is_structural(expected: ExpectedCrd) -> None:
    schema = _schema(expected.kind)
    assert structural_errors(schema) == []
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}


def _object_fields(schema: Mapping[str, Any], path: str = "") -> dict[str, set[str]]:
    """The field names of every object node with properties, by path (spec, spec.preemption)."""
    found: dict[str, set[str]] = {}
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        found[path] = set(properties)
        for name, child in properties.items():
            found |= _object_fields(child, f"{path}.{name}" if path else name)
    return found


#: What gpufleet's readers know of each object node (gpufleet/io/fields.py).
READER_FIELDS = {
    "Queue": {
        "": set(fields.OBJECT_FIELDS),
        "spec": set(fields.QUEUE_SPEC_FIELDS),
        "spec.preemption": set(fields.QUEUE_PREEMPTION_FIELDS),
        "spec.preemption.borrowWithinCohort": set(fields.BORROW_WITHIN_COHORT_FIELDS),
        "spec.flavorFungibility": set(fields.FLAVOR_FUNGIBILITY_FIELDS),
        "spec.budget": set(fields.QUEUE_BUDGET_FIELDS),
        "spec.namespaceSelector": set(fields.LABEL_SELECTOR_FIELDS),
    },
    "PodGroup": {"": set(fields.OBJECT_FIELDS), "spec": set(fields.POD_GROUP_SPEC_FIELDS)},
}


@pytest.mark.parametrize("expected", EXPECTED, ids=EXPECTED_IDS)
def test_crd_and_reader_know_the_same_fields(expected: ExpectedCrd) -> None:
    """The schema prunes (the API server) or refuses (kubectl's strict validation) what the
    reader would refuse: no field is known to one and not the other, nothing is kept unknown."""
    schema = _schema(expected.kind)
    assert PRESERVE_UNKNOWN not in repr(schema)
    found = _object_fields(schema)
    mine = {path: names for path, names in found.items() if path.split(".")[0] != "status"}
    assert mine == READER_FIELDS[expected.kind]


@pytest.mark.parametrize("expected", EXPECTED, ids=EXPECTED_IDS)
def test_crd_status_conditions_are_metav1_conditions(expected: ExpectedCrd) -> None:
    conditions = _schema(expected.kind)["properties"]["status"]["properties"]["conditions"]
    item = conditions["items"]
    assert set(item["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


@pytest.mark.parametrize("expected", EXPECTED, ids=EXPECTED_IDS)
def test_printer_columns(expected: ExpectedCrd) -> None:
    columns = _version(_crd(expected.file))["additionalPrinterColumns"]
    assert [(c["name"], c["type"], c["jsonPath"]) for c in columns] == expected.columns


COLUMN_TYPES = {
    "string": {"string", "int-or-string"},
    "integer": {"integer"},
    "number": {"number", "integer"},
    "boolean": {"boolean"},
    "date": {"date"},
}
COLUMN_CASES = [
    (expected.kind, name, kind, path)
    for expected in EXPECTED
    for name, kind, path in expected.columns
]


@pytest.mark.parametrize(
    ("kind", "name", "column_type", "path"),
    COLUMN_CASES,
    ids=[f"{kind}-{name}" for kind, name, _, _ in COLUMN_CASES],
)
def test_printer_column_path_names_a_schema_field_of_its_type(
    kind: str, name: str, column_type: str, path: str
) -> None:
    assert resolve(_schema(kind), path) in COLUMN_TYPES[column_type], name


JSONPATH_CASES = [
    (".spec.parent", ["spec", "parent"]),
    (".spec.quota.nvidia\\.com/gpu", ["spec", "quota", "nvidia.com/gpu"]),
    (".spec.quota.nvidia\\.com/gpu\\.H100", ["spec", "quota", "nvidia.com/gpu.H100"]),
    (".spec.quota.nvidia.com/gpu", ["spec", "quota", "nvidia", "com/gpu"]),
]


@pytest.mark.parametrize(("path", "fields"), JSONPATH_CASES, ids=[p for p, _ in JSONPATH_CASES])
def test_jsonpath_fields_split_as_client_go_does(path: str, fields: list[str]) -> None:
    assert jsonpath_fields(path) == fields


UNRESOLVED = [
    ("Queue", ".spec.quota.nvidia.com/gpu"),  # the dot unescaped: no field "nvidia"."com/gpu"
    ("Queue", ".spec.quotas"),
    ("Queue", ".metadata.labels"),
    ("PodGroup", ".status.phase.x"),
]


@pytest.mark.parametrize(("kind", "path"), UNRESOLVED, ids=[f"{k}{p}" for k, p in UNRESOLVED])
def test_a_path_the_schema_does_not_define_is_caught(kind: str, path: str) -> None:
    with pytest.raises(ValueError, match=r"no field|only metadata"):
        resolve(_schema(kind), path)


STRUCTURAL_BREAKS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "untyped-field",
        lambda s: s["properties"]["spec"]["properties"]["parent"].pop("type"),
        "type",
    ),
    (
        "properties-and-additional",
        lambda s: s["properties"]["spec"].update(additionalProperties={"type": "string"}),
        "mutually exclusive",
    ),
    (
        "array-without-items",
        lambda s: s["properties"]["spec"]["properties"]["namespaces"].pop("items"),
        "needs items",
    ),
    (
        "ref",
        lambda s: s["properties"]["spec"]["properties"]["parent"].update({"$ref": "#/x"}),
        "not allowed",
    ),
    (
        "typed-int-or-string",
        lambda s: s["properties"]["spec"]["properties"]["quota"]["additionalProperties"].update(
            type="string"
        ),
        "int-or-string",
    ),
    (
        "metadata-properties",
        lambda s: s["properties"]["metadata"].update(properties={"labels": {"type": "object"}}),
        "metadata",
    ),
]


@pytest.mark.parametrize(
    ("break_it", "message"),
    [(fn, message) for _, fn, message in STRUCTURAL_BREAKS],
    ids=[name for name, _, _ in STRUCTURAL_BREAKS],
)
def test_structural_check_catches(break_it: Callable[[dict[str, Any]], None], message: str) -> None:
    schema = copy.deepcopy(_schema("Queue"))
    break_it(schema)
    errors = structural_errors(schema)
    assert any(message in error for error in errors), errors


# --------------------------------------------- (c) example objects: schema and readers agree
def _custom_objects() -> list[Loaded]:
    paths = sorted({*DEPLOY_EXAMPLES.glob("*.yaml"), *(REPO_ROOT / "examples").rglob("*.yaml")})
    return [
        item
        for path in paths
        for item in load_objects(path)
        if item.obj.get("apiVersion") == API_VERSION and item.kind in ("Queue", "PodGroup")
    ]


CUSTOM_OBJECTS = _custom_objects()
READERS: dict[str, Callable[[Mapping[str, Any], str], object]] = {
    "Queue": queue_from_object,
    "PodGroup": pod_group_from_object,
}


def _schema_accepts(kind: str, obj: Mapping[str, Any]) -> bool:
    try:
        jsonschema.validate(obj, json_schema(_schema(kind)))
    except jsonschema.ValidationError:
        return False
    return True


def _reader_accepts(kind: str, obj: Mapping[str, Any]) -> bool:
    try:
        READERS[kind](obj, "test")
    except InputError:
        return False
    return True


def test_examples_hold_queues_and_pod_groups() -> None:
    kinds = {(item.path.parent.name, item.kind) for item in CUSTOM_OBJECTS}
    assert {("examples", "Queue"), ("examples", "PodGroup"), ("tenancy", "Queue")} <= kinds


@pytest.mark.parametrize("item", CUSTOM_OBJECTS, ids=lambda item: item.id)
def test_example_is_valid_under_its_crd_schema(item: Loaded) -> None:
    jsonschema.validate(item.obj, json_schema(_schema(item.kind)))


@pytest.mark.parametrize("item", CUSTOM_OBJECTS, ids=lambda item: item.id)
def test_example_is_read_by_gpufleet(item: Loaded) -> None:
    READERS[item.kind](item.obj, str(item.path))


@pytest.mark.parametrize(
    "path",
    sorted(p for p in DEPLOY_EXAMPLES.glob("*.yaml") if p.name != "namespaces.yaml"),
    ids=lambda p: p.name,
)
def test_cluster_scope_matches_the_crds(path: Path) -> None:
    for item in load_objects(path):
        if item.obj.get("apiVersion") != API_VERSION:
            continue
        if item.kind == "Queue":
            assert item.namespace is None, f"{item.id}: a Queue is cluster-scoped"
        else:
            assert item.namespace is not None, f"{item.id}: a PodGroup is namespaced"


QUEUE: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "Queue",
    "metadata": {"name": "team"},
    "spec": {"parent": "org", "quota": {"nvidia.com/gpu": 4}},
}
POD_GROUP: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "PodGroup",
    "metadata": {"name": "gang", "namespace": "ml"},
    "spec": {"minMember": 4},
}


@dataclass(frozen=True, slots=True)
class Agreement:
    """An object changed from a good one, and whether the schema / the reader take it."""

    id: str
    base: dict[str, Any]
    spec: dict[str, Any] | None  # merged into spec; None: no spec at all
    schema: bool
    reader: bool
    why: str = ""


AGREEMENTS = [
    Agreement("queue-good", QUEUE, {}, True, True),
    Agreement(
        "queue-all-fields",
        QUEUE,
        {
            "quota": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "12.5"},
            "borrowingLimit": {"nvidia.com/gpu.H100": 8},
            "lendingLimit": {"nvidia.com/gpu": "500m"},
            "weight": 1.5,
            "namespaces": ["a", "b"],
        },
        True,
        True,
    ),
    Agreement("queue-no-spec", QUEUE, None, True, True, "an empty queue is a valid queue"),
    Agreement("queue-weight-text", QUEUE, {"weight": "2"}, False, False),
    Agreement("queue-weight-bool", QUEUE, {"weight": True}, False, False),
    Agreement(
        "queue-weight-zero",
        QUEUE,
        {"weight": 0},
        True,
        False,
        "the reader (the scheduler) refuses it and reports it in the status",
    ),
    Agreement(
        "queue-parent-number",
        QUEUE,
        {"parent": 3},
        False,
        True,
        "the reader takes a YAML scalar as the text it reads as; the API server wants a string",
    ),
    Agreement("queue-namespaces-text", QUEUE, {"namespaces": "ml"}, False, False),
    Agreement("queue-quota-list", QUEUE, {"quota": [4]}, False, False),
    Agreement("queue-quota-bad-quantity", QUEUE, {"quota": {"cpu": "lots"}}, True, False),
    Agreement(
        "queue-unknown-resource",
        QUEUE,
        {"quota": {"gpus": 4}},
        True,
        False,
        "resource names are checked by the scheduler, reported in the status",
    ),
    Agreement(
        "queue-fraction-unquoted",
        QUEUE,
        {"quota": {"nvidia.com/gpu": 0.5}},
        False,
        True,
        "int-or-string: the API server wants a fractional GPU count quoted ('0.5')",
    ),
    Agreement(
        "queue-misspelt-field",
        QUEUE,
        {"quotas": {"nvidia.com/gpu": 4}},
        False,
        False,
        "both refuse an unknown field (the reader with a did-you-mean)",
    ),
    Agreement(
        "queue-kueue-field",
        QUEUE,
        {"nominalQuota": {"nvidia.com/gpu": 4}},
        False,
        False,
        "Kueue's nominalQuota is spec.quota here",
    ),
    Agreement(
        "queue-misspelt-preemption-field",
        QUEUE,
        {"preemption": {"withinCohort": "Any"}},
        False,
        False,
    ),
    Agreement("group-misspelt-field", POD_GROUP, {"minMembers": 4}, False, False),
    Agreement("group-good", POD_GROUP, {}, True, True),
    Agreement(
        "group-queue-and-priority",
        POD_GROUP,
        {"queue": "team", "priorityClassName": "training-batch"},
        True,
        True,
        "accepted by both; gpufleet 0.1 does not read them",
    ),
    Agreement("group-no-spec", POD_GROUP, None, False, False),
    Agreement("group-no-min-member", POD_GROUP, {"minMember": None}, False, False),
    Agreement("group-min-member-zero", POD_GROUP, {"minMember": 0}, False, False),
    Agreement("group-min-member-text", POD_GROUP, {"minMember": "4"}, False, False),
    Agreement("group-min-member-fraction", POD_GROUP, {"minMember": 2.5}, False, False),
]


def _changed(case: Agreement) -> dict[str, Any]:
    obj = copy.deepcopy(case.base)
    if case.spec is None:
        del obj["spec"]
        return obj
    for key, value in case.spec.items():
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    return obj


@pytest.mark.parametrize("case", AGREEMENTS, ids=[case.id for case in AGREEMENTS])
def test_schema_and_reader_agree(case: Agreement) -> None:
    obj = _changed(case)
    kind = obj["kind"]
    assert (_schema_accepts(kind, obj), _reader_accepts(kind, obj)) == (
        case.schema,
        case.reader,
    ), case.why
