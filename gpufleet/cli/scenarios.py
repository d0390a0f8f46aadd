"""What ``--scenario`` names: YAML files and directories, or a built-in multi-tenant scenario.

Owns turning the option (and the options that shape a scenario: ``--cluster``, ``--hours``,
``--load``, ``--racks``, ``--nodes-per-rack``, ``--node-fraction``, ``--max-runtime``) into one
:class:`Prepared` cluster and scenario per seed, with a clear error for options that do not
apply. YAML scenarios are read once (the seed only breaks placement ties); built-ins are drawn
per seed. A YAML scenario's NodePools (priced from ``--prices``' list where they give no price)
become the runs' :class:`~gpufleet.backends.sim.node_pools.PoolSettings`: the cluster's nodes
stay as they are beside them, and without ``--cluster`` the pools are the whole cluster (rather
than the bundled one). Files whose only workloads are Jobs of ``parallelism: 0`` (valid, they
run no pods) are run, each such Job said as paused; files that define no workload at all are
refused. Running them is :mod:`gpufleet.cli.scenario_pool`'s job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.backends.sim.inference import InferenceSettings
from gpufleet.backends.sim.node_pools import PoolSettings
from gpufleet.backends.sim.scenarios import TenantScenario, from_trace, large_gangs, sample_nodes
from gpufleet.cli.inputs import fail, note_paused, warn_skipped
from gpufleet.economics.prices import PriceList
from gpufleet.io.assembly import Scenario
from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods
from gpufleet.io.cluster_traces.datasets import (
    NODES_FILE,
    PODS_FILE,
    TRACE_DIR_ENV,
    find_alibaba_trace,
)
from gpufleet.io.cluster_traces.shapes import bundled_path
from gpufleet.io.fleet.cluster_spec import read_cluster_spec
from gpufleet.io.fleet.faults import check_faults
from gpufleet.io.fleet.node_faults import check_node_faults
from gpufleet.io.kinds import Skipped
from gpufleet.io.readers import read_cluster, read_scenario
from gpufleet.model import Node
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.nodepools import NodePool
from gpufleet.model.queues import ResourceQuota

LARGE_GANGS = "large-gangs"
ALIBABA = "alibaba-multitenant"
BUILTINS = (LARGE_GANGS, ALIBABA)
BUNDLED_CLUSTER = "alibaba-like-cluster.yaml"
DEFAULT_NODE_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class Prepared:
    """One seed's cluster and scenario (and, for YAML: the namespaces' ResourceQuotas, the
    IdlePolicies, and the object kind of each workload key, which the policies' scopes read)."""

    nodes: tuple[Node, ...]
    scenario: TenantScenario
    resource_quotas: tuple[ResourceQuota, ...] = ()
    idle_policies: tuple[IdlePolicy, ...] = ()
    kinds: Mapping[str, str] = field(default_factory=dict)
    #: The inference services the scenario loads with requests, and their autoscalers.
    inference: InferenceSettings | None = None
    #: The scenario's node pools (None: it has none), whose minimums join ``nodes`` at the start.
    node_pools: PoolSettings | None = None

    @property
    def pods(self) -> int:
        return sum(len(t.workload.pods) for t in self.scenario.workloads)


@dataclass(frozen=True, slots=True)
class ScenarioOptions:
    """The options that shape a scenario; None: not given on the command line."""

    cluster: Path | None = None
    hours: float | None = None
    load: float | None = None
    racks: int | None = None
    nodes_per_rack: int | None = None
    node_fraction: float | None = None
    max_runtime: float | None = None


@dataclass(frozen=True, slots=True)
class Scenarios:
    """A prepared scenario per seed, and what to say about them."""

    name: str
    by_seed: dict[int, Prepared]
    cluster_label: str
    description: str


def load_scenarios(
    names: list[str],
    seeds: list[int],
    options: ScenarioOptions,
    prices: PriceList | None = None,
) -> Scenarios:
    """Resolve ``--scenario`` values (see the module docstring); ``prices`` prices the
    scenario's NodePools that give no price of their own (default: gpufleet's list)."""
    builtins = [n for n in names if n in BUILTINS]
    if builtins and len(names) > 1:
        raise fail(
            f"--scenario {builtins[0]} is a built-in scenario; it cannot be combined with "
            "other --scenario values"
        )
    _check_numbers(options)
    if builtins == [LARGE_GANGS]:
        return _large_gangs(seeds, options)
    if builtins == [ALIBABA]:
        return _alibaba(seeds, options)
    return _files(names, seeds, options, prices)


def _check_numbers(options: ScenarioOptions) -> None:
    for flag, value in (
        ("--hours", options.hours),
        ("--load", options.load),
        ("--max-runtime", options.max_runtime),
    ):
        if value is not None and value <= 0:
            raise fail(f"{flag} must be positive, got {value:g}")
    for flag, count in (("--racks", options.racks), ("--nodes-per-rack", options.nodes_per_rack)):
        if count is not None and count < 1:
            raise fail(f"{flag} must be at least 1, got {count}")
    fraction = options.node_fraction
    if fraction is not None and not 0 < fraction <= 1:
        raise fail(f"--node-fraction must be in (0, 1], got {fraction:g}")


def _reject(options: ScenarioOptions, scenario: str, allowed: set[str]) -> None:
    given = {
        "--cluster": options.cluster is not None,
        "--hours": options.hours is not None,
        "--load": options.load is not None,
        "--racks": options.racks is not None,
        "--nodes-per-rack": options.nodes_per_rack is not None,
        "--node-fraction": options.node_fraction is not None,
        "--max-runtime": options.max_runtime is not None,
    }
    extra = [flag for flag, present in given.items() if present and flag not in allowed]
    if extra:
        accepted = ", ".join(sorted(allowed)) or "none of them"
        raise fail(
            f"{', '.join(extra)} {'does' if len(extra) == 1 else 'do'} not apply to "
            f"--scenario {scenario} (it accepts {accepted})"
        )


def _given(**values: float | None) -> dict[str, Any]:
    """The keyword arguments given on the command line (the others keep the built-in's
    defaults, which the backends tune)."""
    return {k: v for k, v in values.items() if v is not None}


def _large_gangs(seeds: list[int], options: ScenarioOptions) -> Scenarios:
    _reject(options, LARGE_GANGS, {"--hours", "--load", "--racks", "--nodes-per-rack"})
    knobs = _given(
        hours=options.hours,
        load=options.load,
        racks=options.racks,
        nodes_per_rack=options.nodes_per_rack,
    )
    by_seed = {}
    for seed in seeds:
        nodes, scenario = large_gangs(seed, **knobs)
        by_seed[seed] = Prepared(tuple(nodes), scenario)
    first = by_seed[seeds[0]]
    return Scenarios(
        LARGE_GANGS,
        by_seed,
        f"synthetic racks of 8-GPU H100 nodes ({len(first.nodes)} nodes)",
        first.scenario.description,
    )


def _alibaba(seeds: list[int], options: ScenarioOptions) -> Scenarios:
    _reject(options, ALIBABA, {"--hours", "--load", "--node-fraction", "--max-runtime"})
    trace = find_alibaba_trace()
    if trace is None:
        raise fail(
            f"--scenario {ALIBABA} needs the Alibaba 2023 trace, which was not found: fetch it "
            "with `gpufleet traces fetch alibaba-2023`, or set "
            f"{TRACE_DIR_ENV} to its directory (the one holding csv/{PODS_FILE}); "
            "`gpufleet traces locate` lists where it is looked for"
        )
    pods = read_pods(trace / "csv" / PODS_FILE)
    all_nodes = read_nodes(trace / "csv" / NODES_FILE)
    fraction = options.node_fraction or DEFAULT_NODE_FRACTION
    knobs = _given(hours=options.hours, load=options.load, max_runtime=options.max_runtime)
    by_seed = {}
    for seed in seeds:
        nodes = sample_nodes(all_nodes, fraction, seed)
        try:
            scenario = from_trace(pods, nodes, seed, **knobs)
        except ValueError as error:
            raise fail(f"--scenario {ALIBABA}: {error}") from None
        by_seed[seed] = Prepared(tuple(nodes), scenario)
    first = by_seed[seeds[0]]
    return Scenarios(
        ALIBABA,
        by_seed,
        f"{fraction:.0%} of the Alibaba 2023 trace's GPU nodes ({len(first.nodes)} nodes, "
        f"drawn per seed) from {trace}",
        first.scenario.description,
    )


def _files(
    names: list[str], seeds: list[int], options: ScenarioOptions, prices: PriceList | None
) -> Scenarios:
    _reject(options, "<files>", {"--cluster"})
    for name in names:
        if not Path(name).exists():
            raise fail(
                f"--scenario {name}: no such file or directory (built-in scenarios: "
                f"{', '.join(BUILTINS)})"
            )
    skipped = Skipped()
    scenario = read_scenario(names, skipped, prices)
    if not scenario.workloads and not scenario.paused_jobs:  # a paused Job is something
        raise fail(f"--scenario {' '.join(names)}: the files define no workloads")
    pools = PoolSettings(tuple(scenario.node_pools)) if scenario.node_pools else None
    if options.cluster is not None:
        nodes = read_cluster(options.cluster, skipped)
        cluster_label = f"{options.cluster} ({len(nodes)} nodes)"
    elif pools is not None:
        nodes, cluster_label = [], "no nodes but the node pools'"
    else:
        nodes = read_cluster_spec(bundled_path(BUNDLED_CLUSTER))
        cluster_label = f"bundled Alibaba-like cluster ({len(nodes)} nodes)"
    warn_skipped(skipped)
    note_paused(scenario.paused_jobs)
    if not nodes and pools is None:
        raise fail("the cluster has no nodes")
    if pools is not None:
        cluster_label += f"; node pools: {_pools_label(pools.pools)}"
        if not nodes and not any(p.max_nodes for p in pools.pools):
            raise fail("the cluster has no nodes and its node pools may have none (maxNodes 0)")
    check_faults(scenario.faults, [*nodes, *(pools.start_nodes() if pools else ())])
    check_node_faults(scenario.node_faults, [*nodes, *_pool_nodes(pools)])
    name = ", ".join(names)
    pods = sum(len(t.workload.pods) for t in scenario.workloads)
    queues = [q for q in scenario.queues if q != "default"] or ["default"]
    tenant = TenantScenario(
        name,
        f"{len(scenario.workloads)} workloads ({pods} pods) in {len(queues)} queue(s) "
        f"({', '.join(queues)}) from {name}",
        dict(scenario.queues),
        dict(scenario.priority_classes),
        tuple(scenario.workloads),
        tuple(scenario.faults),
        tuple(scenario.node_faults),
    )
    prepared = Prepared(
        tuple(nodes),
        tenant,
        tuple(scenario.resource_quotas),
        tuple(scenario.idle_policies),
        dict(scenario.kinds),
        inference_settings(scenario) if scenario.inference else None,
        pools,
    )
    return Scenarios(name, dict.fromkeys(seeds, prepared), cluster_label, tenant.description)


def _pools_label(pools: tuple[NodePool, ...]) -> str:
    """``h100-spot (spot, 0-6 x 8 H100, $33.60/h)`` for each pool."""
    described = []
    for pool in pools:
        shape = f"{pool.gpus_per_node} {pool.gpu_model}" if pool.gpu_model else "CPU"
        described.append(
            f"{pool.name} ({pool.capacity.value}, {pool.min_nodes}-{pool.max_nodes} x {shape}, "
            f"{pool.hourly_price:,.2f}/h)"
        )
    return ", ".join(described)


def _pool_nodes(pools: PoolSettings | None) -> list[Node]:
    """The nodes the pools start with, and one of each pool that starts with none: what a
    SpotInterruption or NodeFailure may choose (a pool's nodes carry its capacity type)."""
    if pools is None:
        return []
    nodes = pools.start_nodes()
    for pool in pools.pools:
        if pool.min_nodes == 0 and pool.max_nodes > 0:
            nodes.append(pool.node(pool.node_name(0), pool.zones_for(1)[0]))
    return nodes


def inference_settings(scenario: Scenario) -> InferenceSettings:
    """The scenario's services (InferenceLoads), the autoscaler of each that has one, one
    replica of each and the owner of every replica."""
    return InferenceSettings(
        tuple(scenario.inference),
        {spec.target.key: spec for spec in scenario.autoscaling},
        dict(scenario.replica_templates),
        dict(scenario.replica_owner),
    )
