"""Every reader checks names, label keys and label values as Kubernetes does, and says which
object and field is at fault: workload YAML, scenarios, cluster specs, Node YAML, trace CSVs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from gpufleet.io.cluster_traces.alibaba import read_nodes as read_node_csv
from gpufleet.io.cluster_traces.alibaba import read_pods as read_pod_csv
from gpufleet.io.errors import InputError
from gpufleet.io.readers import read_cluster, read_scenario, read_workload
from tests.io.conftest import WriteFile

GOOD_POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: fine}\nspec: {containers: [{name: c}]}\n"


def pod(metadata: str, spec: str = "{containers: [{name: c}]}") -> str:
    return f"apiVersion: v1\nkind: Pod\nmetadata: {metadata}\nspec: {spec}\n"


def job(name: str, spec: str = "") -> str:
    return (
        f"apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}}}\n"
        f"spec: {{{spec}template: {{spec: {{containers: [{{name: c}}]}}}}}}\n"
    )


def queue(name: str, spec: str = "{}") -> str:
    header = "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\n"
    return f"{header}metadata: {{name: {name}}}\nspec: {spec}\n"


class Case(NamedTuple):
    reader: Callable[[Path], object]
    text: str  # the second document (the first is a good Pod, so this one is document 2)
    where: str  # after "document 2 (line 6), "
    field: str
    message: str


LONG = "a" * 64
CASES = {
    "the-briefs-emoji": Case(
        read_workload,
        pod("{name: 'train-🚀'}"),
        "Pod default/train-🚀",
        "metadata.name",
        "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and "
        "ending with a letter or digit): '🚀' is not allowed; got 'train-🚀'",
    ),
    "unicode-name": Case(
        read_workload,
        pod("{name: тренировка-1}"),
        "Pod default/тренировка-1",
        "metadata.name",
        "'т' is not allowed; got 'тренировка-1'",
    ),
    "name-of-300-characters": Case(
        read_workload,
        pod("{name: " + "a" * 300 + "}"),
        "Pod default/" + "a" * 100 + "... (300 characters)",
        "metadata.name",
        "a DNS-1123 subdomain of at most 253 characters (it has 300); got 'aaaa",
    ),
    "namespace-with-a-dot": Case(
        read_workload,
        pod("{name: p, namespace: team.a}"),
        "Pod team.a/p",
        "metadata.namespace",
        "must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending with "
        "a letter or digit): '.' is not allowed; got 'team.a'",
    ),
    "job-name-is-a-label-value": Case(
        read_workload,
        job(LONG),
        f"Job default/{LONG}",
        "metadata.name",
        "must be at most 63 characters (it is the value of the label job-name",
    ),
    "indexed-job-pod-hostnames": Case(
        read_workload,
        job("a.b", "completionMode: Indexed, completions: 3, "),
        "Job default/a.b",
        "metadata.name",
        "its pods would be named up to 'a.b-2', which must be a DNS-1123 label",
    ),
    "statefulset-pod-hostnames": Case(
        read_workload,
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: " + "d" * 62 + "}\n"
        "spec: {replicas: 2, template: {spec: {containers: [{name: c}]}}}\n",
        "StatefulSet default/" + "d" * 62,
        "metadata.name",
        "its pods would be named up to '" + "d" * 62 + "-1', which must be a DNS-1123 label of "
        "at most 63 characters (it has 64) (its pods' names are their hostnames)",
    ),
    "label-key": Case(
        read_workload,
        pod("{name: p, labels: {'team name': a}}"),
        "Pod default/p",
        "metadata.labels[team name]",
        "label key must be a qualified name (letters, digits, '-', '_' and '.', starting and "
        "ending with a letter or digit): ' ' is not allowed; got 'team name'",
    ),
    "label-value": Case(
        read_workload,
        pod("{name: p, labels: {team: 'research/llm'}}"),
        "Pod default/p",
        "metadata.labels[team]",
        "label value must be a label value (letters, digits, '-', '_' and '.', starting and "
        "ending with a letter or digit; or empty): '/' is not allowed; got 'research/llm'",
    ),
    "template-label-value-too-long": Case(
        read_workload,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {template: "
        "{metadata: {labels: {v: " + LONG + "}}, spec: {containers: [{name: c}]}}}\n",
        "Deployment default/d",
        "spec.template.metadata.labels[v]",
        "label value must be a label value of at most 63 characters (it has 64)",
    ),
    "node-selector": Case(
        read_workload,
        pod("{name: p}", "{nodeSelector: {'gpu model': A100}, containers: [{name: c}]}"),
        "Pod default/p",
        "spec.nodeSelector[gpu model]",
        "label key must be a qualified name",
    ),
    "toleration-key": Case(
        read_workload,
        pod(
            "{name: p}",
            "{tolerations: [{key: 'Nvidia.com/gpu', operator: Exists}], containers: [{name: c}]}",
        ),
        "Pod default/p",
        "spec.tolerations[0].key",
        "label key prefix 'Nvidia.com' (before '/') must be a DNS-1123 subdomain",
    ),
    "affinity-match-labels": Case(
        read_workload,
        pod(
            "{name: p}",
            "{containers: [{name: c}], affinity: {podAntiAffinity: "
            "{requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: "
            "kubernetes.io/hostname, labelSelector: {matchLabels: {app: 'a b'}}}]}}}",
        ),
        "Pod default/p",
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".labelSelector.matchLabels[app]",
        "label value must be a label value",
    ),
    "topology-key": Case(
        read_workload,
        pod(
            "{name: p}",
            "{containers: [{name: c}], topologySpreadConstraints: [{maxSkew: 1, topologyKey: "
            "'zone name', whenUnsatisfiable: DoNotSchedule}]}",
        ),
        "Pod default/p",
        "spec.topologySpreadConstraints[0].topologyKey",
        "label key must be a qualified name",
    ),
    "queue-name-is-a-label-value": Case(
        read_scenario,
        queue(LONG),
        f"Queue {LONG}",
        "metadata.name",
        "(it is the value of the label gpufleet.dev/queue, and label values are limited to 63",
    ),
    "queue-parent": Case(
        read_scenario,
        queue("a", "{parent: Org}"),
        "Queue a",
        "spec.parent",
        "'O' is not allowed; got 'Org'",
    ),
    "queue-namespaces": Case(
        read_scenario,
        queue("a", "{namespaces: [team_a]}"),
        "Queue a",
        "spec.namespaces[0]",
        "must be a DNS-1123 label",
    ),
    "priority-class-name": Case(
        read_scenario,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: High}\n"
        "value: 10\n",
        "PriorityClass High",
        "metadata.name",
        "'H' is not allowed; got 'High'",
    ),
    "priority-class-reference": Case(
        read_scenario,
        pod("{name: p}", "{priorityClassName: High, containers: [{name: c}]}"),
        "Pod default/p",
        "spec.priorityClassName",
        "'H' is not allowed; got 'High'",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_names_in_manifests(write_file: WriteFile, case: Case) -> None:
    path = write_file("input.yaml", GOOD_POD + "---\n" + case.text)
    with pytest.raises(InputError) as raised:
        case.reader(path)
    error = raised.value
    text = str(error)
    assert text.startswith(f"{path}:document 2 (line 6), {case.where}: {case.field}: "), text
    assert error.field == case.field
    assert case.message in text, text


def test_the_briefs_error_in_full(write_file: WriteFile) -> None:
    path = write_file("pods.yaml", GOOD_POD + "---\n" + pod("{name: 'train-🚀'}"))
    with pytest.raises(InputError) as raised:
        read_workload(path)
    assert str(raised.value) == (
        f"{path}:document 2 (line 6), Pod default/train-🚀: metadata.name: must be a DNS-1123 "
        "subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or "
        "digit): '🚀' is not allowed; got 'train-🚀'"
    )


NODE = (
    "apiVersion: v1\nkind: Node\nmetadata: {name: NAME}\n"
    "status: {allocatable: {cpu: 1, memory: 1Gi}}\n"
)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        pytest.param(
            NODE.replace("NAME", "Node_1"), "metadata.name", "'N' is not allowed", id="node-name"
        ),
        pytest.param(
            NODE.replace("{name: NAME}", "{name: n, labels: {rack: 'r 1'}}"),
            "metadata.labels[rack]",
            "' ' is not allowed",
            id="node-label",
        ),
    ],
)
def test_names_in_node_yaml(write_file: WriteFile, text: str, field: str, message: str) -> None:
    with pytest.raises(InputError) as raised:
        read_cluster(write_file("nodes.yaml", text))
    assert raised.value.field == field
    assert message in str(raised.value)


SPEC = """\
apiVersion: gpufleet.dev/v1alpha1
kind: ClusterSpec
metadata: {name: NAME}
spec:
  pools:
    - {name: gpu, count: 2, cpu: "8", memory: 64Gi, gpu: {model: MODEL, count: 1}POOL}
"""


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        pytest.param(
            {"NAME": "Small"}, "metadata.name", "name must be a DNS-1123 subdomain", id="spec-name"
        ),
        pytest.param(
            {"POOL": ", labels: {'a b': x}"},
            "spec.pools[0].labels[a b]",
            "label key must be a qualified name",
            id="pool-label-key",
        ),
        pytest.param(
            {"POOL": ", labels: {team: 'a b'}"},
            "spec.pools[0].labels[team]",
            "label value must be a label value",
            id="pool-label-value",
        ),
        pytest.param(
            {"POOL": ", taints: [{key: 'Gpu/x', effect: NoSchedule}]"},
            "spec.pools[0].taints[0].key",
            "label key prefix 'Gpu'",
            id="taint-key",
        ),
        pytest.param(
            {"MODEL": "'NVIDIA A100'"},
            "spec.pools[0].gpu.model",
            "label value must be a label value (letters",
            id="gpu-model-is-the-product-label",
        ),
        pytest.param(
            {"POOL": ", namePrefix: " + "n" * 60},
            "spec.pools[0]",
            "namePrefix: the nodes would be named up to '" + "n" * 60 + "0001', which must be a "
            "label value of at most 63 characters (it has 64) (it is their name and their "
            "kubernetes.io/hostname label)",
            id="node-names-are-hostname-labels",
        ),
    ],
)
def test_names_in_cluster_specs(
    write_file: WriteFile, changes: dict[str, str], field: str, message: str
) -> None:
    text = SPEC
    for old, new in {"NAME": "small", "MODEL": "A100", "POOL": "", **changes}.items():
        text = text.replace(old, new)
    with pytest.raises(InputError) as raised:
        read_cluster(write_file("cluster.yaml", text))
    assert raised.value.field == field, raised.value
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("reader", "header", "row", "message"),
    [
        pytest.param(
            read_pod_csv,
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli",
            "тренировка-1,1000,1024,0,0",
            "pod name must be a DNS-1123 subdomain",
            id="pod-name",
        ),
        pytest.param(
            read_node_csv,
            "sn,cpu_milli,memory_mib,gpu,model",
            "Node_7,1000,1024,0,",
            "node name must be a DNS-1123 subdomain",
            id="node-name",
        ),
    ],
)
def test_names_in_trace_csvs(
    write_file: WriteFile,
    reader: Callable[[Path], object],
    header: str,
    row: str,
    message: str,
) -> None:
    path = write_file("trace.csv", f"{header}\n{row}\n")
    with pytest.raises(InputError) as raised:
        reader(path)
    assert str(raised.value).startswith(f"{path}:2: ")
    assert message in str(raised.value)


def test_the_traces_own_names_are_valid(write_file: WriteFile) -> None:
    path = write_file(
        "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nopenb-pod-0001,1000,1024,1,1000\n"
    )
    assert [t.pod.name for t in read_pod_csv(path)] == ["openb-pod-0001"]
