"""Composition, not inheritance chains (issue 31, item 3): in the packages of :data:`SCOPE`, no
project class has more than one project base, and no chain is deeper than two project classes.

Protocols, enums, exceptions, NamedTuples and pydantic models are aside, as classes and as
bases; so are dataclasses as bases (a record that extends another's fields). The scope is the
whole package: every class of gpufleet/.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, is_dataclass
from enum import Enum
from types import ModuleType
from typing import NamedTuple, Protocol

import pytest
from pydantic import BaseModel

#: The packages held to the rule (each with its modules, all the way down).
SCOPE = ["gpufleet"]


def _aside(cls: type) -> bool:
    """Kinds whose hierarchies the rule leaves alone."""
    return (
        issubclass(cls, (BaseException, Enum, tuple, BaseModel))
        or bool(getattr(cls, "_is_protocol", False))
    )  # fmt: skip


def _counted(cls: type, project: str) -> bool:
    """A class of the project's that counts in a chain (a dataclass base does not)."""
    of_project = cls.__module__ == project or cls.__module__.startswith(f"{project}.")
    return of_project and not _aside(cls) and not is_dataclass(cls)


def chain_problems(cls: type, project: str = "gpufleet") -> list[str]:
    """What ``cls`` breaks of the rule (nothing for a class of a kind aside)."""
    if _aside(cls):
        return []
    problems = []
    bases = [b.__qualname__ for b in cls.__bases__ if _counted(b, project)]
    if len(bases) > 1:
        problems.append(f"{cls.__qualname__} inherits from {len(bases)} project classes: {bases}")
    chain = [cls.__qualname__, *(c.__qualname__ for c in cls.__mro__[1:] if _counted(c, project))]
    if len(chain) > 2:
        problems.append(f"{cls.__qualname__}'s chain is {len(chain)} project classes: {chain}")
    return problems


def scoped_modules() -> list[ModuleType]:
    modules = []
    for name in SCOPE:
        package = importlib.import_module(name)
        modules.append(package)
        for found in pkgutil.walk_packages(package.__path__, f"{name}."):
            modules.append(importlib.import_module(found.name))
    return modules


MODULES = scoped_modules()


def test_the_scope_is_found_with_the_local_machine() -> None:
    names = {module.__name__ for module in MODULES}
    assert {"gpufleet.backends.local.machine", "gpufleet.backends.local.gang_ends"} <= names


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_no_class_of_the_module_inherits_a_chain(module: ModuleType) -> None:
    defined = [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__
    ]
    assert [p for cls in defined for p in chain_problems(cls)] == []


# The rule itself, on classes of this module (its name the project's).
class _Base:
    pass


class _Middle(_Base):
    pass


class _Deep(_Middle):
    pass


class _Other:
    pass


class _TwoBases(_Base, _Other):
    pass


class _Error(ValueError):
    pass


class _DeepError(_Error):
    pass


class _DeeperError(_DeepError):
    pass


class _Kind(Enum):
    ONE = 1


class _Pair(NamedTuple):
    left: int
    right: int


class _Speaks(Protocol):
    def speak(self) -> str: ...


class _Speaker(_Speaks):
    def speak(self) -> str:
        return "hello"


class _LoudSpeaker(_Speaker):
    pass


@dataclass
class _Fields:
    name: str


@dataclass
class _MoreFields(_Fields):
    size: int


class _FromMoreFields(_MoreFields):
    pass


class _Schema(BaseModel):
    name: str


class _DeepSchema(_Schema):
    size: int


class _DeeperSchema(_DeepSchema):
    kind: str


@pytest.mark.parametrize(
    ("cls", "broken"),
    [
        pytest.param(_Base, [], id="no-base"),
        pytest.param(_Middle, [], id="one-base-two-deep"),
        pytest.param(_Deep, ["chain is 3"], id="three-deep-refused"),
        pytest.param(_TwoBases, ["2 project classes", "chain is 3"], id="two-bases-refused"),
        pytest.param(_DeeperError, [], id="exceptions-aside"),
        pytest.param(_Kind, [], id="enums-aside"),
        pytest.param(_Pair, [], id="namedtuples-aside"),
        pytest.param(_LoudSpeaker, [], id="a-protocol-base-aside"),
        pytest.param(_FromMoreFields, [], id="dataclass-bases-aside"),
        pytest.param(_DeeperSchema, [], id="pydantic-models-aside"),
    ],
)
def test_the_rule_refuses_deep_chains_and_many_bases(cls: type, broken: list[str]) -> None:
    problems = chain_problems(cls, project=__name__)
    assert len(problems) == len(broken)
    for problem, words in zip(problems, broken, strict=True):
        assert words in problem
