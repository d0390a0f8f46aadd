"""The admission pipeline's outcome per case: one attempt of the head of a group answers
Admitted, Preempted or Blocked (with its Parked reason), on a queue without GPU models (the
implicit flavor) as on one that lists them, and does what it answers (binds, evicts, or
parks the group told why)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from gpufleet.model import Node
from gpufleet.model.actions import Action, Bind, Evict
from gpufleet.model.events import WorkloadAdded
from gpufleet.model.queues import Queue
from gpufleet.model.resources import GPU, gpu_model_key
from gpufleet.model.workload import Workload
from gpufleet.scheduling.admission_pipeline import Admitted, Blocked, Outcome, Preempted
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.holds import HELD_FOR_PREEMPTOR
from gpufleet.scheduling.pending import Parked
from gpufleet.scheduling.profile import DEFAULT_PROFILE, Profile
from gpufleet.scheduling.registry import Registry
from gpufleet.testing.builders import make_node, make_queue, make_workload
from gpufleet.testing.fakes import EchoCluster, make_core
from tests.scheduling.test_profiles import registry_with_toy_check

H100, A100 = "H100", "A100"
LATER = 1_000.0  # past every running workload's minimum run time
ALL = frozenset({"default"})
#: A profile whose admission check lets a namespace hold at most 1 GPU.
ONE_GPU_PER_NAMESPACE = Profile.from_mapping(
    {"name": "toy", "admissionChecks": [{"name": "gpus-per-namespace", "args": {"gpus": 1}}]}
)


@dataclass(frozen=True)
class Expected:
    """The outcome's kind; for Blocked, its reason and a part of what it is told; for
    Preempted, the model it preempted on; for Admitted, the nodes its pods go to."""

    kind: type[Admitted | Preempted | Blocked]
    reason: Parked | None = None
    told: str = ""
    model: str | None = None
    nodes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Case:
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    subject: Workload
    expected: Expected
    #: Started first (at t=0), in this order.
    running: tuple[Workload, ...] = ()
    allow_preemption: bool = True
    profile: Profile = DEFAULT_PROFILE
    registry: Registry | None = None
    #: A preemptor holding room (its queue, GPUs) whose victims are still leaving.
    held_for: tuple[str, int] | None = None


def one_node(gpus: int = 4, model: str = "A100") -> tuple[Node, ...]:
    return (make_node("n0", gpus=gpus, model=model),)


def model_nodes() -> tuple[Node, ...]:
    return (make_node("h", gpus=2, model=H100), make_node("a", gpus=2, model=A100))


def models_queue(name: str = "q", **options: object) -> Queue:
    return make_queue(name, gpu_models=(H100, A100), **options)  # type: ignore[arg-type]


def per_model_queues() -> tuple[Queue, ...]:
    """Queue chat has nominal quota for H100s only; batch for A100s only."""
    chat = Queue("chat", nominal={GPU: 1000, gpu_model_key(H100): 1000}, admitted_namespaces=ALL)
    batch = Queue("batch", nominal={GPU: 1000, gpu_model_key(A100): 1000}, admitted_namespaces=ALL)
    return chat, batch


def non_preemptible_share(name: str, models: list[str]) -> Workload:
    return make_workload(name, "chat", gpus=0, milli=500, preemptible=False, models=models)


CASES = [
    pytest.param(
        Case(one_node(), (make_queue("q"),), make_workload("w", "q", gpus=2), Expected(Admitted)),
        id="admitted",
    ),
    pytest.param(
        Case(
            one_node(),
            (make_queue("q", admitted_namespaces=("team-a",)),),
            make_workload("w", "q"),
            Expected(Blocked, Parked.QUEUE_POLICY, "namespace default is not admitted by queue q"),
        ),
        id="queue-policy-refused",
    ),
    pytest.param(
        Case(
            one_node(),
            (make_queue("q"),),
            make_workload("w", "q", gpus=2),
            Expected(
                Blocked,
                Parked.ADMISSION_CHECK,
                "waiting for admission check gpus-per-namespace: namespace default would hold",
            ),
            profile=ONE_GPU_PER_NAMESPACE,
            registry=registry_with_toy_check(),
        ),
        id="admission-check-refused",
    ),
    pytest.param(
        Case(
            one_node(),
            (make_queue("q", 2, borrow=0),),
            make_workload("w", "q", gpus=1),
            Expected(Blocked, Parked.QUOTA, "waiting for quota: queue q"),
            running=(make_workload("r", "q", gpus=2, priority=5),),
        ),
        id="quota-refused-nothing-to-preempt",
    ),
    pytest.param(
        Case(
            one_node(),
            (make_queue("q", 2, borrow=0),),
            make_workload("w", "q", gpus=1, priority=5),
            Expected(Preempted),
            running=(make_workload("r", "q", gpus=2),),
        ),
        id="quota-refused-preempts",
    ),
    pytest.param(
        Case(
            one_node(2),
            (make_queue("q"),),
            make_workload("w", "q", gpus=1, priority=5, never_preempt=True),
            Expected(Blocked, Parked.CAPACITY, "0/1 nodes are available"),
            running=(make_workload("r", "q", gpus=2),),
        ),
        id="capacity-without-preemption",
    ),
    pytest.param(
        Case(
            one_node(2),
            (make_queue("q"),),
            make_workload("w", "q", gpus=1, priority=5),
            Expected(Blocked, Parked.CAPACITY, "0/1 nodes are available"),
            running=(make_workload("r", "q", gpus=2),),
            allow_preemption=False,
        ),
        id="capacity-preemption-not-allowed",
    ),
    pytest.param(
        Case(
            one_node(2),
            (make_queue("q"),),
            make_workload("w", "q", gpus=1, priority=5),
            Expected(Preempted),
            running=(make_workload("r", "q", gpus=2),),
        ),
        id="capacity-with-preemption",
    ),
    # The pod allows A100 or H100, its queue has quota for H100s only: placed where the
    # engine prefers (an A100), the exact quota refuses it, and it is placed again on the
    # models its quota has room on.
    pytest.param(
        Case(
            (make_node("a100", gpus=2, model=A100), make_node("h100", gpus=2, model=H100)),
            per_model_queues(),
            non_preemptible_share("serve", [A100, H100]),
            Expected(Admitted, nodes=frozenset({"h100"})),
        ),
        id="model-quota-retry-admits",
    ),
    # ... and with no node of a model it has quota for, it waits for quota without
    # preempting (the batch queue's A100 work is not its to take).
    pytest.param(
        Case(
            (make_node("a100", gpus=2, model=A100),),
            per_model_queues(),
            non_preemptible_share("serve", [A100, H100]),
            Expected(
                Blocked,
                Parked.QUOTA,
                f"queue chat: {gpu_model_key(A100)} would be 0.5 of at most 0",
            ),
        ),
        id="model-quota-retry-fails",
    ),
    pytest.param(
        Case(
            (*one_node(2), make_node("n1", gpus=2)),
            (make_queue("q"), make_queue("x", 1, borrow=0)),
            make_workload("w", "q", gpus=1),
            Expected(Blocked, Parked.QUOTA, HELD_FOR_PREEMPTOR),
            held_for=("x", 2),
        ),
        id="held-for-preemptor-before-placing",
    ),
    pytest.param(
        Case(
            (*one_node(2), make_node("n1", gpus=2)),
            (make_queue("q"), make_queue("x", 1, borrow=0)),
            make_workload("w", "q", gpus=0, milli=500),
            Expected(Blocked, Parked.QUOTA, HELD_FOR_PREEMPTOR),
            held_for=("x", 2),
        ),
        id="held-for-preemptor-once-placed",
    ),
    pytest.param(
        Case(
            model_nodes(),
            (models_queue(),),
            make_workload("w", "q", gpus=2),
            Expected(Admitted, nodes=frozenset({"a"})),
            running=(make_workload("r", "q", gpus=2, models=[H100]),),
        ),
        id="gpu-models-next-model-admits",
    ),
    pytest.param(
        Case(
            model_nodes(),
            (models_queue(),),
            make_workload("w", "q", gpus=2, never_preempt=True),
            Expected(Blocked, Parked.CAPACITY, f"{H100}: 0/2 nodes are available"),
            running=(
                make_workload("r1", "q", gpus=2, models=[H100]),
                make_workload("r2", "q", gpus=2, models=[A100]),
            ),
        ),
        id="gpu-models-every-model-full",
    ),
    pytest.param(
        Case(
            model_nodes(),
            (models_queue(),),
            make_workload("w", "q", gpus=2, priority=5),
            Expected(Preempted, model=H100),
            running=(
                make_workload("r1", "q", gpus=2, models=[H100]),
                make_workload("r2", "q", gpus=2, models=[A100]),
            ),
        ),
        id="gpu-models-preempts-on-the-first-model",
    ),
]


def attempt(case: Case) -> tuple[SchedulerCore, Outcome, list[Action]]:
    """Start ``case.running``, then one attempt of ``case.subject`` as the head of its group."""
    core = make_core(
        case.nodes, case.queues, profile=case.profile, registry=case.registry, min_runtime=0.0
    )
    EchoCluster(core).submit(*case.running, now=0.0)
    core.now = LATER
    if case.held_for is not None:
        queue, gpus = case.held_for
        preemptor = make_workload("preemptor", queue, gpus=gpus, priority=9)
        core.state.holds.hold(preemptor, {GPU: gpus * 1000}, np.array([], np.int64), {"gone"})
    core.handle(WorkloadAdded(case.subject))
    group = core.pending.group_of(case.subject.key)
    assert group is not None
    assert group.head.workload is case.subject
    actions: list[Action] = []
    outcome = core.admission.attempt(group, actions, case.allow_preemption)
    return core, outcome, actions


@pytest.mark.parametrize("case", CASES)
def test_the_pipeline_answers_and_does_what_it_answers(case: Case) -> None:
    core, outcome, actions = attempt(case)
    expected = case.expected
    assert type(outcome) is expected.kind, outcome
    key = case.subject.key
    group = core.pending.group_of(key)
    if isinstance(outcome, Admitted):
        assert key in core.running
        assert group is None
        bound = {a.placement.node for a in actions if isinstance(a, Bind)}
        assert not expected.nodes or bound == expected.nodes
    elif isinstance(outcome, Preempted):
        assert outcome.model == expected.model
        assert any(isinstance(a, Evict) for a in actions)
        assert key in core.nominated
    else:
        assert isinstance(outcome, Blocked)
        assert outcome.reason is expected.reason
        assert expected.told in outcome.message
        assert group is not None
        assert group.parked is expected.reason
        assert not any(isinstance(a, Bind | Evict) for a in actions)


@pytest.mark.parametrize(
    ("queue", "reserves"),
    [
        pytest.param(make_queue("q"), True, id="blocked-by-capacity-reserves"),
        pytest.param(make_queue("q", 2, borrow=0), False, id="blocked-by-quota-does-not"),
    ],
)
def test_a_gang_blocked_by_capacity_gets_a_backfill_reservation(
    queue: Queue, reserves: bool
) -> None:
    gang = make_workload("w", "q", pods=2, gpus=1, never_preempt=True)
    case = Case(one_node(2), (queue,), gang, Expected(Blocked), (make_workload("r", "q", gpus=2),))
    core, outcome, _ = attempt(case)
    assert isinstance(outcome, Blocked)
    reservation = core.reservation
    assert (reservation is not None and reservation.owner == gang.key) is reserves
