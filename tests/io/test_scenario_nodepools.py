"""A scenario's NodePool objects: read with its workloads by io.nodepools' own reader (priced
from the price list given), the example scenario, and bad input naming file, pool and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.io.errors import InputError
from gpufleet.io.kinds import Skipped
from gpufleet.io.readers import read_scenario
from gpufleet.model.capacity import CapacityType
from gpufleet.model.node_faults import NodeFaultKind
from gpufleet.testing.economics_builders import price_list
from tests.io.conftest import WriteFile

EXAMPLE = Path(__file__).parents[2] / "examples" / "nodepools" / "scenario"

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  template:
    spec:
      containers:
        - name: c
          image: x
          resources: {limits: {nvidia.com/gpu: 8}}
"""


def pool(name: str, spec: str = "{maxNodes: 4}", model: str = "H100") -> str:
    """A NodePool document: ``spec`` (a YAML mapping) with a node of 8 ``model`` GPUs."""
    node = {"cpu": "96", "memory": "1Ti", "gpu": {"model": model, "count": 8, "memory": "80Gi"}}
    document = {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {**yaml.safe_load(spec), "node": node},
    }
    return yaml.safe_dump(document, sort_keys=False)


def test_a_scenarios_pools_are_read_beside_its_workloads_and_priced_from_the_list_given(
    write_file: WriteFile,
) -> None:
    write_file("s/jobs.yaml", JOB)
    write_file(
        "s/pools.yaml",
        pool("spot", "{maxNodes: 4, capacityType: spot}")
        + "---\n"
        + pool("mine", "{maxNodes: 2, price: {perNodeHour: 7.5}}"),
    )
    path = write_file("s/queues.yaml", "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\n"
                      "metadata: {name: ml}\nspec: {namespaces: [ml]}\n")  # fmt: skip
    scenario = read_scenario(path.parent, prices=price_list())
    assert [w.workload.key for w in scenario.workloads] == ["ml/train"]
    spot, mine = scenario.node_pools
    assert (spot.name, spot.capacity, spot.max_nodes) == ("spot", CapacityType.SPOT, 4)
    # The test's list: an H100 at 4 per spot GPU-hour, a vCPU 0.01, a GiB 0.002.
    assert spot.hourly_price == pytest.approx(8 * 4.0 + 96 * 0.01 + 1024 * 0.002)
    assert mine.hourly_price == 7.5


def test_a_scenario_without_pools_has_none(write_file: WriteFile) -> None:
    assert read_scenario(write_file("jobs.yaml", JOB)).node_pools == []


def test_the_example_scenario_reads_its_three_pools_and_the_spot_market() -> None:
    skipped = Skipped()
    scenario = read_scenario(EXAMPLE, skipped)
    assert not skipped
    pools = {p.name: p for p in scenario.node_pools}
    assert list(pools) == ["h100-reserved", "h100-on-demand", "h100-spot"]
    assert (pools["h100-reserved"].min_nodes, pools["h100-reserved"].max_nodes) == (1, 1)
    assert pools["h100-on-demand"].min_nodes == pools["h100-spot"].min_nodes == 0
    (market,) = scenario.node_faults
    assert market.kind is NodeFaultKind.SPOT_INTERRUPTION
    assert market.selection.capacity_type == "spot"
    assert len(scenario.workloads) == 13
    assert set(scenario.queues) == {"research", "batch"}


@pytest.mark.parametrize(
    ("files", "where", "field", "reason"),
    [
        pytest.param(
            {"pools.yaml": pool("small", "{minNodes: 5, maxNodes: 4}")},
            "pools.yaml",
            "spec.maxNodes",
            "4 is less than spec.minNodes 5",
            id="max-below-min",
        ),
        pytest.param(
            {"pools.yaml": pool("x", model="X900")},
            "pools.yaml",
            "spec.node.gpu.model",
            "GPU model 'X900' is not in",
            id="unpriced-model",
        ),
        pytest.param(
            {"a.yaml": pool("twice"), "b.yaml": pool("twice", "{maxNodes: 1}")},
            "b.yaml",
            "metadata.name",
            "a second NodePool named 'twice'; the first is at",
            id="repeated-name-across-files",
        ),
        pytest.param(
            {"pools.yaml": pool("p").replace("gpufleet.dev/v1alpha1", "karpenter.sh/v1")},
            "pools.yaml",
            "apiVersion",
            "gpufleet.dev/v1alpha1",
            id="karpenter-api-version",
        ),
    ],
)
def test_a_bad_pool_refuses_the_whole_scenario_naming_file_pool_and_field(
    write_file: WriteFile, files: dict[str, str], where: str, field: str, reason: str
) -> None:
    write_file("s/jobs.yaml", JOB)
    for name, text in files.items():
        write_file(f"s/{name}", text)
    with pytest.raises(InputError) as raised:
        read_scenario(write_file("s/jobs.yaml", JOB).parent, prices=price_list())
    error = raised.value
    assert Path(error.source).name == where
    assert error.field == field
    assert reason in str(error)
    assert "NodePool" in str(error)


def test_an_unknown_kind_lists_nodepool_among_what_a_scenario_reads(
    write_file: WriteFile,
) -> None:
    path = write_file("x.yaml", "apiVersion: v1\nkind: DaemonSet\nmetadata: {name: d}\n")
    with pytest.raises(InputError, match="NodePool"):
        read_scenario(path)
