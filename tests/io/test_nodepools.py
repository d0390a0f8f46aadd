"""NodePool objects: the shipped examples, a pool's node read as a ClusterSpec pool reads it,
prices (own, per GPU, from the price list), and bad input naming file, pool and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from gpufleet.economics.node_prices import node_rate
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.cluster_spec import read_cluster_spec
from gpufleet.io.fleet.nodepools import read_node_pools
from gpufleet.io.fleet.prices import default_prices, read_prices
from gpufleet.model.capacity import CapacityType
from gpufleet.model.node import GFD_LABELS
from tests.io.conftest import WriteFile

EXAMPLES = Path(__file__).parents[2] / "examples" / "nodepools"

NODE = """
node:
  cpu: "192"
  memory: 2048Gi
  gpu: {model: NVIDIA-H100-80GB-HBM3, count: 8, memory: 80Gi}
"""


def pool_text(spec: str, name: str = "p", node: str = NODE) -> str:
    """A NodePool document: ``spec`` (YAML) with ``node`` (YAML, ``node: ...``) added."""
    body = {**yaml.safe_load(spec), **(yaml.safe_load(textwrap.dedent(node)) or {})}
    document = {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": body,
    }
    return yaml.safe_dump(document, sort_keys=False)


def test_the_example_pools_read_with_their_prices_and_shapes() -> None:
    pools = {p.name: p for p in read_node_pools(EXAMPLES)}
    assert list(pools) == ["h100-reserved", "h100-on-demand", "h100-spot", "a10g", "cpu"]
    prices = default_prices()
    reserved, on_demand, spot = pools["h100-reserved"], pools["h100-on-demand"], pools["h100-spot"]
    assert (reserved.capacity, on_demand.capacity, spot.capacity) == (
        CapacityType.RESERVED,
        CapacityType.ON_DEMAND,
        CapacityType.SPOT,
    )
    shapes = {
        (p.template.cpu_milli, p.template.memory_mib, p.template.gpus, p.template.taints)
        for p in (reserved, on_demand, spot)
    }
    assert len(shapes) == 1
    listed = node_rate(reserved.template, CapacityType.RESERVED, prices)
    assert reserved.hourly_price == listed.hourly
    assert spot.hourly_price == pytest.approx(4.2 * 8)
    assert pools["cpu"].hourly_price == 0.384
    assert max(reserved.hourly_price, spot.hourly_price) < on_demand.hourly_price
    assert (reserved.min_nodes, reserved.max_nodes) == (2, 2)
    assert (on_demand.min_nodes, on_demand.provisioning_delay) == (0, 360.0)
    assert spot.zones == ("us-east-1a", "us-east-1b", "us-east-1c")
    assert pools["a10g"].gpu_model == "NVIDIA-A10G"
    assert pools["cpu"].gpus_per_node == 0


def test_a_pools_node_is_what_the_same_lines_make_in_a_cluster_spec(
    write_file: WriteFile,
) -> None:
    node = """
    node:
      cpu: "64"
      memory: 512Gi
      gpu: {model: A100, count: 8, memory: 40Gi}
      mig: {devices: [7], layout: [3g.20gb, 2g.10gb, 1g.5gb, 1g.5gb]}
      labels: {team: vision}
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      extendedResources: {rdma/hca: 1}
    """
    (pool,) = read_node_pools(write_file("p.yaml", pool_text("maxNodes: 3", "a100", node)))
    spec = write_file(
        "c.yaml",
        "apiVersion: gpufleet.dev/v1alpha1\nkind: ClusterSpec\nmetadata: {name: c}\n"
        "spec:\n  pools:\n  - name: a100\n    count: 1\n"
        + textwrap.indent(textwrap.dedent(node).strip().removeprefix("node:").strip("\n"), "  "),
    )
    (expected,) = read_cluster_spec(spec)
    made = pool.node("a100-0000")
    assert (made.cpu_milli, made.memory_mib, made.gpus, made.taints, made.extended) == (
        expected.cpu_milli,
        expected.memory_mib,
        expected.gpus,
        expected.taints,
        expected.extended,
    )
    assert made.labels["team"] == "vision"
    assert made.labels[GFD_LABELS.MIG_STRATEGY] == "mixed"


def test_a_pool_is_priced_from_the_price_list_it_is_given(write_file: WriteFile) -> None:
    prices = read_prices(
        write_file(
            "prices.yaml",
            """
            apiVersion: gpufleet.dev/v1alpha1
            kind: PriceList
            metadata: {name: ours}
            spec:
              cpu: {on-demand: 0.01}
              memory: {on-demand: 0.001}
              estimates: {spot: 0.5}
              gpus: [{model: H100, on-demand: 10}]
            """,
        )
    )
    path = write_file("p.yaml", pool_text("{maxNodes: 1, capacityType: spot}"))
    (pool,) = read_node_pools(path, prices)
    assert pool.hourly_price == pytest.approx(8 * 5 + 192 * 0.005 + 2048 * 0.0005)
    assert pool.price_source == "estimated from price list 'ours', spot"


def test_capacity_outages_are_read_in_seconds_from_the_runs_start(write_file: WriteFile) -> None:
    spec = "{maxNodes: 2, capacityOutages: [{start: 2h, duration: 30m}, {start: 3h, duration: 90}]}"
    (pool,) = read_node_pools(write_file("p.yaml", pool_text(spec)))
    assert [(o.start, o.end) for o in pool.outages] == [(7200.0, 9000.0), (10800.0, 10890.0)]
    assert (pool.outage_at(7199.0), pool.outage_at(9000.0)) == (None, None)
    assert pool.outage_at(7200.0) == pool.outages[0]
    (plain,) = read_node_pools(write_file("q.yaml", pool_text("maxNodes: 2")))
    assert plain.outages == ()


@pytest.mark.parametrize(
    ("spec", "node", "field", "message"),
    [
        ("{minNodes: 3, maxNodes: 2}", NODE, "spec.maxNodes", "less than spec.minNodes 3"),
        ("{maxNodes: -1}", NODE, "spec.maxNodes", "greater than or equal to 0"),
        ("{maxNodes: 2, price: {perNodeHour: -3}}", NODE, "spec.price.perNodeHour",
         "greater than or equal to 0"),
        ("{maxNodes: 2, price: {}}", NODE, "spec.price", "one of perNodeHour and perGpuHour"),
        ("{maxNodes: 2, capacityType: reserved}",
         "node: {cpu: 4, memory: 16Gi, gpu: {model: NVIDIA-A10G, count: 1}}", "spec.price",
         "no reserved price"),
        ("{maxNodes: 2}", "node: {cpu: 4, memory: 16Gi, gpu: {model: X900, count: 1}}",
         "spec.node.gpu.model", "GPU model 'X900' is not in price list"),
        ("{maxNodes: 2, price: {perGpuHour: 1}}", "node: {cpu: 4, memory: 16Gi}",
         "spec.price.perGpuHour", "no GPUs"),
        ("{maxNodes: 2, provisioningDelay: soon}", NODE, "spec.provisioningDelay",
         "a duration such as 90s"),
        ("{maxNodes: 2, provisioningDelay: -5m}", NODE, "spec.provisioningDelay",
         "not negative"),
        ("{maxNodes: 2, capacityType: preemptible}", NODE, "spec.capacityType",
         "'on-demand', 'spot' or 'reserved'"),
        ("{maxNodes: 2, zones: [a, a]}", NODE, "spec.zones", "listed more than once"),
        ("{maxNodes: 2, max: 3}", NODE, "spec.max", "unknown field"),
        ("{maxNodes: 2}", "node: {cpu: 4, memory: 16Gi, count: 3}", "spec.node.count",
         "spec.minNodes to spec.maxNodes"),
        ("{maxNodes: 2}", "node: {cpu: 4, memory: 16Gi, gpu: {model: H100, count: 0}}",
         "spec.node.gpu.count", "greater than or equal to 1"),
        ("{maxNodes: 2}", "node: {cpu: 4, memroy: 16Gi}", "spec.node.memroy",
         "did you mean 'memory'"),
        ("{maxNodes: 2}", "", "spec.node", "required"),
        ("{maxNodes: 2, capacityOutages: [{strat: 2h, duration: 30m}]}", NODE,
         "spec.capacityOutages[0]", "'strat': unknown field; did you mean 'start'?"),
        ("{maxNodes: 2, capacityOutages: [{start: 2h, duration: 0s}]}", NODE,
         "spec.capacityOutages[0].duration", "an outage lasts more than 0s"),
        ("{maxNodes: 2, capacityOutages: [{start: 2h}]}", NODE,
         "spec.capacityOutages[0].duration", "required"),
        ("{maxNodes: 2, capacityOutages: [{start: later, duration: 1h}]}", NODE,
         "spec.capacityOutages[0].start", "a duration such as 90s"),
        ("{maxNodes: 2, capacityOutages: [{start: 2h, duration: 1h}, {start: 150m, duration: 1h}]}",
         NODE, "spec.capacityOutages",
         "outage 1 starts at 9000s, before outage 0 ends at 10800s: list them in order"),
        ("{maxNodes: 2, capacityOutage: []}", NODE, "spec.capacityOutage",
         "did you mean 'capacityOutages'"),
    ],
    ids=[
        "max-below-min", "negative-max", "negative-price", "empty-price", "price-missing",
        "unknown-model", "gpu-price-without-gpus", "bad-duration", "negative-duration",
        "bad-capacity-type", "repeated-zone", "unknown-field", "pool-field-in-node",
        "bad-node-shape", "misspelt-node-field", "no-node", "misspelt-outage-field",
        "zero-outage", "outage-without-duration", "bad-outage-start", "overlapping-outages",
        "misspelt-outages",
    ],
)  # fmt: skip
def test_bad_input_names_the_file_the_pool_and_the_field(
    write_file: WriteFile, spec: str, node: str, field: str, message: str
) -> None:
    path = write_file("pools.yaml", pool_text(spec, "gpus", node))
    with pytest.raises(InputError) as raised:
        read_node_pools(path)
    error = raised.value
    assert error.source == str(path)
    assert error.location is not None
    assert "NodePool gpus" in error.location
    assert error.field == field
    assert message in error.reason


def test_two_pools_of_one_name_and_another_kind_are_refused(write_file: WriteFile) -> None:
    twice = pool_text("maxNodes: 1", "same") + "---\n" + pool_text("maxNodes: 2", "same")
    with pytest.raises(InputError, match="a second NodePool named 'same'"):
        read_node_pools(write_file("twice.yaml", twice))
    other = pool_text("maxNodes: 1").replace("kind: NodePool", "kind: ClusterSpec")
    with pytest.raises(InputError, match="expected kind NodePool"):
        read_node_pools(write_file("other.yaml", other))
    long_name = "x" * 58
    with pytest.raises(InputError, match="at most 57 characters"):
        read_node_pools(write_file("long.yaml", pool_text("maxNodes: 1", long_name)))
