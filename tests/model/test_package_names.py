"""The model package's names are imported on first use (PEP 562), so that a program needing
one small module of it (the CLI's time formats) does not build every dataclass; each name is
still the object its module defines, and importing the package imports none of them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import gpufleet.model as model


@pytest.mark.parametrize("name", model.__all__)
def test_each_name_is_its_modules_object(name: str) -> None:
    home = importlib.import_module(f"gpufleet.model.{model._HOMES[name]}")
    assert getattr(model, name) is getattr(home, name)


def test_every_exported_name_has_a_home_and_no_more() -> None:
    assert sorted(model._HOMES) == sorted(model.__all__)
    assert set(model.__all__) <= set(dir(model))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = model.Nope  # type: ignore[attr-defined]


def test_importing_the_package_builds_none_of_its_modules() -> None:
    script = (
        "import sys, gpufleet.model\n"
        "print(' '.join(m for m in sys.modules if m.startswith('gpufleet.model.')))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []
