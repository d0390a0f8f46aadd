"""Each paper policy's score on small hand-built nodes, computed by hand from the protocol."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.model import Pod
from gpufleet.scheduling.engine import Bound, PlacementEngine
from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.framework import ScorePlugin
from gpufleet.scheduling.node_table import Claim, NodeTable
from gpufleet.scheduling.policies import (
    POLICY_NAMES,
    PolicyContext,
    UnknownPolicyError,
    make_policy,
)
from gpufleet.scheduling.policies.bestfit import BestFitScore
from gpufleet.scheduling.policies.clustering import GpuClusteringScore
from gpufleet.scheduling.policies.dotprod import DotProductScore
from gpufleet.scheduling.policies.fgd import FgdScore
from gpufleet.scheduling.policies.packing import GpuPackingScore
from gpufleet.scheduling.policies.random_fit import RandomScore
from gpufleet.scheduling.target import PodShape, TargetWorkload, typical_shapes
from gpufleet.testing.builders import make_cluster, make_node, make_pod


def one_row(
    gpu_free: list[int], cpu_free: int = 64_000, tags: dict[int, int] | None = None
) -> NodeTable:
    table = NodeTable([make_node("n", cpu=128_000, gpus=len(gpu_free))])
    table.cpu_free[0] = cpu_free
    table.gpu_free[0, : len(gpu_free)] = gpu_free
    table.full_free[0] = sum(f == 1000 for f in gpu_free)
    table.max_free[0] = max(gpu_free)
    for tag, count in (tags or {}).items():
        table.tag_count[0, tag] = count
    table.version[0] += 1
    return table


def score(plugin: ScorePlugin, table: NodeTable, pod: Pod) -> float:
    demand = PlacementEngine(
        table, make_policy("bestfit", table, PolicyContext(TargetWorkload((), ())))
    ).demand(pod)
    return float(plugin.score(table, demand, np.array([0]))[0])


ONE_GPU = make_pod(cpu=8000, gpus=1)
SHARE_300 = make_pod(cpu=1000, milli=300)
SHARE_600 = make_pod(cpu=1000, milli=600)
CPU_ONLY = make_pod(cpu=4000)


@pytest.mark.parametrize(
    ("plugin", "gpu_free", "tags", "pod", "expected"),
    [
        # free=[0.5, 0.1875], req=[0.0625, 0.125]: dot=0.0546875 -> int(100*(1-0.02734375))
        pytest.param(DotProductScore(), [1000, 500], None, ONE_GPU, 97, id="dotprod"),
        # 1 - (0.5*56000/128000 + 0.5*500/8000) = 0.75
        pytest.param(BestFitScore(), [1000, 500], None, ONE_GPU, 75, id="bestfit-raw"),
        # base + 25*(8000-1500)//8000 = base + 20
        pytest.param(
            GpuClusteringScore(), [1000, 500], {0: 2}, SHARE_300, 95, id="clustering-only-my-tag"
        ),
        pytest.param(
            GpuClusteringScore(),
            [1000, 500],
            {0: 1, 1: 1},
            SHARE_300,
            70,
            id="clustering-my-tag-among-others",
        ),
        pytest.param(
            GpuClusteringScore(), [1000, 500], None, SHARE_300, 45, id="clustering-no-gpu-pods"
        ),
        pytest.param(
            GpuClusteringScore(),
            [1000, 500],
            {1: 3},
            SHARE_300,
            20,
            id="clustering-other-tags-only",
        ),
        pytest.param(
            GpuClusteringScore(), [1000, 500], {1: 3}, CPU_ONLY, 0, id="clustering-cpu-only"
        ),
        pytest.param(
            GpuPackingScore(), [1000, 1000], None, SHARE_300, 31, id="packing-all-free-max(33-2,2)"
        ),
        pytest.param(
            GpuPackingScore(), [1000, 500], None, SHARE_300, 95, id="packing-partly-used-100-50//10"
        ),
        pytest.param(
            GpuPackingScore(), [1000, 500], None, SHARE_600, 49, id="packing-needs-a-free-device"
        ),
        pytest.param(GpuPackingScore(), [1000, 500], None, ONE_GPU, 49, id="packing-whole"),
        pytest.param(GpuPackingScore(), [1000, 500], None, CPU_ONLY, 0, id="packing-cpu-only"),
    ],
)
def test_paper_scores(
    plugin: ScorePlugin, gpu_free: list[int], tags: dict[int, int] | None, pod: Pod, expected: int
) -> None:
    assert score(plugin, one_row(gpu_free, tags=tags), pod) == expected


def test_fgd_scores_the_best_device() -> None:
    # One target type (1 CPU, 500 milli) with p=1. F=300 now. A 200 share on the 300 device
    # leaves 100: delta 200 -> int(100*sigmoid(0.2)) = 54; on the free device delta 0 -> 50.
    table = one_row([1000, 300], cpu_free=4000)
    plugin = FgdScore(FragmentationModel(table, TargetWorkload((PodShape(1000, 500, 1),), (1.0,))))
    engine = PlacementEngine(
        table, make_policy("bestfit", table, PolicyContext(TargetWorkload((), ())))
    )
    demand = engine.demand(make_pod(cpu=1000, milli=200))
    device_scores = plugin.device_scores(np.array([0]), demand)[0]
    assert device_scores[:2].tolist() == [50, 54]
    assert plugin.score(table, demand, np.array([0]))[0] == 54


def test_bestfit_normalises_to_0_100_over_feasible_nodes() -> None:
    scores = BestFitScore().normalize(np.array([75.0, 60.0, 70.0]))
    assert scores.tolist() == [100.0, 0.0, 66.0]
    assert BestFitScore().normalize(np.array([5.0, 5.0])).tolist() == [0.0, 0.0]


def test_random_score_picks_exactly_one_row() -> None:
    plugin = RandomScore(np.random.default_rng(1))
    table = NodeTable(make_cluster(5, gpus=1))
    engine = PlacementEngine(
        table, make_policy("random", table, PolicyContext(TargetWorkload((), ()), 1))
    )
    scores = plugin.score(table, engine.demand(ONE_GPU), np.arange(5))
    assert sorted(scores.tolist()) == [0, 0, 0, 0, 100]


@pytest.mark.parametrize(
    ("policy", "typical_milli", "expected_devices"),
    [
        pytest.param("bestfit", 300, (1,), id="bestfit-least-left"),
        pytest.param("dotprod", 300, (1,), id="dotprod-least-left"),
        pytest.param("gpu-packing", 300, (1,), id="packing-least-left"),
        # Devices left [1000, 400, 700]; typical 500: F=400; a 400 share on device 1 leaves
        # F=0 (score 59), on device 0 F=400 (50), on device 2 F=700 (42).
        pytest.param("fgd", 500, (1,), id="fgd-argmax"),
        # Typical 300: every device keeps F=0, all score 50: the first device wins.
        pytest.param("fgd", 300, (0,), id="fgd-first-on-ties"),
    ],
)
def test_shared_pod_device_choice(
    policy: str, typical_milli: int, expected_devices: tuple[int, ...]
) -> None:
    node = make_node("n", gpus=3)
    table = NodeTable([node])
    table.allocate(Claim(0, 0, 0, (1,), 600))
    table.allocate(Claim(0, 0, 0, (2,), 300))
    pods = [make_pod(milli=typical_milli)] * 4
    engine = PlacementEngine(table, make_policy(policy, table, PolicyContext(typical_shapes(pods))))
    result = engine.place(make_pod(milli=400))
    assert isinstance(result, Bound)
    assert result.placement.gpu_indices == expected_devices


def test_whole_gpu_pods_take_the_first_free_devices() -> None:
    table = NodeTable([make_node("n", gpus=4)])
    table.allocate(Claim(0, 0, 0, (0,), 500))
    engine = PlacementEngine(
        table, make_policy("bestfit", table, PolicyContext(TargetWorkload((), ())))
    )
    result = engine.place(make_pod(gpus=2))
    assert isinstance(result, Bound)
    assert result.placement.gpu_indices == (1, 2)


def test_every_named_policy_places_a_pod() -> None:
    for name in POLICY_NAMES:
        table = NodeTable(make_cluster(3, gpus=2))
        pods = [make_pod(milli=500), make_pod(gpus=1), make_pod(cpu=2000)]
        engine = PlacementEngine(
            table, make_policy(name, table, PolicyContext(typical_shapes(pods)))
        )
        for pod in pods:
            assert isinstance(engine.place(pod), Bound), name


def test_unknown_policy_is_reported_with_the_choices() -> None:
    table = NodeTable(make_cluster(1))
    with pytest.raises(UnknownPolicyError, match="choose one of: random, dotprod"):
        make_policy("best-fit", table, PolicyContext(TargetWorkload((), ())))


def test_every_named_policy_is_built_and_every_built_policy_is_named() -> None:
    """The names a command checks before it imports the policies are the policies there are."""
    from gpufleet.scheduling.policies import POLICY_FACTORIES
    from gpufleet.scheduling.registry import Registry

    assert tuple(POLICY_FACTORIES) == POLICY_NAMES
    assert tuple(Registry.default().policies) == POLICY_NAMES
