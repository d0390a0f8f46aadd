"""The simulator (issue 26, item 3): a workload that names another team's queue from a
namespace that queue does not admit never runs and is reported waiting for "namespace"; the
team's own runs. The same core decides as in every other world."""

from __future__ import annotations

from gpufleet.backends.sim.run import run_workloads
from gpufleet.model.queues import NAMESPACE_NOT_ADMITTED, Queue
from gpufleet.model.resources import GPU
from gpufleet.model.workload import TimedWorkload
from gpufleet.testing.builders import make_node, make_workload


def test_a_workload_of_a_namespace_its_queue_does_not_admit_waits_to_the_end() -> None:
    queues = {"team-a": Queue("team-a", nominal={GPU: 4000})}
    own = make_workload("train", "team-a", gpus=2, namespace="team-a")
    grab = make_workload("grab", "team-a", gpus=2, namespace="team-b", priority=1000)
    run = run_workloads(
        [make_node("n", gpus=4)],
        [TimedWorkload(own, 0.0, 60.0), TimedWorkload(grab, 0.0, 60.0)],
        "bestfit",
        0,
        queues,
    )
    (waiting,) = run.waiting_at_end
    assert (waiting.workload, waiting.waiting_for) == (grab.key, NAMESPACE_NOT_ADMITTED)
    assert "namespace team-b is not admitted by queue team-a" in waiting.message
