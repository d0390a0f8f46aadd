"""The DRA allocator (issue 32 item 3): devices for all of a pod's claims on one node at once or
none, with each feature of ``resource.k8s.io/v1`` requests (ExactCount and All, count, CEL
selectors of the class and the request, firstAvailable in order, matchAttribute across
requests, devices taken, device taints and tolerations, admin access, shared devices, shared
counters of partitionable devices), gpufleet's choice among feasible devices rather than first
fit, and a reason when there is none. Property tests check the choice against a brute force."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.dra import (
    NVIDIA_GPU_DRIVER,
    PCIE_ROOT_ATTRIBUTE,
    AllocationMode,
    CelSelector,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceId,
    DeviceTaint,
    DeviceTaintEffect,
    DeviceToleration,
    ExactRequest,
    ResourceSlice,
)
from gpufleet.scheduling.dra.allocator import MAX_STEPS, Allocation, ClaimToAllocate, allocate
from gpufleet.scheduling.dra.inventory import NodeDevices, node_devices
from gpufleet.testing.dra import GPU_CLASS, exact, gpu_counters, make_claim, make_gpu, make_mig

CLASSES = {GPU_CLASS.name: GPU_CLASS}
PRODUCT = 'device.attributes["gpu.nvidia.com"].productName'
A100 = "NVIDIA A100-SXM4-80GB"
TOLERATE_XID = DeviceToleration("xid", "Exists")


def eight_gpus(*taken: int, **changes: Device) -> NodeDevices:
    devices = {f"gpu_{i}": make_gpu(i) for i in range(8)}
    assert set(changes) <= set(devices), "changes name devices as gpu_<index>"
    devices.update(changes)
    ordered = tuple(devices.values())
    return NodeDevices(ordered, taken=frozenset(make_gpu(i).id for i in taken))


def one_claim(
    spec: ClaimSpec, node: NodeDevices | None = None, max_steps: int = MAX_STEPS
) -> Allocation:
    claims = [ClaimToAllocate("default/c", spec)]
    return allocate(node or eight_gpus(), claims, CLASSES, max_steps=max_steps)


def names(allocation: Allocation) -> list[tuple[str, str]]:
    return [(choice.request, choice.device.name) for choice in allocation.choices]


@dataclass(frozen=True)
class Case:
    spec: ClaimSpec
    expected: list[tuple[str, str]] | None  # None: no choice
    node: NodeDevices | None = None
    reason: str = ""


CASES = [
    pytest.param(Case(make_claim(("gpus", exact(2))), [("gpus", "gpu-0"), ("gpus", "gpu-1")]),
                 id="exact-count"),
    pytest.param(Case(make_claim(("gpus", exact(1, f'{PRODUCT} == "{A100}"'))),
                      [("gpus", "gpu-5")], eight_gpus(gpu_5=make_gpu(5, product=A100))),
                 id="request-selector"),
    pytest.param(Case(make_claim(("gpus", exact(1, device_class="a100"))), [("gpus", "gpu-5")],
                      eight_gpus(gpu_5=make_gpu(5, product=A100))),
                 id="class-selector"),
    pytest.param(Case(make_claim(("gpus", exact(mode=AllocationMode.ALL))),
                      [("gpus", f"gpu-{i}") for i in range(8)]),
                 id="all-mode"),
    pytest.param(Case(make_claim(("gpus", exact(mode=AllocationMode.ALL))), None, eight_gpus(3),
                      "all devices of class gpu.nvidia.com wanted, 8 match, 1 of them allocated"),
                 id="all-mode-one-taken"),
    pytest.param(Case(make_claim(("gpus", exact(9))), None, None,
                      "request gpus: 9 devices of class gpu.nvidia.com wanted, 8 match"),
                 id="count-too-big"),
    pytest.param(Case(make_claim(("gpus", [("big", exact(9)), ("small", exact(1))])),
                      [("gpus/small", "gpu-0")]),
                 id="first-available-falls-through"),
    pytest.param(Case(make_claim(("gpus", [("two", exact(2)), ("one", exact(1))])),
                      [("gpus/two", "gpu-0"), ("gpus/two", "gpu-1")]),
                 id="first-available-first-when-it-fits"),
    pytest.param(Case(make_claim(("r0", exact(1)),
                                 ("r1", [("x", exact(1, f'{PRODUCT} == "{A100}"')),
                                         ("y", exact(1))])),
                      [("r0", "gpu-1"), ("r1/x", "gpu-0")],
                      NodeDevices((make_gpu(0, product=A100), make_gpu(1)))),
                 id="first-available-across-requests"),
    pytest.param(Case(make_claim(("a", exact(1)), ("b", exact(1, f'{PRODUCT} == "{A100}"')),
                                 match=[PCIE_ROOT_ATTRIBUTE]),
                      [("a", "gpu-4"), ("b", "gpu-5")],
                      eight_gpus(gpu_5=make_gpu(5, product=A100))),
                 id="match-attribute-across-requests"),
    pytest.param(Case(make_claim(("gpus", exact(3)), match=[PCIE_ROOT_ATTRIBUTE]), None, None,
                      "no choice of devices satisfies claim default/c together (matchAttribute "
                      "resource.kubernetes.io/pcieRoot"),
                 id="match-attribute-impossible"),
    pytest.param(Case(make_claim(("gpus", exact(1)), match=[("example.com/absent", ["gpus"])]),
                      None, None, "matchAttribute example.com/absent"),
                 id="match-attribute-missing"),
    pytest.param(Case(make_claim(("gpus", exact(2))), [("gpus", "gpu-2"), ("gpus", "gpu-3")],
                      eight_gpus(0, 1)),
                 id="taken-excluded"),
    pytest.param(Case(make_claim(("gpus", exact(1))), [("gpus", "gpu-1")],
                      eight_gpus(gpu_0=make_gpu(0, taints=[DeviceTaint("xid", "79")]))),
                 id="tainted-excluded"),
    pytest.param(Case(make_claim(("gpus", exact(1, tolerations=[TOLERATE_XID]))),
                      [("gpus", "gpu-0")],
                      eight_gpus(gpu_0=make_gpu(0, taints=[DeviceTaint("xid", "79")]))),
                 id="taint-tolerated"),
    pytest.param(Case(make_claim(("gpus", exact(1))), [("gpus", "gpu-0")],
                      eight_gpus(gpu_0=make_gpu(0, taints=[
                          DeviceTaint("note", "", DeviceTaintEffect.NONE)]))),
                 id="taint-effect-none-ignored"),
    pytest.param(Case(make_claim(("gpus", exact(1, admin_access=True))), [("gpus", "gpu-0")],
                      eight_gpus(*range(8))),
                 id="admin-access-uses-taken"),
    pytest.param(Case(make_claim(("gpus", exact(1, device_class="absent"))), None, None,
                      "device class absent does not exist"),
                 id="class-does-not-exist"),
    pytest.param(Case(make_claim(("gpus", exact(1, 'device.attributes["gpu.nvidia.com"].absent'))),
                      None, None, "selector device.attributes"),
                 id="cel-runtime-error"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_each_api_feature(case: Case) -> None:
    classes = {
        **CLASSES,
        "a100": DeviceClass("a100", (CelSelector(f'{PRODUCT}.startsWith("NVIDIA A100")'),)),
    }
    node = case.node or eight_gpus()
    allocation = allocate(node, [ClaimToAllocate("default/c", case.spec)], classes)
    if case.expected is None:
        assert not allocation.ok
        assert allocation.choices == ()
        assert case.reason in str(allocation.reason)
    else:
        assert allocation.ok, allocation.reason
        assert names(allocation) == case.expected


def test_claims_are_allocated_all_or_none() -> None:
    node = eight_gpus(*range(6))
    fits = ClaimToAllocate("default/a", make_claim(("gpus", exact(2))))
    too_many = ClaimToAllocate("default/b", make_claim(("gpus", exact(1))))
    assert allocate(node, [fits], CLASSES).ok
    both = allocate(node, [fits, too_many], CLASSES)
    assert not both.ok
    assert both.choices == ()
    assert "claims default/a, default/b" in str(both.reason)


def test_a_shareable_device_serves_two_claims() -> None:
    shared = replace(make_gpu(0), shareable=True)
    node = NodeDevices((shared,))
    claims = [ClaimToAllocate(f"default/{n}", make_claim(("gpus", exact(1)))) for n in "ab"]
    allocation = allocate(node, claims, CLASSES)
    assert [c.device.name for c in allocation.choices] == ["gpu-0", "gpu-0"]
    not_shared = allocate(NodeDevices((make_gpu(0),)), claims, CLASSES)
    assert not not_shared.ok


# ------------------------------------------------------------------- device choice policy
def test_whole_pcie_pairs_are_kept_free_not_first_fit() -> None:
    """gpu-3 is taken: first fit by name would take gpu-0 and break the pair 0-1; gpufleet
    takes gpu-2, the one left alone on its PCIe root."""
    allocation = one_claim(make_claim(("gpu", exact(1))), eight_gpus(3))
    assert names(allocation) == [("gpu", "gpu-2")]


def test_two_gpus_come_from_one_pair_when_that_keeps_the_others_whole() -> None:
    allocation = one_claim(make_claim(("gpus", exact(2))), eight_gpus(0, 2))
    # pairs left whole: 4-5 and 6-7 either way; taking 1 and 3 leaves both pairs and no halves
    assert names(allocation) == [("gpus", "gpu-1"), ("gpus", "gpu-3")]


def mig_node(*taken: DeviceId) -> NodeDevices:
    """Two partitionable GPUs: each a whole-GPU device and seven 1g.10gb MIG devices."""
    devices: list[Device] = []
    for gpu in range(2):
        devices.append(make_gpu(gpu, counter_set=f"gpu-{gpu}-counters"))
        devices.extend(make_mig(gpu, "1g.10gb", slot) for slot in range(7))
    counters = [gpu_counters(f"gpu-{gpu}-counters") for gpu in range(2)]
    slice_ = ResourceSlice(
        "node-a-gpus", NVIDIA_GPU_DRIVER, "node-a", 1, 1, tuple(devices), "node-a",
        shared_counters=tuple(counters),
    )  # fmt: skip
    return node_devices([slice_], "node-a", allocated=taken)


MIG = 'device.attributes["gpu.nvidia.com"].type == "mig"'
WHOLE = 'device.attributes["gpu.nvidia.com"].type == "gpu"'


def test_a_mig_device_goes_to_a_gpu_already_partitioned() -> None:
    node = mig_node(make_mig(1, "1g.10gb", 0).id)
    allocation = one_claim(make_claim(("mig", exact(1, MIG))), node)
    assert names(allocation) == [("mig", "gpu-1-mig-1g.10gb-1")]


def test_a_whole_gpu_is_not_given_while_a_mig_device_of_it_is_taken() -> None:
    node = mig_node(make_mig(0, "1g.10gb", 0).id)
    assert names(one_claim(make_claim(("gpu", exact(1, WHOLE))), node)) == [("gpu", "gpu-1")]
    both = mig_node(make_mig(0, "1g.10gb", 0).id, make_mig(1, "1g.10gb", 3).id)
    refused = one_claim(make_claim(("gpu", exact(1, WHOLE))), both)
    assert not refused.ok
    assert "shared counters" in str(refused.reason)


def test_counters_bound_how_many_mig_devices_one_gpu_gives() -> None:
    node = mig_node()
    eight = one_claim(make_claim(("mig", exact(8, MIG))), node)
    gpus = {choice.device.name.split("-mig")[0] for choice in eight.choices}
    assert eight.ok
    assert gpus == {"gpu-0", "gpu-1"}
    assert not one_claim(make_claim(("mig", exact(15, MIG))), node).ok


def test_the_search_gives_up_saying_so() -> None:
    spec = make_claim(("gpus", exact(4)), match=[("example.com/never", ["gpus"])])
    many = NodeDevices(tuple(
        make_gpu(i, extra={"example.com/never": i}) for i in range(40)
    ))  # fmt: skip
    allocation = one_claim(spec, many, max_steps=500)
    assert not allocation.ok
    assert "gave up after trying 500 devices" in str(allocation.reason)


# -------------------------------------------------------------------------- properties
PRODUCTS = ("A", "B")
ROOTS = ("r0", "r1")


@st.composite
def nodes(draw: st.DrawFn) -> NodeDevices:
    count = draw(st.integers(1, 5))
    devices = tuple(
        make_gpu(
            i,
            product=draw(st.sampled_from(PRODUCTS)),
            pcie_root=draw(st.sampled_from(ROOTS)),
            taints=[DeviceTaint("xid")] if draw(st.booleans()) and draw(st.booleans()) else [],
        )
        for i in range(count)
    )
    taken = draw(st.sets(st.sampled_from([d.id for d in devices]), max_size=2))
    return NodeDevices(devices, taken=frozenset(taken))


@st.composite
def exact_requests(draw: st.DrawFn) -> ExactRequest:
    product = draw(st.none() | st.sampled_from(PRODUCTS))
    selectors = () if product is None else (f'{PRODUCT} == "{product}"',)
    tolerate = [DeviceToleration("xid", "Exists")] if draw(st.booleans()) else []
    return exact(draw(st.integers(1, 2)), *selectors, tolerations=tolerate)


@st.composite
def claim_sets(draw: st.DrawFn) -> list[ClaimToAllocate]:
    claims: list[ClaimToAllocate] = []
    for c in range(draw(st.integers(1, 2))):
        requests: list[tuple[str, ExactRequest | list[tuple[str, ExactRequest]]]] = []
        for r in range(draw(st.integers(1, 3 - c))):
            if draw(st.booleans()):
                requests.append(
                    (f"r{r}", [("x", draw(exact_requests())), ("y", draw(exact_requests()))])
                )
            else:
                requests.append((f"r{r}", draw(exact_requests())))
        match = [PCIE_ROOT_ATTRIBUTE] if draw(st.booleans()) else []
        claims.append(ClaimToAllocate(f"default/c{c}", make_claim(*requests, match=match)))
    return claims


def _fits(device: Device, request: ExactRequest, node: NodeDevices) -> bool:
    """The request's rules, checked without CEL: product selector, taints, taken."""
    for selector in request.selectors:
        wanted = selector.expression.split('"')[-2]
        if device.attribute("productName") != wanted:
            return False
    if device.taints and not request.tolerations:
        return False
    return device.id not in node.taken


def brute_force(node: NodeDevices, claims: Sequence[ClaimToAllocate]) -> list[tuple[int, ...]]:
    """The alternative vectors of every valid assignment (devices per request, all of them)."""
    slots = [(claim, request) for claim in claims for request in claim.spec.requests]
    options = []
    for _, request in slots:
        per: list[tuple[int, tuple[Device, ...]]] = []
        for a, (_, alternative) in enumerate(request.alternatives):
            fitting = [d for d in node.devices if _fits(d, alternative, node)]
            per.extend((a, combo) for combo in itertools.combinations(fitting, alternative.count))
        options.append(per)
    vectors = []
    for assignment in itertools.product(*options):
        used = [d.id for _, combo in assignment for d in combo]
        if len(used) != len(set(used)):
            continue
        ok = True
        for claim in claims:
            for constraint in claim.spec.constraints:
                values = {
                    d.attribute(constraint.attribute)
                    for (owner, _), (_, combo) in zip(slots, assignment, strict=True)
                    if owner is claim
                    for d in combo
                }
                ok = ok and len(values) <= 1
        if ok:
            vectors.append(tuple(a for a, _ in assignment))
    return vectors


@settings(max_examples=300, deadline=None)
@given(nodes(), claim_sets())
def test_a_choice_satisfies_everything_and_exists_exactly_when_one_does(
    node: NodeDevices, claims: list[ClaimToAllocate]
) -> None:
    allocation = allocate(node, claims, CLASSES, max_choices=10**6)
    feasible = brute_force(node, claims)
    assert allocation.ok == bool(feasible), allocation.reason
    if not allocation.ok:
        assert allocation.choices == ()  # all or nothing
        return
    used = [c.device for c in allocation.choices]
    assert len(used) == len(set(used)), "a device used twice"
    by_id = {d.id: d for d in node.devices}
    vector: list[int] = []
    for claim in claims:
        mine = allocation.for_claim(claim.key)
        for request in claim.spec.requests:
            names_ = [name for name, _ in request.alternatives]
            got = [c for c in mine if c.request.split("/")[0] == request.name]
            (alternative,) = {c.request for c in got}
            index = names_.index(alternative)
            vector.append(index)
            wanted = request.alternatives[index][1]
            assert len(got) == wanted.count
            assert all(_fits(by_id[c.device], wanted, node) for c in got)
        for constraint in claim.spec.constraints:
            values = {by_id[c.device].attribute(constraint.attribute) for c in mine}
            assert len(values) == 1
    # firstAvailable in order: no valid assignment uses earlier alternatives
    assert tuple(vector) == min(feasible)
