"""Run multi-tenant simulations (policy x seed x variant) on the process pool of
:mod:`gpufleet.backends.sim.batch`: each worker gets the prepared scenarios once and runs its
tasks through :func:`~gpufleet.backends.sim.run.run_workloads` (the FIFO variant through the
scenario's :meth:`~gpufleet.backends.sim.scenarios.TenantScenario.fifo`, without the scenario's
IdlePolicies: the baseline is a plain scheduler, with no idle reclaim; both are costed alike,
both lose the same nodes and GPUs, and both grow and shrink the same node pools).
Results come back as :class:`~gpufleet.report.scenario_summary.LabelledRun`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.backends.sim.batch import ProgressCallback, Report, run_pool
from gpufleet.backends.sim.costs import CostSettings
from gpufleet.backends.sim.run import run_workloads
from gpufleet.backends.sim.scenarios import fifo_workload
from gpufleet.cli.scenarios import Prepared
from gpufleet.report.scenario_summary import LabelledRun, Variant
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile


@dataclass(frozen=True, slots=True)
class ScenarioTask:
    policy: str
    seed: int
    variant: Variant


@dataclass(frozen=True, slots=True)
class Shared:
    """What every task reads: the scenario of each seed, admission settings, explain time,
    the profile."""

    by_seed: dict[int, Prepared]
    config: AdmissionConfig
    explain_at: float | None = None
    #: The scheduling profile of the queues variant (the FIFO baseline keeps the default).
    profile: Profile = DEFAULT_PROFILE
    #: The scenario's IdlePolicies only report what they would do (``--idle-dry-run``).
    idle_dry_run: bool = False
    #: How the runs are costed (None: they are not).
    cost: CostSettings | None = None


def run_task(shared: Shared, task: ScenarioTask, report: Report) -> LabelledRun:
    """Run one task of the prepared scenarios."""
    prepared = shared.by_seed[task.seed]
    scenario = prepared.scenario
    quotas = prepared.resource_quotas
    profile = shared.profile
    idle_policies = prepared.idle_policies
    inference = prepared.inference
    if task.variant is Variant.FIFO:
        scenario = scenario.fifo()
        quotas = ()
        profile = DEFAULT_PROFILE
        idle_policies = ()  # the baseline is a plain scheduler: no idle reclaim either
        if inference is not None:  # served alike, its new replicas in the one queue too
            templates = {k: fifo_workload(t) for k, t in inference.templates.items()}
            inference = dataclasses.replace(inference, templates=templates)
    result = run_workloads(
        prepared.nodes,
        scenario.workloads,
        task.policy,
        task.seed,
        queues=scenario.queues,
        resource_quotas=quotas,
        config=shared.config,
        progress=report,
        explain_at=shared.explain_at,
        profile=profile,
        faults=scenario.faults,
        node_faults=scenario.node_faults,
        idle_policies=idle_policies,
        kinds=prepared.kinds,
        idle_dry_run=shared.idle_dry_run,
        cost=shared.cost,
        inference=inference,
        node_pools=prepared.node_pools,
    )
    return LabelledRun(task.policy, task.seed, task.variant, result)


def run_scenario_tasks(
    shared: Shared,
    tasks: Sequence[ScenarioTask],
    workers: int,
    on_progress: ProgressCallback | None = None,
) -> list[LabelledRun]:
    """Run ``tasks`` (results in their order) on ``workers`` processes."""
    return run_pool(shared, tasks, workers, run_task, on_progress)
