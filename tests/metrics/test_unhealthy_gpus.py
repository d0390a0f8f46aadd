"""``gpufleet_gpu_unhealthy``: every world says which GPUs its scheduler withholds as unhealthy,
by node and index, with the same samples: a simulation's report (a GpuFault), ``gpufleet
serve`` over the simulated cluster (a scenario's fault on its clock) and ``gpufleet scheduler``
on Kubernetes (the node agent's inventory annotation). GPU 1 of node n1 (4 GPUs) fails at the
start; the others have no series."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.backends.sim.run import run_workloads
from gpufleet.io.kube.nodes import node_from_object
from gpufleet.metrics import families
from gpufleet.model.faults import GpuFault
from gpufleet.model.workload import TimedWorkload
from gpufleet.service.plane_book import ServeOptions
from gpufleet.testing import kube_objects as ko
from gpufleet.testing.builders import make_workload
from gpufleet.testing.service import make_harness
from tests.backends.kube.harness import harness
from tests.backends.kube.test_device_health import with_inventory
from tests.metrics.test_worlds import Families, scraped

NAME = families.UNHEALTHY_GPUS.name
NODE = ko.gpu_node("n1", gpus=4)
FAULT = GpuFault(0.0, "n1", 1, 79)
EXPECTED = {f'{NAME}{{gpu="1",node="n1"}}': 1.0}


def simulation(_: Path) -> Families:
    workload = TimedWorkload(make_workload("w", gpus=1), 0.0, 60.0)
    run = run_workloads([node_from_object(NODE, "test")], [workload], "bestfit", 0, faults=[FAULT])
    return run.replay.metrics


def serve_embedded(tmp_path: Path) -> Families:
    options = ServeOptions(speed=60.0, faults=(FAULT,))
    served = make_harness(tmp_path, [node_from_object(NODE, "test")], options=options)
    served.advance(1.0)
    try:
        return scraped(served.client("metrics").get("/metrics").text)
    finally:
        served.close()


def scheduler(_: Path) -> Families:
    node = with_inventory(ko.gpu_node("n1", gpus=4), 4, {1})
    with harness(node) as h:
        h.until(lambda: h.scheduler.core is not None, what="a core")
        h.settle()
        return scraped(h.scheduler.metrics.exposition().decode())


WORLDS: dict[str, Callable[[Path], Families]] = {
    "simulation-report": simulation,
    "serve-embedded": serve_embedded,
    "gpufleet-scheduler": scheduler,
}


@pytest.mark.parametrize("world", WORLDS.values(), ids=WORLDS.keys())
def test_every_world_names_the_gpus_it_withholds(
    world: Callable[[Path], Families], tmp_path: Path
) -> None:
    assert world(tmp_path)[NAME] == EXPECTED


def test_a_recovered_gpu_has_no_series_left(tmp_path: Path) -> None:
    options = ServeOptions(speed=60.0, faults=(GpuFault(0.0, "n1", 1, 79, recover_after=60),))
    served = make_harness(tmp_path, [node_from_object(NODE, "test")], options=options)
    served.advance(1.0)
    assert scraped(served.client("metrics").get("/metrics").text)[NAME] == EXPECTED
    served.advance(120.0)
    assert scraped(served.client("metrics").get("/metrics").text)[NAME] == {}
    served.close()
