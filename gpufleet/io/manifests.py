"""YAML documents as Kubernetes-style objects that know where they came from, and typed fields.

Owns reading a (multi-document) YAML or JSON file into mappings, flattening ``kind: List``,
remembering each object's document number and line, and the small helpers that read one field
of an untyped mapping as a typed value or raise :class:`InputError` naming the file, the place,
the object and the field (names, label keys and values checked by :mod:`gpufleet.io.names`).
A file or stream above the manifest size limit (:func:`manifest_limit`, 64 MiB) is refused
before it is read; text must be UTF-8; what YAML cannot read, or Python refuses (a date
2024-13-01), is an InputError. It does not know what a Node, a Pod or a ClusterSpec means: the
readers built on it (``kube.nodes``, ``kube.pods``, ``cluster_spec``) do.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any, BinaryIO, TypeVar

import yaml

from gpufleet.io.errors import InputError, quoted, shorten
from gpufleet.io.names import (
    NameRule,
    label_key_problem,
    label_value_problem,
    name_problem,
    rule_of,
)
from gpufleet.io.quantities import parse_quantity
from gpufleet.io.request_shape import check_node

T = TypeVar("T")
V = TypeVar("V")

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: The most bytes a manifest file may have (far above any real one: the API server takes 3 MiB
#: per object); bigger files are refused before they are read.
MAX_MANIFEST_BYTES = 64 << 20
LIMIT_VARIABLE = "GPUFLEET_MAX_MANIFEST_SIZE"
#: The range of a Kubernetes ``int32`` field (a priority).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: Kinds without a namespace, named ``Kind name`` in errors (others ``Kind namespace/name``),
#: besides those whose name says so (``ClusterRole``, Kueue's ``ClusterQueue``).
CLUSTER_SCOPED = frozenset(
    {
        "Node", "Namespace", "Queue", "PriorityClass", "PersistentVolume", "StorageClass",
        "CustomResourceDefinition", "IngressClass", "RuntimeClass", "ResourceFlavor", "Cohort",
        "WorkloadPriorityClass", "GPUAlertRule", "IdlePolicy", "DeviceClass", "ResourceSlice",
    }
)  # fmt: skip


def cluster_scoped(kind: str) -> bool:
    """Whether objects of ``kind`` live outside namespaces (as far as gpufleet knows)."""
    return kind in CLUSTER_SCOPED or kind.startswith("Cluster")


class Manifest(dict[str, Any]):
    """One object of a file: a plain dict that also remembers its document and line."""

    def __init__(
        self,
        data: Mapping[str, Any],
        document: int,
        line: int,
        item: int | None = None,
        where: str | None = None,
    ) -> None:
        super().__init__(data)
        self.document = document
        self.line = line
        self.item = item
        self.where = where

    @property
    def location(self) -> str:
        """``document 2 (line 14)``, or ``document 1, items[3] (line 40)`` inside a List (or
        ``where``, for an object that came from elsewhere than a file)."""
        if self.where is not None:
            return self.where
        if self.item is None:
            return f"document {self.document} (line {self.line})"
        return f"document {self.document}, items[{self.item}] (line {self.line})"


def manifest_limit() -> int:
    """The most bytes a manifest file (or stdin) may have: :data:`MAX_MANIFEST_BYTES`, or what
    the environment variable ``GPUFLEET_MAX_MANIFEST_SIZE`` says (a quantity: ``256Mi``)."""
    text = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not text:
        return MAX_MANIFEST_BYTES
    try:
        limit = parse_quantity(text)
    except ValueError as error:
        raise InputError(LIMIT_VARIABLE, f"expected a size such as 256Mi: {error}") from None
    if limit < 1:
        raise InputError(LIMIT_VARIABLE, f"expected a size of at least 1 byte, got {quoted(text)}")
    return math.ceil(limit)


def read_limited(handle: BinaryIO, source: str, size: int | None = None) -> bytes:
    """The bytes of an open file or stream, refused when over :func:`manifest_limit`: before
    reading, when ``size`` (a regular file's) says so; else after at most the limit and one
    byte more (a pipe, stdin), so memory never holds more than that."""
    limit = manifest_limit()
    if size is not None and size > limit:
        raise _too_big(source, f"is {_size_text(size)}", limit)
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise _too_big(source, f"has more than {_size_text(limit)}", limit)
    return data


def _too_big(source: str, what: str, limit: int) -> InputError:
    return InputError(
        source,
        f"the input {what}; manifests above {_size_text(limit)} are refused before they are "
        f"read (set {LIMIT_VARIABLE}, e.g. to 256Mi, to allow more)",
    )


def _size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            amount = size / scale
            return f"{amount:.0f} {unit}" if amount.is_integer() else f"{amount:.1f} {unit}"
    return f"{size} bytes"


def decode_text(data: bytes, source: str) -> str:
    """UTF-8 text of ``data`` (a byte-order mark dropped), or an InputError saying where the
    first byte that is not UTF-8 is (a binary file, another encoding)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise InputError(
            source,
            f"not UTF-8 text: byte 0x{data[error.start]:02x} at offset {error.start} cannot be "
            "decoded (is it a binary file, or another encoding?)",
            f"line {line}",
        ) from None


def read_text(path: Path) -> str:
    """The text of a manifest file: size-checked before it is read, and UTF-8."""
    source = str(path)
    try:
        with path.open("rb") as handle:
            stat = os.fstat(handle.fileno())
            size = stat.st_size if S_ISREG(stat.st_mode) else None
            data = read_limited(handle, source, size)
    except OSError as error:
        raise InputError(source, f"cannot open: {error.strerror or error}") from error
    return decode_text(data, source)


def load_manifests(path: str | Path) -> list[Manifest]:
    """Every object of a YAML (or JSON) file, ``kind: List`` flattened, empty documents skipped."""
    path = Path(path)
    return parse_manifests(read_text(path), str(path))


def load_objects(path: str | Path, expected: str) -> list[Manifest]:
    """:func:`load_manifests`, refusing a file that holds no object (empty, or only comments):
    ``FILE: expected EXPECTED, found no objects``, as every reader of scenarios and clusters
    says it."""
    manifests = load_manifests(path)
    if not manifests:
        raise InputError(str(path), f"expected {expected}, found no objects")
    return manifests


def load_documents(path: str | Path) -> list[tuple[int, int, object]]:
    """The non-empty YAML (or JSON) documents of a file that holds something other than
    Kubernetes objects (a scheduling profile): (document number, first line, data) each."""
    path = Path(path)
    return [
        (document, node.start_mark.line + 1, data)
        for document, node, data in _documents(read_text(path), str(path))
        if data is not None
    ]


def parse_manifests(text: str, source: str, untrusted: bool = False) -> list[Manifest]:
    """Like :func:`load_manifests`, for text already read; ``source`` names it in errors.
    ``untrusted`` (a request body): no YAML aliases, and bounded in size and nesting
    (:mod:`gpufleet.io.request_shape`), checked before anything is constructed."""
    manifests: list[Manifest] = []
    for document, node, data in _documents(text, source, untrusted):
        if data is None:
            continue
        line = node.start_mark.line + 1
        where = f"document {document} (line {line})"
        if not isinstance(data, dict):
            raise InputError(
                source,
                "expected a Kubernetes object (a mapping with apiVersion, kind and metadata), "
                f"got {describe(data)}",
                where,
            )
        if data.get("kind") != "List":
            manifests.append(Manifest(data, document, line))
            continue
        items = data.get("items")
        if not isinstance(items, list):
            raise InputError(
                source,
                f"expected a list of objects, got {describe(items)}",
                f"{where}, List",
                "items",
            )
        lines = _item_lines(node)
        for index, item in enumerate(items):
            item_line = lines[index] if index < len(lines) else line
            if not isinstance(item, dict):
                raise InputError(
                    source,
                    f"expected a Kubernetes object (a mapping), got {describe(item)}",
                    f"document {document}, items[{index}] (line {item_line})",
                )
            manifests.append(Manifest(item, document, item_line, index))
    return manifests


def _documents(
    text: str, source: str, untrusted: bool = False
) -> Iterator[tuple[int, yaml.Node, object]]:
    loader = _Loader(text)
    document = 0
    try:
        while True:
            try:
                if not loader.check_node():
                    return
                node = loader.get_node()
                if untrusted and node is not None:
                    check_node(node, source, f"document {document + 1}")
                data = loader.construct_document(node)
            except yaml.MarkedYAMLError as error:
                mark = error.problem_mark or error.context_mark
                place = f"document {document + 1}"
                if mark is not None:
                    place += f" (line {mark.line + 1}, column {mark.column + 1})"
                problem = error.problem or "could not be parsed"
                if error.context:
                    started = error.context_mark
                    since = "" if started is None else f" started on line {started.line + 1}"
                    problem = f"{problem} ({error.context}{since})"
                raise InputError(source, f"not valid YAML: {problem}", place) from error
            except InputError:
                raise
            except yaml.YAMLError as error:
                raise InputError(
                    source, f"not valid YAML: {error}", f"document {document + 1}"
                ) from error
            except (ValueError, OverflowError) as error:
                # A scalar YAML reads as a value Python refuses: a date such as 2024-13-01, an
                # integer of thousands of digits.
                raise InputError(
                    source,
                    f"not valid YAML: a value cannot be read ({error})",
                    f"document {document + 1}",
                ) from None
            document += 1
            if node is not None:
                yield document, node, data
    finally:
        loader.dispose()


def _item_lines(node: yaml.Node) -> list[int]:
    if not isinstance(node, yaml.MappingNode):
        return []
    for key, value in node.value:
        if getattr(key, "value", None) == "items" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


# ------------------------------------------------------------------------------ typed fields
def describe(value: object) -> str:
    """How a found value reads in an error message."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def scalar_text(value: object) -> str | None:
    """A scalar as the string a Kubernetes user meant (YAML reads ``true``/``8`` as non-text)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return None


@dataclass(frozen=True, slots=True)
class Context:
    """Where errors point: the file, and the place and object in it (``location``)."""

    source: str
    location: str | None = None

    def error(self, field: str | None, message: str) -> InputError:
        return InputError(self.source, message, self.location, field)

    def naming(self, what: str) -> Context:
        """The same place, with the object now named (``Pod default/x``)."""
        location = what if self.location is None else f"{self.location}, {what}"
        return Context(self.source, location)

    def mapping(self, value: object, field: str, required: bool = False) -> dict[str, Any]:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            raise self.error(field, f"expected a mapping, got {describe(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(field, f"expected text keys, got key {describe(key)}")
        return value

    def sequence(self, value: object, field: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(field, f"expected a list, got {describe(value)}")
        return value

    def text(self, value: object, field: str, default: str | None = None) -> str:
        if value is None:
            if default is None:
                raise self.error(field, "required, but missing")
            return default
        found = scalar_text(value)
        if found is None:
            raise self.error(field, f"expected text, got {describe(value)}")
        return found

    def integer(
        self, value: object, field: str, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(field, f"expected a whole number, got {describe(value)}")
        if minimum is not None and value < minimum:
            raise self.error(field, f"expected a whole number >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.error(field, f"expected a whole number <= {maximum}, got {value}")
        return value

    def int32(self, value: object, field: str) -> int:
        """A Kubernetes ``int32`` field (a priority): a whole number from -2^31 to 2^31-1."""
        return self.integer(value, field, INT32_MIN, INT32_MAX)

    def string_map(self, value: object, field: str) -> dict[str, str]:
        """Labels, annotations, a nodeSelector: text keys to text values."""
        result: dict[str, str] = {}
        for key, item in self.mapping(value, field).items():
            text = scalar_text(item)
            if text is None:
                raise self.error(f"{field}[{key}]", f"expected text, got {describe(item)}")
            result[key] = text
        return result

    def labels(self, value: object, field: str) -> dict[str, str]:
        """Labels (or a nodeSelector, matchLabels): label keys to label values, checked."""
        labels = self.string_map(value, field)
        for key, text in labels.items():
            where = f"{field}[{shorten(key, 60)}]"
            self.label_key(key, where)
            self.label_value(text, where)
        return labels

    def label_key(self, key: str, field: str) -> str:
        """``key`` when it is a valid label key (a qualified name)."""
        problem = label_key_problem(key)
        if problem is not None:
            raise self.error(field, f"label key {problem}; got {quoted(key)}")
        return key

    def label_value(self, text: str, field: str) -> str:
        """``text`` when it is a valid label value."""
        problem = label_value_problem(text)
        if problem is not None:
            raise self.error(field, f"label value {problem}; got {quoted(text)}")
        return text

    def name(
        self,
        value: object,
        field: str,
        rule: NameRule = NameRule.SUBDOMAIN,
        kind: str | None = None,
    ) -> str:
        """Text that names an object (or a namespace: ``NameRule.LABEL``), checked as
        Kubernetes checks it (``kind`` says why a label-value name is short)."""
        text = self.text(value, field)
        problem = name_problem(text, rule, kind)
        if problem is not None:
            raise self.error(field, f"{problem}; got {quoted(text)}")
        return text

    def parse(self, parser: Callable[[V], T], value: V, field: str) -> T:
        """Run a value parser (quantities, durations), turning its ValueError into InputError."""
        try:
            return parser(value)
        except ValueError as error:
            raise self.error(field, str(error)) from None


def object_name(context: Context, obj: Mapping[str, Any], kind: str) -> tuple[str, str | None]:
    """``metadata.name`` (required) and ``metadata.namespace`` (None when absent), checked as
    Kubernetes checks them (:mod:`gpufleet.io.names`: the name by its kind's rule, the
    namespace a DNS-1123 label)."""
    metadata = context.mapping(obj.get("metadata"), "metadata")
    name = metadata.get("name")
    if name is None or name == "":
        hint = " (generateName is not supported)" if metadata.get("generateName") else ""
        raise context.naming(f"{kind} (unnamed)").error(
            "metadata.name", f"required: expected the object's name, got nothing{hint}"
        )
    text = context.text(name, "metadata.name")
    namespace = metadata.get("namespace")
    namespace_text = None if namespace is None else context.text(namespace, "metadata.namespace")
    shown = shorten(text, 100)
    if not cluster_scoped(kind):
        shown = f"{shorten(namespace_text or 'default', 100)}/{shown}"
    named = context.naming(f"{kind} {shown}")
    named.name(text, "metadata.name", rule_of(kind), kind)
    if namespace_text is not None:
        named.name(namespace_text, "metadata.namespace", NameRule.LABEL)
    return text, namespace_text


def named_object(
    obj: Mapping[str, Any],
    source: str,
    location: str | None,
    kind: str,
    api_versions: Sequence[str],
    namespaced: bool = True,
) -> tuple[Context, str, str]:
    """An object's context (naming it: ``Kind namespace/name``, or ``Kind name`` when not
    ``namespaced``), name and namespace (``default`` when absent), with its apiVersion, when
    given, checked against ``api_versions``."""
    context = Context(source, location)
    name, namespace = object_name(context, obj, kind)
    namespace = namespace or "default"
    context = context.naming(f"{kind} {namespace}/{name}" if namespaced else f"{kind} {name}")
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version not in api_versions:
        raise context.error(
            "apiVersion",
            f"expected {' or '.join(api_versions)} for a {kind}, got {describe(api_version)}",
        )
    return context, name, namespace


YAML_SUFFIXES = (".yaml", ".yml")


def input_files(path: str | Path) -> list[Path]:
    """``path`` itself, or the ``*.yaml`` / ``*.yml`` files of a directory in name order."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in YAML_SUFFIXES)
        if not files:
            raise InputError(
                str(path), "expected *.yaml or *.yml files in the directory, found none"
            )
        return files
    if not path.exists():
        raise InputError(str(path), "no such file or directory")
    return [path]


def manifests_of_kind(
    path: str | Path, kind: str, api_version: str
) -> Iterator[tuple[Manifest, str]]:
    """(manifest, its file) of every object of a file or of a directory's ``*.yaml`` files,
    in order; an object of another kind is an error naming it (``api_version``: the one the
    message suggests)."""
    for file in input_files(path):
        source = str(file)
        for manifest in load_manifests(file):
            found = manifest.get("kind")
            if found != kind:
                raise InputError(
                    source,
                    f"expected kind {kind} (apiVersion {api_version}), got {describe(found)}",
                    manifest.location,
                    "kind",
                )
            yield manifest, source
