"""Bounds on the shape of input from the network (a request body), checked before it is built.

A YAML alias costs a few bytes and stands for the whole node it names: nine levels of nine
aliases of the level below are a sub-kilobyte body that is a billion nodes once anything walks
or copies it. So a request's YAML may hold no alias at all (files an operator reads may: they
are not checked here), and a request's documents are bounded in nodes and in nesting (far
above any Kubernetes object; a deeper one would exhaust the recursion of whatever walks it).
The checks run over the composed node graph, before a Python object is constructed, and stop
at the first thing wrong, so they cost at most one visit per distinct node. JSON has no
aliases; its parsed data gets the same bounds (:func:`check_data`).
"""

from __future__ import annotations

import yaml

from gpufleet.io.errors import InputError

#: The most nodes (mappings, sequences, scalars; a mapping's keys count) one request holds.
MAX_NODES = 200_000
#: The deepest nesting of mappings and sequences one request holds.
MAX_DEPTH = 100
ALIAS_REFUSED = "YAML aliases are not accepted in a request (write the value out in full)"


def check_node(root: yaml.Node, source: str, place: str) -> None:
    """InputError when the document ``root`` uses an alias (a node met twice), or is bigger or
    deeper than a request may be."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            line = node.start_mark.line + 1
            raise InputError(source, ALIAS_REFUSED, f"{place} (line {line})")
        seen.add(id(node))
        _bounded(len(seen), depth, source, place)
        if isinstance(node, yaml.MappingNode):
            stack.extend((part, depth + 1) for pair in node.value for part in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)


def check_data(data: object, source: str, place: str) -> None:
    """InputError when parsed JSON ``data`` is bigger or deeper than a request may be."""
    count = 0
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        _bounded(count, depth, source, place)
        if isinstance(value, dict):
            stack.extend((part, depth + 1) for pair in value.items() for part in pair)
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _bounded(count: int, depth: int, source: str, place: str) -> None:
    if count > MAX_NODES:
        raise InputError(source, f"more than {MAX_NODES:,} values in one request", place)
    if depth > MAX_DEPTH:
        raise InputError(source, f"nested deeper than {MAX_DEPTH} levels", place)
