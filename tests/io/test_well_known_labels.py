"""Issue 28 item 3: every node gpufleet builds carries the labels every Kubernetes node has
(``kubernetes.io/os``, ``kubernetes.io/arch``, ``kubernetes.io/hostname``, and with a zone
``topology.kubernetes.io/zone`` and ``region``), so a manifest written for a real cluster
places the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.fleet.cluster_shapes import nodes_to_cluster_spec
from gpufleet.io.fleet.cluster_spec import cluster_spec_from_dict
from gpufleet.model.node import zone_region

runner = CliRunner()
SMALL = "examples/clusters/small.yaml"
ONE_GPU = Path("examples/pods/one-gpu.yaml")


@pytest.mark.parametrize(
    ("zone", "region"),
    [
        ("us-east-1a", "us-east-1"),
        ("us-central1-a", "us-central1"),
        ("eastus-1", "eastus"),
        ("zone-a", "zone"),
        ("a", "a"),
    ],
    ids=["aws", "gcp", "azure", "plain", "no-region"],
)
def test_a_zone_is_in_the_region_its_cloud_names(zone: str, region: str) -> None:
    assert zone_region(zone) == region


@pytest.mark.parametrize(
    "selector",
    [
        {"kubernetes.io/os": "linux"},
        {"kubernetes.io/arch": "amd64"},
        {"kubernetes.io/hostname": "h100-0001"},
        {"topology.kubernetes.io/zone": "zone-a", "topology.kubernetes.io/region": "zone"},
    ],
    ids=["os", "arch", "hostname", "zone-and-region"],
)
def test_a_manifest_selecting_well_known_labels_places(
    tmp_path: Path, selector: dict[str, str]
) -> None:
    manifest = yaml.safe_load(ONE_GPU.read_text())
    manifest["spec"]["nodeSelector"] = selector
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(manifest))
    result = runner.invoke(app, ["place", "--cluster", SMALL, "--workload", str(pod)])
    assert result.exit_code == 0, result.output
    assert "1 of 1 pods placed" in " ".join(result.output.split()), result.output


def test_a_spec_written_from_nodes_leaves_out_the_labels_it_writes_itself() -> None:
    nodes = cluster_spec_from_dict(yaml.safe_load(Path(SMALL).read_text()), SMALL)
    spec = nodes_to_cluster_spec(nodes, "again")
    again = cluster_spec_from_dict(spec, "again.yaml")
    assert {n.labels["topology.kubernetes.io/region"] for n in again if n.gpus} == {"zone"}
    written = {key for pool in spec["spec"]["pools"] for key in pool.get("labels", {})}
    assert not written & {"kubernetes.io/os", "kubernetes.io/arch", "topology.kubernetes.io/region"}
