"""The node agent's deployment: deploy/agent-rbac.yaml grants exactly what
gpufleet.agent.kube.node_agent calls, deploy/agent.yaml runs the agent's command line on GPU
nodes with the kubelet's sockets and NVML and nothing more, and the chart's agent values
change what they say. (That the chart's defaults render these files: test_helm.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.cli.main import load_command
from tests.deploy.helm_render import Chart, manifest_objects, render
from tests.deploy.support import CHART, DEPLOY, SCHEDULER_NAMESPACE, load_objects
from tests.deploy.test_rbac import Grant, grants
from tests.packaging.support import pyproject_version

NAME = "gpufleet-agent"
OBJECTS = {
    (item.kind, item.name): item.obj
    for path in ("agent-rbac.yaml", "agent.yaml")
    for item in load_objects(DEPLOY / path)
}
DAEMONSET = OBJECTS[("DaemonSet", NAME)]
POD_SPEC: dict[str, Any] = DAEMONSET["spec"]["template"]["spec"]
CONTAINER: dict[str, Any] = POD_SPEC["containers"][0]

#: Exactly what NodeAgentApi calls: read and patch its Node (labels, annotations), patch the
#: Node's status (conditions), list and watch pods (of its node), create and patch Events.
AGENT_GRANTS: set[Grant] = {
    ("", "nodes", "get", ""),
    ("", "nodes", "patch", ""),
    ("", "nodes/status", "patch", ""),
    ("", "pods", "list", ""),
    ("", "pods", "watch", ""),
    ("", "events", "create", ""),
    ("", "events", "patch", ""),
}

#: The agent's command line, read from the command itself: flags taking a value, and switches.
AGENT_COMMAND = load_command("agent")
VALUE_FLAGS = {
    name
    for param in AGENT_COMMAND.params
    if not getattr(param, "is_flag", False)
    for name in param.opts
}
SWITCHES = {
    name
    for param in AGENT_COMMAND.params
    if getattr(param, "is_flag", False)
    for name in (*param.opts, *param.secondary_opts)
}


def test_agent_objects() -> None:
    assert sorted(OBJECTS) == sorted(
        [
            ("ServiceAccount", NAME),
            ("ClusterRole", NAME),
            ("ClusterRoleBinding", NAME),
            ("DaemonSet", NAME),
            ("Service", f"{NAME}-metrics"),
        ]
    )
    for (kind, _), obj in OBJECTS.items():
        if kind not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == SCHEDULER_NAMESPACE


# ----------------------------------------------------------------------------------- RBAC
def test_role_grants_exactly_what_the_agent_calls() -> None:
    found = grants(OBJECTS[("ClusterRole", NAME)]["rules"])
    assert found - AGENT_GRANTS == set(), "granted beyond the table"
    assert AGENT_GRANTS - found == set(), "missing from the role"


def test_role_has_nothing_broader() -> None:
    role = OBJECTS[("ClusterRole", NAME)]
    assert "aggregationRule" not in role
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule
        for key in ("apiGroups", "resources", "verbs"):
            assert not any("*" in value for value in rule[key]), rule


def test_binding_names_the_role_and_the_daemonsets_account() -> None:
    binding = OBJECTS[("ClusterRoleBinding", NAME)]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAME,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": SCHEDULER_NAMESPACE}
    ]
    assert POD_SPEC["serviceAccountName"] == NAME


def test_rbac_file_says_rbac_cannot_narrow_to_the_node() -> None:
    assert "cannot narrow" in (DEPLOY / "agent-rbac.yaml").read_text()


# ------------------------------------------------------------------------------ DaemonSet
def _at(obj: Any, path: str) -> Any:
    for key in path.split("."):
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


DAEMONSET_FIELDS: list[tuple[str, Any]] = [
    ("spec.template.spec.nodeSelector", {"nvidia.com/gpu.present": "true"}),
    (
        "spec.template.spec.tolerations",
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    ),
    ("spec.template.spec.priorityClassName", "system-node-critical"),
    ("spec.template.spec.containers.0.image", f"ghcr.io/gpufleet/gpufleet:{pyproject_version()}"),
    (
        "spec.template.spec.containers.0.ports",
        [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
    ),
    ("spec.template.spec.containers.0.resources.limits", {"memory": "256Mi"}),
    ("spec.template.spec.containers.0.securityContext.privileged", False),
    ("spec.template.spec.containers.0.securityContext.allowPrivilegeEscalation", False),
    ("spec.template.spec.containers.0.securityContext.readOnlyRootFilesystem", True),
    ("spec.template.spec.containers.0.securityContext.capabilities", {"drop": ["ALL"]}),
    ("spec.template.spec.securityContext.seccompProfile", {"type": "RuntimeDefault"}),
]


@pytest.mark.parametrize(
    ("path", "expected"), DAEMONSET_FIELDS, ids=[path for path, _ in DAEMONSET_FIELDS]
)
def test_daemonset_field(path: str, expected: Any) -> None:
    assert _at(DAEMONSET, path) == expected


def _flags(command: list[str]) -> dict[str, str | None]:
    """The flags of an agent command line, checked against the agent's CLI."""
    assert command[:2] == ["gpufleet", "agent"]
    found: dict[str, str | None] = {}
    rest = iter(command[2:])
    for word in rest:
        assert word in VALUE_FLAGS | SWITCHES, f"unknown agent flag {word}"
        found[word] = next(rest) if word in VALUE_FLAGS else None
    return found


def test_the_daemonsets_command_line_parses_as_the_agents() -> None:
    args = [a.replace("$(NODE_NAME)", "gpu-1") for a in CONTAINER["command"][2:]]
    context = AGENT_COMMAND.make_context("agent", args)
    assert context.params["node_name"] == "gpu-1"
    assert context.params["metrics_address"] == "0.0.0.0:9400"


def test_command_is_the_agents_command_line() -> None:
    assert _flags(CONTAINER["command"]) == {
        "--node-name": "$(NODE_NAME)",
        "--device-plugin-dir": "/var/lib/kubelet/device-plugins",
        "--pod-resources-socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
        "--metrics-address": "0.0.0.0:9400",
        "--shares-per-gpu": "10",
        "--binding-key-file": "/etc/gpufleet/binding-key/key",
    }


def test_node_name_comes_from_the_downward_api_and_nvml_from_the_runtime() -> None:
    env = {item["name"]: item for item in CONTAINER["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"


def _mounted(pod_spec: dict[str, Any], container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Mount path -> the volume mounted there."""
    volumes = {volume["name"]: volume for volume in pod_spec["volumes"]}
    return {mount["mountPath"]: volumes[mount["name"]] for mount in container["volumeMounts"]}


def test_the_kubelets_directories_are_mounted_where_the_flags_point() -> None:
    mounted = _mounted(POD_SPEC, CONTAINER)
    flags = _flags(CONTAINER["command"])
    plugin_dir = flags["--device-plugin-dir"]
    socket = flags["--pod-resources-socket"]
    assert plugin_dir is not None
    assert socket is not None
    assert mounted[plugin_dir]["hostPath"] == {
        "path": "/var/lib/kubelet/device-plugins",
        "type": "Directory",
    }
    socket_dir = socket.rsplit("/", 1)[0]
    assert mounted[socket_dir]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    assert mounted["/tmp"] == {"name": "tmp", "emptyDir": {}}
    host_paths = sorted(v["hostPath"]["path"] for v in mounted.values() if "hostPath" in v)
    assert host_paths == ["/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"]


def test_metrics_service_selects_the_agent_pods() -> None:
    service = OBJECTS[("Service", f"{NAME}-metrics")]
    assert service["spec"]["selector"] == DAEMONSET["spec"]["selector"]["matchLabels"]
    assert DAEMONSET["spec"]["template"]["metadata"]["labels"] == service["spec"]["selector"]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert service["metadata"]["annotations"]["prometheus.io/port"] == "9400"


# ---------------------------------------------------------------------------- Helm values
def _render(overrides: dict[str, Any]) -> list[dict[str, Any]]:
    return manifest_objects(render(Chart.load(CHART), "gpufleet", SCHEDULER_NAMESPACE, overrides))


def _agent(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [
        obj
        for obj in objects
        if obj["kind"] == kind
        and obj["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"
    ]
    return found


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = _agent(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def _args(objects: list[dict[str, Any]]) -> dict[str, str | None]:
    return _flags(_pod(objects)["containers"][0]["command"])


def _mounts(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return _mounted(_pod(objects), _pod(objects)["containers"][0])


AGENT_CASES: list[tuple[str, dict[str, Any], Callable[[list[dict[str, Any]]], object], object]] = [
    (
        "disabled",
        {"agent": {"enabled": False}},
        lambda o: [x["kind"] for x in o if x["metadata"]["name"].startswith(NAME)],
        [],
    ),
    (
        "shares-mps-cdi",
        {"agent": {"sharesPerGpu": 4, "mps": True, "cdi": True}},
        lambda o: (
            {k: v for k, v in _args(o).items() if k in ("--shares-per-gpu", "--mps", "--cdi")},
            _mounts(o)["/run/nvidia/mps"]["hostPath"]["path"],
            _mounts(o)["/var/run/cdi"]["hostPath"]["path"],
        ),
        (
            {"--shares-per-gpu": "4", "--mps": None, "--cdi": None},
            "/run/nvidia/mps",
            "/var/run/cdi",
        ),
    ),
    (
        "device-plugin-config",
        {"agent": {"devicePluginConfig": {"name": "time-slicing-config", "key": "a100"}}},
        lambda o: (
            _args(o)["--device-plugin-config"],
            _mounts(o)["/etc/gpufleet/device-plugin"]["configMap"],
        ),
        ("/etc/gpufleet/device-plugin/a100", {"name": "time-slicing-config"}),
    ),
    (
        "metrics-port",
        {"agent": {"metrics": {"port": 9500}}},
        lambda o: (
            _args(o)["--metrics-address"],
            _pod(o)["containers"][0]["ports"][0]["containerPort"],
            _agent(o, "Service")["spec"]["ports"][0]["port"],
            _agent(o, "Service")["metadata"]["annotations"]["prometheus.io/port"],
        ),
        ("0.0.0.0:9500", 9500, 9500, "9500"),
    ),
    (
        "image-follows-the-scheduler",
        {"image": {"repository": "registry.example/gf", "tag": "dev"}},
        lambda o: _pod(o)["containers"][0]["image"],
        "registry.example/gf:dev",
    ),
    (
        "own-image",
        {"agent": {"image": {"repository": "registry.example/agent", "tag": "a1"}}},
        lambda o: _pod(o)["containers"][0]["image"],
        "registry.example/agent:a1",
    ),
    (
        "runtime-class-and-placement",
        {
            "agent": {
                "runtimeClassName": "nvidia",
                # null drops the default key, as in Helm (maps merge key by key).
                "nodeSelector": {
                    "nvidia.com/gpu.present": None,
                    "feature.node.kubernetes.io/pci-10de.present": "true",
                },
                "tolerations": [{"operator": "Exists"}],
            }
        },
        lambda o: {k: _pod(o)[k] for k in ("runtimeClassName", "nodeSelector", "tolerations")},
        {
            "runtimeClassName": "nvidia",
            "nodeSelector": {"feature.node.kubernetes.io/pci-10de.present": "true"},
            "tolerations": [{"operator": "Exists"}],
        },
    ),
    (
        "privileged-for-mig",
        {"agent": {"privileged": True}},
        lambda o: (
            _pod(o)["containers"][0]["securityContext"],
            {e["name"]: e.get("value") for e in _pod(o)["containers"][0]["env"]}[
                "NVIDIA_MIG_MONITOR_DEVICES"
            ],
        ),
        ({"privileged": True, "readOnlyRootFilesystem": True}, "all"),
    ),
    (
        "kubelet-root",
        {"agent": {"kubeletRoot": "/var/lib/k0s/kubelet"}},
        lambda o: sorted(v["hostPath"]["path"] for v in _mounts(o).values() if "hostPath" in v),
        ["/var/lib/k0s/kubelet/device-plugins", "/var/lib/k0s/kubelet/pod-resources"],
    ),
    (
        "resources-and-priority",
        {"agent": {"resources": {"limits": {"memory": "128Mi"}}, "priorityClassName": ""}},
        lambda o: (
            _pod(o)["containers"][0]["resources"]["limits"],
            "priorityClassName" in _pod(o),
        ),
        ({"memory": "128Mi"}, False),
    ),
    (
        "name",
        {"agent": {"name": "gfa"}},
        lambda o: sorted(
            x["metadata"]["name"]
            for x in o
            if x["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"
        ),
        ["gfa", "gfa", "gfa", "gfa", "gfa", "gfa-metrics"],  # DaemonSet, SA, roles, NetworkPolicy
    ),
]


@pytest.mark.parametrize(
    ("overrides", "pick", "expected"),
    [case[1:] for case in AGENT_CASES],
    ids=[case[0] for case in AGENT_CASES],
)
def test_agent_values(
    overrides: dict[str, Any], pick: Callable[[list[dict[str, Any]]], object], expected: object
) -> None:
    assert pick(_render(overrides)) == expected
