"""Writing autoscaling objects to files and checking what a bad one's error names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.io.errors import InputError
from gpufleet.io.kube.autoscaling import read_autoscaling
from gpufleet.model.autoscaling import AutoscalingSpec
from tests.io.conftest import WriteFile


def write_objects(write_file: WriteFile, *objects: dict[str, Any], name: str = "app.yaml") -> Path:
    return write_file(name, yaml.safe_dump_all(list(objects), sort_keys=False))


def read_one(write_file: WriteFile, *objects: dict[str, Any]) -> AutoscalingSpec:
    (spec,) = read_autoscaling(write_objects(write_file, *objects))
    return spec


def refused(write_file: WriteFile, *objects: dict[str, Any]) -> tuple[Path, InputError]:
    path = write_objects(write_file, *objects)
    with pytest.raises(InputError) as raised:
        read_autoscaling(path)
    return path, raised.value


def assert_names(
    error: InputError, path: Path, document: int, what: str, field: str, fragment: str
) -> None:
    """The error names the file, the document, the object, the field, and says ``fragment``."""
    assert error.source == str(path), error
    assert error.location is not None, error
    assert error.location.startswith(f"document {document} ("), error
    assert error.location.endswith(what), error
    assert error.field == field, error
    assert fragment in error.reason, error
