"""Issue 28 item 2: ``spec.nodeName`` chooses the node, not the right to run. In ``place`` and
the simulator a pod naming a node goes there (through its queue as any pod) or is refused with
the reason; a pod naming a node that does not exist is never placed elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.errors import InputError
from gpufleet.io.kube.pods import pods_from_object
from gpufleet.model import GFD_LABELS

runner = CliRunner()
SMALL = "examples/clusters/small.yaml"
NEVER = "can never fit on this cluster"


def one_gpu_pod(**spec: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(Path("examples/pods/one-gpu.yaml").read_text())
    manifest["spec"].update(spec)
    return manifest


@pytest.mark.parametrize(
    ("spec", "node", "message"),
    [
        ({"nodeName": "h100-0001"}, "h100-0001", None),
        ({"nodeName": "a100-0002"}, "a100-0002", None),
        ({"nodeName": "g-9999"}, None, NEVER),
        ({"nodeName": "h100-0001", "nodeSelector": {"node-pool": "a100"}}, None, NEVER),
        ({"nodeName": "cpu-0000"}, None, NEVER),
    ],
    ids=["named-node", "another-named-node", "no-such-node", "selector-elsewhere", "no-gpu-there"],
)
@pytest.mark.parametrize("mode", ["--workload", "--scenario"])
def test_a_pod_naming_its_node_goes_there_or_is_refused(
    tmp_path: Path, mode: str, spec: dict[str, Any], node: str | None, message: str | None
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(one_gpu_pod(**spec)))
    result = runner.invoke(app, ["place", "--cluster", SMALL, mode, str(pod)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    if node is not None:
        assert f"default/cuda-smoke-test │ {node} │" in text, text
        assert "1 of 1 pods placed" in text, text
    else:
        assert message is not None
        assert message in text, text
        assert "0 of 1 pods placed" in text, text


def test_node_name_reads_as_the_nodes_host_name() -> None:
    (timed,) = pods_from_object(one_gpu_pod(nodeName="g-0001"), "pod.yaml")
    assert (GFD_LABELS.HOSTNAME, "g-0001") in timed.pod.node_selector


def test_a_node_name_that_is_no_name_is_refused() -> None:
    with pytest.raises(InputError, match=r"spec\.nodeName"):
        pods_from_object(one_gpu_pod(nodeName="No Such_Node"), "pod.yaml")
