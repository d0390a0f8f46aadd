"""The pending pod's chosen devices, and nothing else, for each container the kubelet admits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.allocation import (
    GPU_MILLI_ENV,
    MISMATCH_REASON,
    MPS_MEMORY_ENV,
    MPS_PIPE_ENV,
    MPS_THREADS_ENV,
    VISIBLE_DEVICES_ENV,
    AllocationMismatchError,
    AllocationSettings,
    Allocator,
    MpsSettings,
)
from gpufleet.agent.binding_trust import NO_TRUST, UNTRUSTED_REASON, BindingTrust
from gpufleet.agent.bound_pods import BoundPod
from gpufleet.agent.resources import replica_id, served_resources, share_id
from gpufleet.io.kube.annotations import GPU_INDEX_ANNOTATION
from gpufleet.io.kube.binding_signature import BINDING_SIGNATURE_ANNOTATION, BindingKey
from gpufleet.model.gpu import (
    GPU_RESOURCE,
    NO_SHARING,
    SHARE_RESOURCE,
    GpuSharing,
    SharingStrategy,
)
from gpufleet.testing.agent_builders import (
    TEST_BINDING_KEY,
    TEST_NODE,
    bound_pod,
    gpu_inventory,
    gpu_uuid,
    mig_uuid,
)

MIG_1G = "nvidia.com/mig-1g.10gb"
ALL_GPUS = [gpu_uuid(i) for i in range(4)]


TRUST = BindingTrust(TEST_NODE, TEST_BINDING_KEY)


def signed_settings(sharing: GpuSharing = NO_SHARING, **settings: Any) -> AllocationSettings:
    """The settings of an agent holding the tests' binding key on the tests' node."""
    return AllocationSettings(sharing, **{"trust": TRUST, **settings})


def allocator(settings: AllocationSettings | None = None, **inventory: object) -> Allocator:
    return Allocator(gpu_inventory(**inventory), settings or signed_settings())  # type: ignore[arg-type]


def test_preferred_is_the_chosen_devices_of_the_oldest_pending_pod() -> None:
    pods = [
        bound_pod("late", units=2, gpu_index=[0, 1]),
        bound_pod("early", units=2, gpu_index=[3, 2], bind_order=0),
    ]
    chosen = allocator().preferred(GPU_RESOURCE, pods, ALL_GPUS, (), 2)
    assert chosen == (gpu_uuid(3), gpu_uuid(2))


def test_preferred_skips_pods_asking_another_size() -> None:
    pods = [
        bound_pod("one", units=1, gpu_index=[0], bind_order=0),
        bound_pod("two", units=2, gpu_index=[2, 3]),
    ]
    assert allocator().preferred(GPU_RESOURCE, pods, ALL_GPUS, (), 2) == (gpu_uuid(2), gpu_uuid(3))


def test_preferred_without_a_pending_pod_takes_the_kubelets_order() -> None:
    assert allocator().preferred(GPU_RESOURCE, [], ALL_GPUS, (gpu_uuid(3),), 2) == (
        gpu_uuid(3),
        gpu_uuid(0),
    )


def test_allocate_whole_gpus() -> None:
    pod = bound_pod("train", units=2, gpu_index=[1, 3])
    grant = allocator().allocate(GPU_RESOURCE, [pod], (gpu_uuid(3), gpu_uuid(1)))
    assert grant.envs[VISIBLE_DEVICES_ENV] == f"{gpu_uuid(3)},{gpu_uuid(1)}"
    assert grant.envs[GPU_MILLI_ENV] == "1000"
    assert grant.cdi_devices == ()


def test_allocate_with_cdi_answers_device_names() -> None:
    pod = bound_pod("train", gpu_index=[2])
    grant = allocator(signed_settings(cdi=True)).allocate(GPU_RESOURCE, [pod], (gpu_uuid(2),))
    assert grant.cdi_devices == (f"nvidia.com/gpu={gpu_uuid(2)}",)
    assert VISIBLE_DEVICES_ENV not in grant.envs


def test_a_pod_is_allocated_once() -> None:
    alloc = allocator()
    pod = bound_pod("train", gpu_index=[2])
    alloc.allocate(GPU_RESOURCE, [pod], (gpu_uuid(2),))
    with pytest.raises(AllocationMismatchError, match="no pod bound to this node waits"):
        alloc.allocate(GPU_RESOURCE, [pod], (gpu_uuid(2),))


@pytest.mark.parametrize(
    ("pods", "offered", "message"),
    [
        pytest.param(
            [bound_pod("a", units=2, gpu_index=[0, 1])],
            (gpu_uuid(0), gpu_uuid(2)),
            "pod ml/a was bound to GPU-00000000",
            id="another-gpu",
        ),
        pytest.param([], (gpu_uuid(0),), "no pod bound to this node waits for 1", id="no-pod"),
        pytest.param(
            [bound_pod("plain", gpu_index=[])],
            (gpu_uuid(0),),
            "carries no gpufleet.dev/gpu-index binding",
            id="no-binding",
        ),
        pytest.param(
            [bound_pod("gone", gpu_index=[9])],
            (gpu_uuid(0),),
            "bound to GPU 9, which serves no GPU",
            id="unknown-index",
        ),
    ],
)
def test_mismatch_names_pod_and_devices(
    pods: list[BoundPod], offered: tuple[str, ...], message: str
) -> None:
    with pytest.raises(AllocationMismatchError, match=message) as caught:
        allocator().allocate(GPU_RESOURCE, pods, offered)
    event = caught.value.event("gpu-1")
    assert event.reason == MISMATCH_REASON
    assert all(uuid in event.message for uuid in offered)
    if pods:
        assert (event.kind, event.namespace, event.name) == ("Pod", "ml", pods[0].name)
    else:
        assert (event.kind, event.name) == ("Node", "gpu-1")


OTHER_KEY = BindingKey(b"not-the-clusters-key-but-long-enough-0123456789")


def _with_signature_of(pod: BoundPod, donor: BoundPod) -> BoundPod:
    """``pod`` wearing ``donor``'s (valid) signature."""
    signature = donor.annotations[BINDING_SIGNATURE_ANNOTATION]
    return replace(pod, annotations={**pod.annotations, BINDING_SIGNATURE_ANNOTATION: signature})


HOLDER = bound_pod("holder", namespace="team-a", gpu_index=[3])


@pytest.mark.parametrize(
    ("pod", "trust", "why"),
    [
        pytest.param(
            bound_pod("thief", resource=SHARE_RESOURCE, gpu_index=[3], signed_with=None),
            TRUST,
            f"carries no {BINDING_SIGNATURE_ANNOTATION}",
            id="unsigned",
        ),
        pytest.param(
            bound_pod(
                "thief",
                resource=SHARE_RESOURCE,
                gpu_index=[3],
                signed_with=None,
                scheduler_name="default-scheduler",
            ),
            TRUST,
            "spec.schedulerName 'default-scheduler'",
            id="default-scheduler",
        ),
        pytest.param(
            bound_pod("thief", resource=SHARE_RESOURCE, gpu_index=[3], scheduler_name=""),
            TRUST,
            "spec.schedulerName 'unset'",
            id="signed-but-not-gpufleets-pod",
        ),
        pytest.param(
            bound_pod(
                "thief",
                resource=SHARE_RESOURCE,
                gpu_index=[0],
                extra_annotations={GPU_INDEX_ANNOTATION: "3"},
            ),
            TRUST,
            "does not verify",
            id="index-changed-after-signing",
        ),
        pytest.param(
            _with_signature_of(
                bound_pod("thief", resource=SHARE_RESOURCE, gpu_index=[3], signed_with=None),
                HOLDER,
            ),
            TRUST,
            "does not verify",
            id="signature-of-another-pod",
        ),
        pytest.param(
            bound_pod("thief", resource=SHARE_RESOURCE, gpu_index=[3], node="gpu-2"),
            TRUST,
            "does not verify",
            id="signed-for-another-node",
        ),
        pytest.param(
            bound_pod("thief", resource=SHARE_RESOURCE, gpu_index=[3], signed_with=OTHER_KEY),
            TRUST,
            "does not verify",
            id="signed-with-another-key",
        ),
        pytest.param(
            bound_pod("thief", resource=SHARE_RESOURCE, gpu_index=[3]),
            NO_TRUST,
            "no binding key",
            id="agent-without-a-key",
        ),
        pytest.param(
            bound_pod(
                "thief",
                resource=SHARE_RESOURCE,
                gpu_index=[3],
                signed_with=None,
                scheduler_name="default-scheduler",
            ),
            BindingTrust(TEST_NODE, unsigned=True),
            "spec.schedulerName 'default-scheduler'",
            id="insecure-agent-still-checks-the-scheduler",
        ),
    ],
)
def test_a_binding_gpufleet_did_not_sign_gets_no_device(
    pod: BoundPod, trust: BindingTrust, why: str
) -> None:
    alloc = allocator(signed_settings(trust=trust))
    slot = (share_id(gpu_uuid(0), 0),)
    assert alloc.preferred(SHARE_RESOURCE, [pod], [slot[0]], (), 1) == slot  # no preference
    with pytest.raises(AllocationMismatchError, match=why) as caught:
        alloc.allocate(SHARE_RESOURCE, [pod], slot)
    assert caught.value.reason == UNTRUSTED_REASON
    event = caught.value.event(TEST_NODE)
    assert (event.reason, event.kind, event.name, event.type) == (
        UNTRUSTED_REASON,
        "Pod",
        "thief",
        "Warning",
    )
    assert why in event.message


def test_an_insecure_agent_honours_gpufleets_unsigned_bindings() -> None:
    alloc = allocator(signed_settings(trust=BindingTrust(TEST_NODE, unsigned=True)))
    pod = bound_pod("notebook", resource=SHARE_RESOURCE, gpu_index=[2], signed_with=None)
    grant = alloc.allocate(SHARE_RESOURCE, [pod], (share_id(gpu_uuid(0), 0),))
    assert grant.devices == (gpu_uuid(2),)


def test_an_untrusted_pod_waiting_first_is_refused_not_given_a_younger_pods_devices() -> None:
    """Share slots are counting tokens: the kubelet's IDs do not say which pod they are for.
    When the oldest waiting pod is a forger's, its Allocate is refused rather than matched to
    the devices the scheduler chose for the next pod (which it would take from that pod)."""
    thief = bound_pod(
        "thief", resource=SHARE_RESOURCE, gpu_index=[3], signed_with=None, bind_order=0
    )
    honest = bound_pod("notebook", resource=SHARE_RESOURCE, gpu_index=[1], milli=500)
    alloc = allocator()
    with pytest.raises(AllocationMismatchError, match="ml/thief") as caught:
        alloc.allocate(SHARE_RESOURCE, [thief, honest], (share_id(gpu_uuid(0), 0),))
    assert caught.value.reason == UNTRUSTED_REASON
    # The kubelet fails the refused pod; it leaves, and the honest one is admitted.
    grant = alloc.allocate(SHARE_RESOURCE, [honest], (share_id(gpu_uuid(0), 0),))
    assert grant.devices == (gpu_uuid(1),)


def test_the_offered_ids_name_the_pod_when_two_wait() -> None:
    pods = [bound_pod("a", gpu_index=[0], bind_order=0), bound_pod("b", gpu_index=[1])]
    grant = allocator().allocate(GPU_RESOURCE, pods, (gpu_uuid(1),))
    assert grant.devices == (gpu_uuid(1),)
    assert allocator().preferred(GPU_RESOURCE, pods, ALL_GPUS, (), 1) == (gpu_uuid(0),)


def test_containers_get_disjoint_subsets_in_order() -> None:
    alloc = allocator()
    pod = bound_pod("multi", units=[1, 2], gpu_index=[0, 1, 2])
    first = alloc.preferred(GPU_RESOURCE, [pod], ALL_GPUS, (), 1)
    assert first == (gpu_uuid(0),)
    alloc.allocate(GPU_RESOURCE, [pod], first)
    second = alloc.preferred(GPU_RESOURCE, [pod], ALL_GPUS[1:], (), 2)
    assert second == (gpu_uuid(1), gpu_uuid(2))
    with pytest.raises(AllocationMismatchError):
        alloc.allocate(GPU_RESOURCE, [pod], (gpu_uuid(0), gpu_uuid(1)))
    assert alloc.allocate(GPU_RESOURCE, [pod], second).devices == second


def test_init_container_devices_are_reused() -> None:
    alloc = allocator()
    pod = bound_pod("with-init", units=2, init_units=1, gpu_index=[0, 1])
    assert alloc.allocate(GPU_RESOURCE, [pod], (gpu_uuid(1),)).devices == (gpu_uuid(1),)
    grant = alloc.allocate(GPU_RESOURCE, [pod], (gpu_uuid(0), gpu_uuid(1)))
    assert grant.devices == (gpu_uuid(0), gpu_uuid(1))


def test_time_sliced_replicas_land_on_the_chosen_gpu() -> None:
    sharing = GpuSharing(SharingStrategy.TIME_SLICING, 4)
    alloc = allocator(signed_settings(sharing))
    pod = bound_pod("replica", gpu_index=[2], milli=250)
    available = [replica_id(gpu_uuid(g), n) for g in range(4) for n in range(4)]
    chosen = alloc.preferred(GPU_RESOURCE, [pod], available, (), 1)
    assert chosen == (replica_id(gpu_uuid(2), 0),)
    with pytest.raises(AllocationMismatchError):
        alloc.allocate(GPU_RESOURCE, [pod], (replica_id(gpu_uuid(1), 0),))
    grant = alloc.allocate(GPU_RESOURCE, [pod], (replica_id(gpu_uuid(2), 3),))
    assert grant.envs[VISIBLE_DEVICES_ENV] == gpu_uuid(2)
    assert grant.envs[GPU_MILLI_ENV] == "250"


def test_share_on_an_mps_node_gets_the_mps_limits() -> None:
    mps = MpsSettings("/var/lib/kubelet/device-plugins")
    alloc = allocator(signed_settings(mps=mps), memory_mib=40960)
    pod = bound_pod("notebook", resource=SHARE_RESOURCE, gpu_index=[3], milli=250)
    slots = [share_id(gpu_uuid(g), n) for g in range(4) for n in range(2)]
    chosen = alloc.preferred(SHARE_RESOURCE, [pod], slots, (), 1)
    assert chosen == (share_id(gpu_uuid(3), 0),)
    # A share slot is a counting token: any slot admits the pod onto its chosen GPU.
    grant = alloc.allocate(SHARE_RESOURCE, [pod], (share_id(gpu_uuid(0), 1),))
    assert grant.envs[VISIBLE_DEVICES_ENV] == gpu_uuid(3)
    assert grant.envs[GPU_MILLI_ENV] == "250"
    assert grant.envs[MPS_THREADS_ENV] == "25"
    assert grant.envs[MPS_MEMORY_ENV] == "0=10240M"
    assert grant.envs[MPS_PIPE_ENV] == "/mps/nvidia.com/gpu/pipe"
    assert (
        "/mps/nvidia.com/gpu/pipe",
        "/var/lib/kubelet/device-plugins/mps/nvidia.com/gpu/pipe",
    ) in {(m.container_path, m.host_path) for m in grant.mounts}


def test_share_without_mps_gets_no_mps_settings() -> None:
    pod = bound_pod("notebook", resource=SHARE_RESOURCE, gpu_index=[1], milli=500)
    grant = allocator().allocate(SHARE_RESOURCE, [pod], (share_id(gpu_uuid(1), 0),))
    assert grant.envs == {VISIBLE_DEVICES_ENV: gpu_uuid(1), GPU_MILLI_ENV: "500"}
    assert grant.mounts == ()


def test_share_slots_run_out_on_the_chosen_gpu_then_any_slot_is_preferred() -> None:
    pod = bound_pod("notebook", resource=SHARE_RESOURCE, gpu_index=[1], milli=100)
    free = [share_id(gpu_uuid(0), 0), share_id(gpu_uuid(2), 1)]
    assert allocator().preferred(SHARE_RESOURCE, [pod], free, (), 1) == (free[0],)


def test_mig_instances_by_slot() -> None:
    alloc = allocator(count=2, mig={1: ["3g.40gb", "1g.10gb", "1g.10gb"]})
    pod = bound_pod("small", resource=MIG_1G, mig_slices=[(1, 2)])
    available = [mig_uuid(1, 1), mig_uuid(1, 2)]
    assert alloc.preferred(MIG_1G, [pod], available, (), 1) == (mig_uuid(1, 2),)
    with pytest.raises(AllocationMismatchError, match="MIG-00000001-01"):
        alloc.allocate(MIG_1G, [pod], (mig_uuid(1, 1),))
    grant = alloc.allocate(MIG_1G, [pod], (mig_uuid(1, 2),))
    assert grant.envs == {VISIBLE_DEVICES_ENV: mig_uuid(1, 2)}


def test_mark_allocated_after_a_restart() -> None:
    alloc = allocator()
    done = bound_pod("done", gpu_index=[0], bind_order=0)
    waiting = bound_pod("waiting", gpu_index=[1])
    alloc.mark_allocated([done, waiting], {done.key: {GPU_RESOURCE}})
    assert alloc.preferred(GPU_RESOURCE, [done, waiting], ALL_GPUS, (), 1) == (gpu_uuid(1),)


# -- the invariant, whatever the kubelet offers ------------------------------------------------


@st.composite
def bindings(draw: st.DrawFn) -> list[tuple[int, ...]]:
    """Disjoint GPU choices of 8 devices, one per pod, as the scheduler makes them."""
    order = draw(st.permutations(range(8)))
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=6))
    out: list[tuple[int, ...]] = []
    at = 0
    for size in sizes:
        if at + size > 8:
            break
        out.append(tuple(order[at : at + size]))
        at += size
    return out


@settings(max_examples=150, deadline=None)
@given(
    choices=bindings(),
    follow=st.lists(st.booleans(), min_size=12, max_size=12),
    offsets=st.lists(st.integers(0, 7), min_size=12, max_size=12),
    extra=st.lists(st.integers(1, 3), max_size=3),
)
def test_no_two_containers_ever_get_the_same_whole_gpu(
    choices: list[tuple[int, ...]], follow: list[bool], offsets: list[int], extra: Sequence[int]
) -> None:
    """The kubelet follows the preference or offers free GPUs of its own choosing; pods
    without a binding ask too. Whatever is granted is the pod's own and no GPU is granted
    twice."""
    inventory = gpu_inventory(8)
    alloc = Allocator(inventory, signed_settings())
    ids = [d.id for d in served_resources(inventory)[GPU_RESOURCE]]
    pods = [bound_pod(f"p{i}", units=len(c), gpu_index=c) for i, c in enumerate(choices)]
    pods += [bound_pod(f"stray{i}", units=n) for i, n in enumerate(extra)]
    held: dict[str, str] = {}
    for step, pod in enumerate(pods):
        size = pod.units(GPU_RESOURCE)
        free = [i for i in ids if i not in held]
        if len(free) < size:
            continue
        offered = alloc.preferred(GPU_RESOURCE, pods, free, (), size)
        if not follow[step % 12]:
            start = offsets[step % 12] % len(free)
            offered = tuple((free[start:] + free[:start])[:size])
        try:
            grant = alloc.allocate(GPU_RESOURCE, pods, offered)
        except AllocationMismatchError:
            continue
        owner = next(p for p in pods if set(grant.devices) <= {gpu_uuid(i) for i in _chosen(p)})
        for uuid in grant.devices:
            assert uuid not in held, f"{uuid} granted to {owner.name} and {held[uuid]}"
            held[uuid] = owner.name


def _chosen(pod: BoundPod) -> tuple[int, ...]:
    text = pod.annotations.get("gpufleet.dev/gpu-index", "")
    return tuple(int(i) for i in text.split(",") if i)
