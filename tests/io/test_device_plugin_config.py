"""The NVIDIA device plugin's config, from its file or its ConfigMap, with errors that point."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.kube.device_plugin_config import read_device_plugin_config
from gpufleet.model.gpu import (
    GPU_RESOURCE,
    NO_SHARING,
    SHARED_GPU_RESOURCE,
    GpuSharing,
    SharingStrategy,
)

#: The time-slicing ConfigMap as the seed articles show it (the GPU operator's format).
SEED_CONFIG_MAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: time-slicing-config
  namespace: gpu-operator
data:
  any: |-
    version: v1
    sharing:
      timeSlicing:
        renameByDefault: false
        resources:
        - name: nvidia.com/gpu
          replicas: 4 # Each physical GPU appears as 4 resources
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_the_seed_config_map(tmp_path: Path) -> None:
    config = read_device_plugin_config(write(tmp_path, SEED_CONFIG_MAP))
    assert config.gpu_sharing() == GpuSharing(SharingStrategy.TIME_SLICING, 4, GPU_RESOURCE)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("version: v1\n", NO_SHARING, id="no-sharing"),
        pytest.param(
            "version: v1\nflags: {migStrategy: mixed}\n"
            "sharing:\n  mps:\n    renameByDefault: true\n"
            "    resources: [{name: nvidia.com/gpu, replicas: 2}]\n",
            GpuSharing(SharingStrategy.MPS, 2, SHARED_GPU_RESOURCE),
            id="mps-renamed",
        ),
        pytest.param(
            "version: v1\nsharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n"
            "    resources: [{name: nvidia.com/gpu, replicas: 10}]\n",
            GpuSharing(SharingStrategy.TIME_SLICING, 10, GPU_RESOURCE, True),
            id="one-per-pod",
        ),
    ],
)
def test_the_config_file(tmp_path: Path, text: str, expected: GpuSharing) -> None:
    assert read_device_plugin_config(write(tmp_path, text)).gpu_sharing() == expected


def test_a_named_key_of_a_config_map(tmp_path: Path) -> None:
    text = SEED_CONFIG_MAP.replace("  any: |-", "  a100: |-\n    version: v1\n  any: |-")
    path = write(tmp_path, text)
    assert read_device_plugin_config(path, "a100").gpu_sharing() == NO_SHARING
    assert read_device_plugin_config(path, "any").gpu_sharing().replicas == 4
    with pytest.raises(InputError, match=r"data: holds several configs \(a100, any\)"):
        read_device_plugin_config(path)


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        pytest.param(
            SEED_CONFIG_MAP.replace("replicas: 4", "replicas: 0"),
            None,
            r"config\.yaml:document 1 \(line 1\), ConfigMap time-slicing-config, data\[any\]: "
            r"sharing\.timeSlicing\.resources\[0\]\.replicas: Input should be greater than or "
            r"equal to 1",
            id="bad-replicas",
        ),
        pytest.param(
            SEED_CONFIG_MAP.replace("renameByDefault", "renameByDefualt"),
            None,
            r"sharing\.timeSlicing\.renameByDefualt: unknown field",
            id="typo",
        ),
        pytest.param(
            SEED_CONFIG_MAP,
            "a100",
            r"data\[a100\]: expected the config as YAML text \(missing; keys: any\)",
            id="missing-key",
        ),
        pytest.param("version: v2\n", None, r"version: Input should be 'v1'", id="version"),
        pytest.param("- a\n", None, "expected the device plugin's config", id="not-a-mapping"),
        pytest.param("version: v1\n", "any", "the file is no ConfigMap", id="key-without-map"),
        pytest.param(
            "kind: ConfigMap\nmetadata: {name: x}\ndata:\n  any: 'sharing: ['\n",
            None,
            r"ConfigMap x: data\[any\]: not valid YAML: expected the node content, "
            r"but found '<stream end>' \(its line 1",
            id="broken-yaml",
        ),
    ],
)
def test_errors_name_file_key_and_field(
    tmp_path: Path, text: str, key: str | None, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        read_device_plugin_config(write(tmp_path, text), key)
