"""A renderer for the subset of Helm's Go-template language that deploy/helm/gpufleet uses.

No ``helm`` binary can be installed on the development machines (PyPI, npm and Debian carry
none), so the chart is checked by rendering it here. The subset, and nothing more, is:

* actions ``{{ pipeline }}`` with trim markers ``{{-`` / ``-}}`` and comments ``{{/* */}}``;
* ``{{ if pipeline }}`` ... ``{{ else }}`` / ``{{ else if pipeline }}`` ... ``{{ end }}`` and
  ``{{ define "name" }}`` ... ``{{ end }}``;
* operands: ``.`` and field chains (``.Values.a.b``, ``.Release.Namespace``, ``.Chart.Name``),
  ``.Files.Get "path"``, string and integer literals;
* functions: ``include``, ``toYaml``, ``nindent``, ``indent``, ``quote``, ``default``,
  ``randAlphaNum``, ``b64enc`` and ``lookup`` (which finds nothing, as ``helm template`` without
  a cluster);
* pipelines ``a | f x``, which pass ``a`` as the last argument of ``f``, as Go does.

Anything else (``range``, ``with``, variables, parentheses, other functions) is an error, as is
a missing value key (Helm would render it empty): the chart's templates keep to the subset on
purpose (see the comment in its ``_helpers.tpl``). ``Release.Service`` is ``Helm``; manifests
are split on ``---`` lines as Helm splits them.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class TemplateError(ValueError):
    """A template outside the supported subset, or one that does not render."""


# ------------------------------------------------------------------------------------ lexing
@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Action:
    body: str  # the pipeline or keyword, trimmed
    trim_left: bool
    trim_right: bool
    comment: bool = False


_WS = "[ \t\r\n]"
_ACTION = re.compile(
    rf"\{{\{{(?P<cl>-{_WS})?/\*.*?\*/(?P<cr>{_WS}-)?\}}\}}"
    rf"|\{{\{{(?P<l>-{_WS})?(?P<body>.*?)(?P<r>{_WS}-)?\}}\}}",
    re.DOTALL,
)


def _lex(source: str) -> list[_Text | _Action]:
    tokens: list[_Text | _Action] = []
    position = 0
    for match in _ACTION.finditer(source):
        tokens.append(_Text(source[position : match.start()]))
        if match["body"] is None:
            tokens.append(_Action("", bool(match["cl"]), bool(match["cr"]), comment=True))
        else:
            tokens.append(_Action(match["body"].strip(), bool(match["l"]), bool(match["r"])))
        position = match.end()
    tokens.append(_Text(source[position:]))
    # Trim markers eat all whitespace on their side, as in text/template.
    trimmed: list[_Text | _Action] = []
    for i, token in enumerate(tokens):
        if isinstance(token, _Text):
            text = token.text
            before = tokens[i - 1] if i > 0 else None
            after = tokens[i + 1] if i + 1 < len(tokens) else None
            if isinstance(before, _Action) and before.trim_right:
                text = text.lstrip(" \t\r\n")
            if isinstance(after, _Action) and after.trim_left:
                text = text.rstrip(" \t\r\n")
            trimmed.append(_Text(text))
        else:
            trimmed.append(token)
    return trimmed


# ----------------------------------------------------------------------------------- parsing
@dataclass(slots=True)
class _If:
    condition: str
    then: list[_Node] = field(default_factory=list)
    otherwise: list[_Node] = field(default_factory=list)


_Node = _Text | _Action | _If


@dataclass(slots=True)
class _Parser:
    tokens: list[_Text | _Action]
    defines: dict[str, list[_Node]]
    position: int = 0

    def parse(self) -> list[_Node]:
        nodes, stop = self._block(top=True)
        if stop is not None:
            raise TemplateError(f"unexpected {{{{ {stop} }}}}")
        return nodes

    def _block(self, top: bool = False) -> tuple[list[_Node], str | None]:
        """Nodes up to an ``end`` or ``else`` (returned as the stop keyword)."""
        nodes: list[_Node] = []
        while self.position < len(self.tokens):
            token = self.tokens[self.position]
            self.position += 1
            if isinstance(token, _Text):
                nodes.append(token)
                continue
            if token.comment:
                continue
            keyword = token.body.split(maxsplit=1)[0] if token.body else ""
            rest = token.body[len(keyword) :].strip()
            if keyword in ("end", "else"):
                return nodes, token.body
            if keyword == "if":
                nodes.append(self._if(rest))
            elif keyword == "define":
                if not top:
                    raise TemplateError("define is only allowed at the top level")
                name = _string_literal(rest)
                body, stop = self._block()
                if stop != "end":
                    raise TemplateError(f"define {name!r} has no end")
                self.defines[name] = body
            elif keyword in ("range", "with", "template", "block", "break", "continue"):
                raise TemplateError(f"{keyword} is outside the supported subset")
            else:
                nodes.append(token)
        if not top:
            raise TemplateError("unterminated block: missing {{ end }}")
        return nodes, None

    def _if(self, condition: str) -> _If:
        node = _If(condition)
        node.then, stop = self._block()
        if stop is None:
            raise TemplateError("if without end")
        if stop == "else":
            node.otherwise, stop = self._block()
        elif stop.startswith("else if "):
            # else if X ... end: a nested if that shares this if's end.
            self.position -= 1
            self.tokens[self.position] = _Action(stop[len("else ") :], False, False)
            node.otherwise = [self._nested_if()]
            return node
        if stop != "end":
            raise TemplateError(f"unexpected {{{{ {stop} }}}} in if")
        return node

    def _nested_if(self) -> _If:
        token = self.tokens[self.position]
        assert isinstance(token, _Action)
        self.position += 1
        return self._if(token.body[len("if ") :].strip())


def _string_literal(text: str) -> str:
    if not (len(text) >= 2 and text[0] == text[-1] == '"'):
        raise TemplateError(f"expected a quoted name, got {text!r}")
    value = json.loads(text)
    assert isinstance(value, str)
    return value


# -------------------------------------------------------------------------------- evaluation
_TOKEN = re.compile(r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<word>[^\s"|()]+)|(?P<bad>[()]))')


def _words(command: str) -> list[str]:
    words: list[str] = []
    position = 0
    command = command.strip()
    while position < len(command):
        match = _TOKEN.match(command, position)
        if match is None or match["bad"] is not None:
            raise TemplateError(f"unsupported syntax in {command!r}")
        words.append(match["string"] or match["word"])
        position = match.end()
    return words


def _split_pipeline(pipeline: str) -> list[str]:
    parts: list[str] = []
    current = ""
    quoted = False
    escaped = False
    for char in pipeline:
        if quoted:
            current += char
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
            current += char
        elif char == "|":
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    if any(not part.strip() for part in parts):
        raise TemplateError(f"empty command in pipeline {pipeline!r}")
    return parts


def truthy(value: object) -> bool:
    """Go template truth: false, 0, nil and empty strings, maps and lists are false."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float | str | list | dict | tuple):
        return bool(value)
    return True


def to_yaml(value: object) -> str:
    """Helm's toYaml: block-style YAML without the trailing newline."""
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n")


def printed(value: object) -> str:
    """How an action prints a value (Go's fmt for the scalars a chart prints)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise TemplateError(f"cannot print {type(value).__name__} {value!r}: use toYaml")


def _indent(count: object, text: object) -> str:
    if not isinstance(count, int) or isinstance(count, bool):
        raise TemplateError(f"indent needs a number of spaces, got {count!r}")
    pad = " " * count
    return "\n".join(pad + line for line in printed(text).split("\n"))


def _lookup_nothing(api_version: object, kind: object, namespace: object, name: object) -> object:
    if not all(isinstance(part, str) for part in (api_version, kind, namespace, name)):
        raise TemplateError("lookup needs four strings: apiVersion, kind, namespace, name")
    return {}


def _rand_alpha_num(count: object) -> str:
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise TemplateError(f"randAlphaNum needs a positive number, got {count!r}")
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(count))


@dataclass(frozen=True, slots=True)
class _Files:
    root: Path

    def get(self, path: str) -> str:
        file = self.root / path
        if not file.is_file():
            raise TemplateError(f".Files.Get: no file {path!r} in the chart")
        return file.read_text()


@dataclass(slots=True)
class _Renderer:
    defines: dict[str, list[_Node]]
    depth: int = 0

    def render(self, nodes: list[_Node], dot: object) -> str:
        out: list[str] = []
        for node in nodes:
            if isinstance(node, _Text):
                out.append(node.text)
            elif isinstance(node, _If):
                branch = node.then if truthy(self.pipeline(node.condition, dot)) else node.otherwise
                out.append(self.render(branch, dot))
            else:
                out.append(printed(self.pipeline(node.body, dot)))
        return "".join(out)

    def pipeline(self, pipeline: str, dot: object) -> object:
        value: object = None
        for i, command in enumerate(_split_pipeline(pipeline)):
            value = self.command(_words(command), dot, piped=(value,) if i else ())
        return value

    def command(self, words: list[str], dot: object, piped: tuple[object, ...]) -> object:
        head, args = words[0], words[1:]
        if any(word.startswith("$") for word in words):
            raise TemplateError(f"variables are outside the supported subset: {' '.join(words)}")
        functions: dict[str, Callable[..., object]] = {
            "include": self.include,
            "toYaml": to_yaml,
            "nindent": lambda count, text: "\n" + _indent(count, text),
            "indent": _indent,
            "quote": lambda *values: " ".join(
                json.dumps(printed(v), ensure_ascii=False) for v in values
            ),
            "default": lambda fallback, value=None: value if truthy(value) else fallback,
            # As ``helm template`` renders it: no cluster, so nothing is found.
            "lookup": _lookup_nothing,
            "randAlphaNum": _rand_alpha_num,
            "b64enc": lambda text: base64.b64encode(printed(text).encode()).decode(),
        }
        if head in functions:
            return functions[head](*[self.operand(arg, dot) for arg in args], *piped)
        if head.startswith(".") and head.endswith(".Get") and head.split(".")[-2] == "Files":
            files = self.operand(head[: -len(".Get")], dot)
            if not isinstance(files, _Files) or len(args) != 1 or piped:
                raise TemplateError(f"bad .Files.Get call: {' '.join(words)}")
            return files.get(_string_literal(args[0]))
        if args or piped:
            raise TemplateError(f"{head!r} is not a supported function")
        return self.operand(head, dot)

    def operand(self, word: str, dot: object) -> object:
        if word.startswith('"'):
            return _string_literal(word)
        if re.fullmatch(r"-?[0-9]+", word):
            return int(word)
        if word in ("true", "false"):
            return word == "true"
        if word == ".":
            return dot
        if not word.startswith(".") or ".." in word or word.endswith("."):
            raise TemplateError(f"unsupported operand {word!r}")
        value = dot
        for key in word[1:].split("."):
            if not isinstance(value, Mapping) or key not in value:
                raise TemplateError(f"{word}: no key {key!r}")
            value = value[key]
        return value

    def include(self, name: object, dot: object) -> str:
        if not isinstance(name, str) or name not in self.defines:
            raise TemplateError(f"include: no template {name!r}")
        if self.depth > 50:
            raise TemplateError(f"include: recursion too deep in {name!r}")
        self.depth += 1
        try:
            return self.render(self.defines[name], dot)
        finally:
            self.depth -= 1


# ------------------------------------------------------------------------------------ charts
@dataclass(frozen=True, slots=True)
class Chart:
    """A chart directory: its Chart.yaml, default values and template sources."""

    root: Path
    metadata: dict[str, Any]
    values: dict[str, Any]
    templates: dict[str, str]  # path relative to the chart -> source

    @classmethod
    def load(cls, root: Path) -> Chart:
        metadata = yaml.safe_load((root / "Chart.yaml").read_text())
        values = yaml.safe_load((root / "values.yaml").read_text()) or {}
        templates = {
            str(path.relative_to(root)): path.read_text()
            for path in sorted((root / "templates").rglob("*"))
            if path.is_file()
        }
        return cls(root, metadata, values, templates)


def merge_values(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in, maps key by key (as ``--set`` / ``-f`` do); a
    null override removes a default key, as in Helm."""
    merged = dict(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def render(
    chart: Chart,
    release_name: str,
    namespace: str,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Every template of the chart rendered (``templates/_*`` only define, so are left out)."""
    defines: dict[str, list[_Node]] = {}
    parsed = {
        path: _Parser(_lex(source), defines).parse() for path, source in chart.templates.items()
    }
    context = {
        "Values": merge_values(chart.values, overrides or {}),
        "Release": {"Name": release_name, "Namespace": namespace, "Service": "Helm"},
        "Chart": {
            "Name": chart.metadata["name"],
            "Version": str(chart.metadata["version"]),
            "AppVersion": str(chart.metadata.get("appVersion", "")),
        },
        "Files": _Files(chart.root),
    }
    renderer = _Renderer(defines)
    return {
        path: renderer.render(nodes, context)
        for path, nodes in parsed.items()
        if not Path(path).name.startswith("_")
    }


_DOCUMENT_SEPARATOR = re.compile(r"(?:^|\s*\n)---\s*")


def manifest_objects(rendered: Mapping[str, str]) -> list[dict[str, Any]]:
    """The objects of rendered manifests (NOTES.txt left out), split as Helm splits them."""
    objects: list[dict[str, Any]] = []
    for path, text in rendered.items():
        if not path.endswith((".yaml", ".yml")):
            continue
        for document in _DOCUMENT_SEPARATOR.split(text):
            try:
                loaded = yaml.safe_load(document)
            except yaml.YAMLError as error:
                raise TemplateError(f"{path}: rendered YAML does not parse: {error}") from None
            if loaded is None:
                continue
            if not isinstance(loaded, dict):
                raise TemplateError(f"{path}: a rendered document is not a mapping")
            objects.append(loaded)
    return objects
