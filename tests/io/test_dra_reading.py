"""DRA's kinds read as ``resource.k8s.io/v1`` defines them (issue 32 item 1): DeviceClass,
ResourceClaim, ResourceClaimTemplate, ResourceSlice and a pod's ``spec.resourceClaims``, into the
model; unknown fields refused with their path and a did-you-mean on every path that reads
scenarios and requests; the bad input the issue names (a class that does not exist, a slice
listing a device twice, an invalid CEL expression) refused naming the object and the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.io.errors import InputError
from gpufleet.io.live_objects import LiveCatalog
from gpufleet.io.manifests import parse_manifests
from gpufleet.io.readers import read_scenario, read_workload
from gpufleet.model.dra import (
    AllocationMode,
    DeviceId,
    PodResourceClaim,
    SemVer,
)
from gpufleet.service.submissions import read_workloads
from gpufleet.testing.dra import (
    claim_pod_doc,
    claim_template_doc,
    device_class_doc,
    request_doc,
    resource_claim_doc,
    resource_slice_doc,
)

Obj = dict[str, Any]


def write(tmp_path: Path, *documents: Obj) -> Path:
    file = tmp_path / "scenario.yaml"
    file.write_text(yaml.safe_dump_all(list(documents), sort_keys=False))
    return file


def edited(obj: Obj, change: Callable[[Obj], None]) -> Obj:
    out = copy.deepcopy(obj)
    change(out)
    return out


def test_a_scenario_of_every_dra_kind_reads_into_the_model(tmp_path: Path) -> None:
    shared = resource_claim_doc("shared", request_doc("gpus", 2))
    shared["status"] = {
        "allocation": {"devices": {"results": [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"},
        ]}},
        "reservedFor": [{"resource": "pods", "name": "a", "uid": "u1"}],
    }  # fmt: skip
    template = claim_template_doc(
        "one-h100", request_doc("gpu", 1, 'device.attributes["gpu.nvidia.com"].index >= 0')
    )
    template["spec"]["spec"]["devices"]["constraints"] = [
        {"matchAttribute": "resource.kubernetes.io/pcieRoot", "requests": ["gpu"]}
    ]
    file = write(
        tmp_path,
        device_class_doc(),
        resource_slice_doc("node-a", 2),
        shared,
        template,
        claim_pod_doc("a", claim="shared"),
        claim_pod_doc("b", template="one-h100"),
    )
    scenario = read_scenario(file)
    dra = scenario.dra
    assert list(dra.classes) == ["gpu.nvidia.com"]
    (slice_,) = dra.slices
    assert [d.name for d in slice_.devices] == ["gpu-0", "gpu-1"]
    gpu = slice_.devices[1]
    assert gpu.attributes["gpu.nvidia.com/index"] == 1
    assert gpu.attributes["gpu.nvidia.com/driverVersion"] == SemVer(550, 54, 15)
    assert gpu.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:00"
    assert gpu.capacity["gpu.nvidia.com/memory"] == Fraction(80 << 30)
    claim = dra.claims["default/shared"]
    assert claim.spec.requests[0].exactly is not None
    assert claim.spec.requests[0].exactly.count == 2
    assert claim.allocated[0].device == DeviceId("gpu.nvidia.com", "node-a", "gpu-0")
    assert claim.reserved_for[0].name == "a"
    one = dra.templates["default/one-h100"].spec
    assert one.constraints[0].attribute == "resource.kubernetes.io/pcieRoot"
    assert one.constraints[0].requests == ("gpu",)
    pods = {t.workload.name: t.workload.pods[0] for t in scenario.workloads}
    assert pods["a"].resource_claims == (PodResourceClaim("gpus", resource_claim="shared"),)
    assert pods["b"].resource_claims == (PodResourceClaim("gpus", template="one-h100"),)


def test_first_available_and_all_mode_read(tmp_path: Path) -> None:
    claim = resource_claim_doc("flexible")
    claim["spec"]["devices"]["requests"] = [
        {"name": "gpu", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 1},
            {"name": "two-small", "deviceClassName": "gpu.nvidia.com", "count": 2},
        ]},
        {"name": "every",
         "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
    ]  # fmt: skip
    dra = read_scenario(write(tmp_path, device_class_doc(), claim)).dra
    gpu, every = dra.claims["default/flexible"].spec.requests
    assert [(name, e.count) for name, e in gpu.alternatives] == [
        ("gpu/big", 1),
        ("gpu/two-small", 2),
    ]
    assert every.exactly is not None
    assert every.exactly.mode is AllocationMode.ALL


def test_a_pod_status_names_the_generated_claim(tmp_path: Path) -> None:
    pod = claim_pod_doc("b", template="one")
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "b-gpus-x"}]}
    file = write(tmp_path, device_class_doc(), claim_template_doc("one"), pod)
    (timed,) = read_scenario(file).workloads
    assert timed.workload.pods[0].resource_claims[0].claim_name == "b-gpus-x"


def _by_scenario(file: Path) -> None:
    read_scenario([file])


def _by_request(file: Path) -> None:
    manifests = parse_manifests(file.read_text(), str(file), untrusted=True)
    read_workloads(manifests, LiveCatalog().request_builder(), "default", None)


READERS = {"place-simulate-scenario": _by_scenario, "submit-api-serve": _by_request}

_CLAIM = resource_claim_doc("c", request_doc("gpus", 1))
_TEMPLATE = claim_template_doc("t")
_SLICE = resource_slice_doc("node-a", 2)
UNKNOWN_FIELDS = [
    pytest.param(
        edited(_CLAIM, lambda o: o["spec"]["devices"]["requests"][0]["exactly"].update(
            deviceClasName="x")),
        "spec.devices.requests[0].exactly.deviceClasName", "did you mean 'deviceClassName'?",
        id="claim-request",
    ),
    pytest.param(
        edited(device_class_doc(), lambda o: o["spec"].update(selector=[])),
        "spec.selector", "did you mean 'selectors'?", id="device-class",
    ),
    pytest.param(
        edited(_TEMPLATE, lambda o: o["spec"]["spec"].update(device={})),
        "spec.spec.device", "did you mean 'devices'?", id="claim-template",
    ),
    pytest.param(
        edited(_SLICE, lambda o: o["spec"]["devices"][1].update(atributes={})),
        "spec.devices[1].atributes", "did you mean 'attributes'?", id="resource-slice",
    ),
    pytest.param(
        edited(claim_pod_doc("p", claim="c"), lambda o: o["spec"]["resourceClaims"][0].update(
            resourceClaimTemplate="t")),
        "spec.resourceClaims[0].resourceClaimTemplate",
        "did you mean 'resourceClaimTemplateName'?", id="pod-resource-claims",
    ),
]  # fmt: skip


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize(("obj", "field", "message"), UNKNOWN_FIELDS)
def test_an_unknown_field_is_refused_with_its_path_on_every_path(
    tmp_path: Path, reader: str, obj: Obj, field: str, message: str
) -> None:
    file = write(tmp_path, obj)
    with pytest.raises(InputError) as caught:
        READERS[reader](file)
    if reader == "submit-api-serve" and obj["kind"] != "Pod":
        # The control plane takes workloads only: a DRA object is refused whole, saying so.
        assert caught.value.field == "kind"
        assert "Dynamic Resource Allocation's objects are not submitted yet" in caught.value.reason
        return
    assert caught.value.field == field
    assert message in caught.value.reason
    assert f"{obj['kind']} " in str(caught.value.location)


def test_a_workload_file_points_dra_objects_to_the_scenario_readers(tmp_path: Path) -> None:
    file = write(tmp_path, device_class_doc())
    with pytest.raises(InputError, match="read with a scenario: place or simulate --scenario"):
        read_workload(file)


BAD = [
    pytest.param(
        [resource_claim_doc("train", request_doc("gpus", 1, device_class="gpu.nvidia.co"))],
        "ResourceClaim default/train", "spec.devices.requests[0].exactly.deviceClassName",
        "device class 'gpu.nvidia.co' does not exist (defined: gpu.nvidia.com); did you mean "
        "'gpu.nvidia.com'?", id="class-does-not-exist",
    ),
    pytest.param(
        [claim_template_doc("t", request_doc("gpus", 1, device_class="mig.nvidia.com"))],
        "ResourceClaimTemplate default/t", "spec.spec.devices.requests[0].exactly.deviceClassName",
        "device class 'mig.nvidia.com' does not exist", id="template-class-does-not-exist",
    ),
    pytest.param(
        [edited(_SLICE, lambda o: o["spec"]["devices"].append(o["spec"]["devices"][0]))],
        "ResourceSlice node-a-gpu.nvidia.com", "spec.devices[2].name",
        "device 'gpu-0' is listed twice (first at spec.devices[0])", id="duplicate-device",
    ),
    pytest.param(
        [_SLICE, edited(_SLICE, lambda o: o["metadata"].update(name="more"))],
        "ResourceSlice more", "spec.devices[0].name",
        "device 'gpu-0' of pool 'node-a' is listed by ResourceSlice node-a-gpu.nvidia.com too",
        id="device-in-two-slices-of-a-pool",
    ),
    pytest.param(
        [resource_claim_doc("c", request_doc("gpus", 1, 'device.driver == "a" &&'))],
        "ResourceClaim default/c", "spec.devices.requests[0].exactly.selectors[0].cel.expression",
        "invalid CEL expression", id="invalid-cel",
    ),
    pytest.param(
        [device_class_doc("gpu.example.com", "devcie.driver == 'x'")],
        "DeviceClass gpu.example.com", "spec.selectors[0].cel.expression",
        "undeclared reference to 'devcie' (did you mean 'device'?)", id="class-cel-misspelt",
    ),
    pytest.param(
        [edited(_CLAIM, lambda o: o["spec"]["devices"]["requests"][0].update(firstAvailable=[]))],
        "ResourceClaim default/c", "spec.devices.requests[0]",
        "expected exactly one of exactly and firstAvailable", id="exactly-and-first-available",
    ),
    pytest.param(
        [edited(_CLAIM, lambda o: o["spec"]["devices"]["requests"][0]["exactly"].update(
            allocationMode="All"))],
        "ResourceClaim default/c", "spec.devices.requests[0].exactly.count",
        "must not be given with allocationMode All", id="count-with-all",
    ),
    pytest.param(
        [edited(_CLAIM, lambda o: o["spec"]["devices"]["requests"][0]["exactly"].update(
            count=129))],
        "ResourceClaim default/c", "spec.devices.requests[0].exactly.count",
        "expected a whole number <= 128", id="count-too-big",
    ),
    pytest.param(
        [edited(_CLAIM, lambda o: o["spec"]["devices"].update(
            constraints=[{"matchAttribute": "gpu.nvidia.com/clique", "requests": ["gpu"]}]))],
        "ResourceClaim default/c", "spec.devices.constraints[0].requests[0]",
        "no request 'gpu' in this claim (requests: gpus)", id="constraint-unknown-request",
    ),
    pytest.param(
        [edited(_CLAIM, lambda o: o["spec"]["devices"].update(
            constraints=[{"matchAttribute": "clique"}]))],
        "ResourceClaim default/c", "spec.devices.constraints[0].matchAttribute",
        "expected a fully qualified attribute name", id="constraint-unqualified",
    ),
    pytest.param(
        [edited(_SLICE, lambda o: o["spec"]["devices"][0]["attributes"].update(
            index={"int": 1, "string": "1"}))],
        "ResourceSlice node-a-gpu.nvidia.com", "spec.devices[0].attributes[index]",
        "expected exactly one of int, bool, string, version", id="attribute-two-types",
    ),
    pytest.param(
        [edited(_SLICE, lambda o: o["spec"]["devices"][0]["capacity"].update(
            memory={"value": "80 GiB"}))],
        "ResourceSlice node-a-gpu.nvidia.com", "spec.devices[0].capacity[memory].value",
        "not a Kubernetes quantity", id="capacity-not-a-quantity",
    ),
    pytest.param(
        [edited(_SLICE, lambda o: o["spec"].update(allNodes=True))],
        "ResourceSlice node-a-gpu.nvidia.com", "spec",
        "expected exactly one of nodeName, nodeSelector and allNodes", id="slice-two-node-scopes",
    ),
    pytest.param(
        [claim_pod_doc("p", template="absent")],
        "Pod default/p", "spec.resourceClaims[0].resourceClaimTemplateName",
        "names ResourceClaimTemplate 'absent' of claim 'gpus', which is not defined",
        id="pod-template-not-defined",
    ),
    pytest.param(
        [device_class_doc(), device_class_doc()],
        "DeviceClass gpu.nvidia.com", "metadata.name", "appears twice", id="class-twice",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("documents", "what", "field", "message"), BAD)
def test_bad_dra_input_is_refused_naming_the_object_and_field(
    tmp_path: Path, documents: list[Obj], what: str, field: str, message: str
) -> None:
    needs_class = not any(d["kind"] == "DeviceClass" for d in documents)
    file = write(tmp_path, *([device_class_doc()] if needs_class else []), *documents)
    with pytest.raises(InputError) as caught:
        read_scenario(file)
    assert what in str(caught.value.location)
    assert caught.value.field == field
    assert message in caught.value.reason
