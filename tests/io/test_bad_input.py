"""Bad input: every error names the file, the document and line, the object and the field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.readers import read_cluster, read_workload
from tests.io.conftest import WriteFile

#: A good first document, so that the bad one is document 2 and its line is not 1.
GOOD_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: fine}
spec: {containers: [{name: c}]}
---
"""


class Case(NamedTuple):
    document: str  # the second document of the file (it starts on line 6)
    location: str  # "document N (line L)" and the object
    field: str | None
    message: str


def pod(spec: str, metadata: str = "{name: x}") -> str:
    return f"apiVersion: v1\nkind: Pod\nmetadata: {metadata}\nspec:\n{spec}"


def limits(resources: str) -> str:
    return pod(f"  containers:\n  - name: c\n    resources:\n{resources}")


POD_CASES = {
    "unread-pod-maker": Case(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\n"
        "spec: {template: {spec: {containers: []}}}\n",
        "document 2 (line 6), DaemonSet default/agent",
        "kind",
        "gpufleet does not read kind DaemonSet: it makes a pod on each node",
    ),
    "custom-resource-with-pod-template": Case(
        "apiVersion: example.com/v1\nkind: Trainer\nmetadata: {name: t, namespace: ml}\n"
        "spec: {workers: {template: {spec: {containers: [{name: c}]}}}}\n",
        "document 2 (line 6), Trainer ml/t",
        "kind",
        "kind Trainer ('example.com/v1') has a pod template at spec.workers.template, so it may "
        "make pods, but gpufleet does not read it",
    ),
    "fractional-gpu": Case(
        limits("      limits: {nvidia.com/gpu: 0.5}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
        "expected a whole number, got 0.5",
    ),
    "gpu-requests-differ-from-limits": Case(
        limits("      limits: {nvidia.com/gpu: 2}\n      requests: {nvidia.com/gpu: 1}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.requests[nvidia.com/gpu]",
        "expected the same as limits[nvidia.com/gpu] (2), got 1",
    ),
    "gpu-in-requests-only": Case(
        limits("      requests: {nvidia.com/gpu: 1}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.requests[nvidia.com/gpu]",
        "nvidia.com/gpu must be set in limits",
    ),
    "bad-quantity": Case(
        limits("      requests: {cpu: 2 cores}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.requests[cpu]",
        "not a Kubernetes quantity: '2 cores'",
    ),
    "requests-above-limits": Case(
        limits("      requests: {memory: 2Gi}\n      limits: {memory: 1Gi}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.requests[memory]",
        "expected at most the limit (1Gi), got 2Gi",
    ),
    "missing-name": Case(
        pod("  containers: [{name: c}]\n", metadata="{namespace: ml}"),
        "document 2 (line 6), Pod (unnamed)",
        "metadata.name",
        "required: expected the object's name, got nothing",
    ),
    "unknown-operator": Case(
        pod(
            "  containers: [{name: c}]\n  affinity:\n    nodeAffinity:\n"
            "      requiredDuringSchedulingIgnoredDuringExecution:\n"
            "        nodeSelectorTerms:\n"
            "        - matchExpressions: [{key: gpu, operator: Equals, values: [a]}]\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator",
        "expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, got 'Equals'",
    ),
    "match-fields": Case(
        pod(
            "  containers: [{name: c}]\n  affinity:\n    nodeAffinity:\n"
            "      requiredDuringSchedulingIgnoredDuringExecution:\n"
            "        nodeSelectorTerms:\n"
            "        - matchFields: [{key: metadata.name, operator: In, values: [n1]}]\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchFields",
        "not supported: matchFields",
    ),
    "two-mig-profiles": Case(
        limits("      limits: {nvidia.com/mig-1g.10gb: 1, nvidia.com/mig-2g.20gb: 1}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.limits[nvidia.com/mig-2g.20gb]",
        "a pod can use one MIG profile, got nvidia.com/mig-1g.10gb and nvidia.com/mig-2g.20gb",
    ),
    "bad-mig-profile": Case(
        limits("      limits: {nvidia.com/mig-9g.99gb: 1}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.limits[nvidia.com/mig-9g.99gb]",
        "not a MIG profile",
    ),
    "gpu-milli-out-of-range": Case(
        pod(
            "  containers: [{name: c}]\n",
            metadata="{name: x, annotations: {gpufleet.dev/gpu-milli: '1500'}}",
        ),
        "document 2 (line 6), Pod default/x",
        "metadata.annotations[gpufleet.dev/gpu-milli]",
        "expected a whole number of milli-GPU from 1 to 1000, got '1500'",
    ),
    "share-of-several-gpus": Case(
        limits("      limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 1000}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.limits[nvidia.com/gpumem]",
        "nvidia.com/gpumem is a share of one GPU: expected nvidia.com/gpu: 1 beside it, got 2",
    ),
    "unsupported-nvidia-resource": Case(
        limits("      limits: {nvidia.com/gpu.sharedd: 1}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.limits[nvidia.com/gpu.sharedd]",
        "unsupported resource 'nvidia.com/gpu.sharedd'",
    ),
    "gpu-and-renamed-gpu": Case(
        limits("      limits: {nvidia.com/gpu: 1, nvidia.com/gpu.shared: 1}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.limits[nvidia.com/gpu.shared]",
        "a pod asks for nvidia.com/gpu or for nvidia.com/gpu.shared, not both",
    ),
    "extended-resource-in-requests-only": Case(
        pod("  containers:\n  - name: c\n    resources: {requests: {rdma/hca: 1}}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.requests[rdma/hca]",
        "rdma/hca must be set in limits",
    ),
    "extended-resource-fraction": Case(
        limits("      limits: {example.com/foo: 0.5}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.limits[example.com/foo]",
        "expected a whole number, got 0.5",
    ),
    "extended-resource-requests-not-limits": Case(
        limits("      limits: {amd.com/gpu: 2}\n      requests: {amd.com/gpu: 1}\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers[0].resources.requests[amd.com/gpu]",
        "expected the same as limits[amd.com/gpu] (2), got 1",
    ),
    "anti-affinity-without-topology-key": Case(
        pod(
            "  containers: [{name: c}]\n  affinity:\n    podAntiAffinity:\n"
            "      requiredDuringSchedulingIgnoredDuringExecution:\n"
            "      - labelSelector: {matchLabels: {app: web}}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".topologyKey",
        "required, but missing",
    ),
    "label-selector-operator": Case(
        pod(
            "  containers: [{name: c}]\n  affinity:\n    podAffinity:\n"
            "      requiredDuringSchedulingIgnoredDuringExecution:\n"
            "      - topologyKey: kubernetes.io/hostname\n"
            "        labelSelector: {matchExpressions: [{key: app, operator: Has}]}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".labelSelector.matchExpressions[0].operator",
        "expected one of In, NotIn, Exists, DoesNotExist, got 'Has'",
    ),
    "preferred-weight": Case(
        pod(
            "  containers: [{name: c}]\n  affinity:\n    podAntiAffinity:\n"
            "      preferredDuringSchedulingIgnoredDuringExecution:\n"
            "      - weight: 0\n"
            "        podAffinityTerm: {topologyKey: zone, labelSelector: {}}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        "expected a weight from 1 to 100, got 0",
    ),
    "namespace-selector-on-other-labels": Case(
        pod(
            "  containers: [{name: c}]\n  affinity:\n    podAffinity:\n"
            "      requiredDuringSchedulingIgnoredDuringExecution:\n"
            "      - topologyKey: zone\n        labelSelector: {}\n"
            "        namespaceSelector: {matchLabels: {team: ml}}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".namespaceSelector",
        "not supported: team In (gpufleet does not read Namespace objects",
    ),
    "match-label-keys-without-selector": Case(
        pod(
            "  containers: [{name: c}]\n  topologySpreadConstraints:\n"
            "  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule,"
            " matchLabelKeys: [pod-template-hash]}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.topologySpreadConstraints[0].matchLabelKeys",
        "needs a labelSelector beside it, got none",
    ),
    "spread-when-unsatisfiable": Case(
        pod(
            "  containers: [{name: c}]\n  topologySpreadConstraints:\n"
            "  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Always}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.topologySpreadConstraints[0].whenUnsatisfiable",
        "expected DoNotSchedule or ScheduleAnyway, got 'Always'",
    ),
    "spread-max-skew": Case(
        pod(
            "  containers: [{name: c}]\n  topologySpreadConstraints:\n"
            "  - {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.topologySpreadConstraints[0].maxSkew",
        "expected a whole number >= 1, got 0",
    ),
    "spread-min-domains-when-scheduling-anyway": Case(
        pod(
            "  containers: [{name: c}]\n  topologySpreadConstraints:\n"
            "  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway,"
            " minDomains: 2}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.topologySpreadConstraints[0].minDomains",
        "only allowed with whenUnsatisfiable: DoNotSchedule",
    ),
    "spread-twice-on-one-key": Case(
        pod(
            "  containers: [{name: c}]\n  topologySpreadConstraints:\n"
            "  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n"
            "  - {maxSkew: 2, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n"
        ),
        "document 2 (line 6), Pod default/x",
        "spec.topologySpreadConstraints[1]",
        "duplicate of topologySpreadConstraints[0]",
    ),
    "toleration-operator": Case(
        pod("  containers: [{name: c}]\n  tolerations: [{key: a, operator: Is}]\n"),
        "document 2 (line 6), Pod default/x",
        "spec.tolerations[0].operator",
        "expected Equal or Exists, got 'Is'",
    ),
    "bad-duration": Case(
        pod(
            "  containers: [{name: c}]\n",
            metadata="{name: x, annotations: {gpufleet.dev/sim-duration: 1 hour}}",
        ),
        "document 2 (line 6), Pod default/x",
        "metadata.annotations[gpufleet.dev/sim-duration]",
        "expected seconds or a duration such as 90s, 5m or 1h30m, got '1 hour'",
    ),
    "no-containers": Case(
        pod("  containers: []\n"),
        "document 2 (line 6), Pod default/x",
        "spec.containers",
        "required: expected at least one container, got none",
    ),
    "job-template-field": Case(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml}\nspec:\n"
        "  parallelism: 2\n  template:\n    spec:\n      containers:\n      - name: c\n"
        "        resources: {limits: {nvidia.com/gpu: 1.5}}\n",
        "document 2 (line 6), Job ml/j",
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
        "expected a whole number, got 1.5",
    ),
    "wrong-api-version": Case(
        "apiVersion: batch/v1beta1\nkind: Job\nmetadata: {name: j}\nspec: {}\n",
        "document 2 (line 6), Job default/j",
        "apiVersion",
        "expected batch/v1 for a Job, got 'batch/v1beta1'",
    ),
    "duplicate-pod": Case(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: fine}\nspec: {containers: [{name: c}]}\n",
        "document 2 (line 6)",
        None,
        "pod default/fine appears twice (first in ",
    ),
    "not-an-object": Case(
        "- just\n- a list\n",
        "document 2 (line 6)",
        None,
        "expected a Kubernetes object (a mapping with apiVersion, kind and metadata), got a list",
    ),
    "malformed-yaml": Case(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x\nspec: {}\n",
        "document 2 (line 9, column 5)",
        None,
        "not valid YAML: did not find expected ',' or '}' (while parsing a flow mapping started "
        "on line 8)",
    ),
}


def check(
    write_file: WriteFile, read: Callable[[Path], object], first: str, case: Case
) -> InputError:
    path = write_file("input.yaml", first + case.document)
    with pytest.raises(InputError) as raised:
        read(path)
    error = raised.value
    text = str(error)
    assert text.startswith(f"{path}:{case.location}:"), text
    assert error.source == str(path)
    assert error.field == case.field, text
    if case.field is not None:
        assert f": {case.field}: " in text, text
    assert case.message in text, text
    return error


@pytest.mark.parametrize("case", POD_CASES.values(), ids=POD_CASES.keys())
def test_bad_workloads(write_file: WriteFile, case: Case) -> None:
    check(write_file, read_workload, GOOD_POD, case)


GOOD_NODE = """\
apiVersion: v1
kind: Node
metadata: {name: fine}
status: {allocatable: {cpu: "1", memory: 1Gi}}
---
"""


def node(status: str, extra: str = "") -> str:
    return f"apiVersion: v1\nkind: Node\nmetadata: {{name: n{extra}}}\nstatus: {status}\n"


NODE_CASES = {
    "missing-cpu": Case(
        node("{allocatable: {memory: 1Gi}}"),
        "document 2 (line 6), Node n",
        "status.allocatable[cpu]",
        "required, but missing",
    ),
    "bad-memory": Case(
        node("{allocatable: {cpu: 1, memory: lots}}"),
        "document 2 (line 6), Node n",
        "status.allocatable[memory]",
        "not a Kubernetes quantity: 'lots'",
    ),
    "fractional-gpu-count": Case(
        node("{allocatable: {cpu: 1, memory: 1Gi, nvidia.com/gpu: 1.5}}"),
        "document 2 (line 6), Node n",
        "status.allocatable[nvidia.com/gpu]",
        "expected a whole number, got 1.5",
    ),
    "fractional-extended-resource": Case(
        node("{allocatable: {cpu: 1, memory: 1Gi, rdma/hca: 1.5}}"),
        "document 2 (line 6), Node n",
        "status.allocatable[rdma/hca]",
        "expected a whole number, got 1.5",
    ),
    "bad-taint-effect": Case(
        node("{allocatable: {cpu: 1, memory: 1Gi}}")
        + "spec: {taints: [{key: a, effect: Never}]}\n",
        "document 2 (line 6), Node n",
        "spec.taints[0].effect",
        "expected one of NoSchedule, PreferNoSchedule, NoExecute, got 'Never'",
    ),
    "bad-mig-layout": Case(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n"
        "  labels: {nvidia.com/gpu.product: H100}\n"
        "  annotations: {gpufleet.dev/mig-layout: '0:7g.80gb,1g.10gb'}\n"
        "status: {allocatable: {cpu: 1, memory: 1Gi}}\n",
        "document 2 (line 6), Node n",
        "metadata.annotations[gpufleet.dev/mig-layout]",
        "device 0: 7g.80gb, 1g.10gb need 8 compute slices; one GPU has 7",
    ),
    "wrong-kind": Case(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
        "document 2 (line 6), Pod default/p",
        "kind",
        "expected a ClusterSpec or Kubernetes Node objects (or an Alibaba node-list .csv), "
        "got kind Pod (a workload, not a cluster)",
    ),
}


@pytest.mark.parametrize("case", NODE_CASES.values(), ids=NODE_CASES.keys())
def test_bad_nodes(write_file: WriteFile, case: Case) -> None:
    check(write_file, read_cluster, GOOD_NODE, case)


def test_list_items_have_their_own_lines(write_file: WriteFile) -> None:
    path = write_file(
        "pods.yaml",
        """
        kind: List
        items:
        - {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c}]}}
        - apiVersion: v1
          kind: Pod
          metadata: {name: b}
          spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: -1}}}]}
        """,
    )
    with pytest.raises(InputError) as raised:
        read_workload(path)
    assert str(raised.value).startswith(
        f"{path}:document 1, items[1] (line 4), Pod default/b: "
        "spec.containers[0].resources.limits[nvidia.com/gpu]: "
    )


def test_nothing_half_loaded(write_file: WriteFile) -> None:
    good = GOOD_POD.replace("fine", "one") + GOOD_POD.replace("fine", "two")
    path = write_file("pods.yaml", good + "kind: Pod\nmetadata: {name: bad}\nspec: {}\n")
    with pytest.raises(InputError, match="document 3"):
        read_workload(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        read_workload(tmp_path / "absent.yaml")


def test_empty_file(write_file: WriteFile) -> None:
    with pytest.raises(InputError, match="found no objects"):
        read_workload(write_file("empty.yaml", "# nothing here\n---\n"))
