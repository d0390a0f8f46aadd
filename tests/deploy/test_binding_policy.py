"""deploy/binding-policy.yaml: the ValidatingAdmissionPolicy keeping gpufleet's binding
annotations the scheduler's names every annotation the code signs, the scheduler's own
ServiceAccount, and the writes that can carry them; both workloads mount the binding key where
their --binding-key-file points."""

from __future__ import annotations

import ast
from typing import Any

from gpufleet.io.kube.binding_signature import BINDING_ANNOTATIONS
from tests.deploy.support import DEPLOY, SCHEDULER_NAMESPACE, load_objects

POLICY_OBJECTS = {item.kind: item.obj for item in load_objects(DEPLOY / "binding-policy.yaml")}
POLICY: dict[str, Any] = POLICY_OBJECTS["ValidatingAdmissionPolicy"]
WORKLOADS = {
    item.kind: item.obj
    for path in ("scheduler.yaml", "agent.yaml")
    for item in load_objects(DEPLOY / path)
    if item.kind in ("Deployment", "DaemonSet")
}


def _variable(name: str) -> str:
    (found,) = [v["expression"] for v in POLICY["spec"]["variables"] if v["name"] == name]
    return str(found)


def test_the_policy_guards_every_binding_annotation_the_code_writes() -> None:
    assert sorted(ast.literal_eval(_variable("bindingKeys"))) == sorted(BINDING_ANNOTATIONS)


def test_only_the_schedulers_service_account_may_write_them() -> None:
    account = WORKLOADS["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"]
    expected = f"system:serviceaccount:{SCHEDULER_NAMESPACE}:{account}"
    assert ast.literal_eval(_variable("scheduler")) == [expected]
    (validation,) = POLICY["spec"]["validations"]
    assert "request.userInfo.username in variables.scheduler" in validation["expression"]
    assert "size(variables.changed) == 0" in validation["expression"]


def test_the_policy_sees_pods_their_status_and_bindings_created_and_updated() -> None:
    (rule,) = POLICY["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [""]
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert sorted(rule["resources"]) == ["pods", "pods/binding", "pods/status"]
    assert POLICY["spec"]["failurePolicy"] == "Fail"


def test_the_binding_denies_through_the_policy() -> None:
    binding = POLICY_OBJECTS["ValidatingAdmissionPolicyBinding"]
    assert binding["apiVersion"] == POLICY["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"]["policyName"] == POLICY["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_both_workloads_mount_the_binding_key_where_their_flag_points() -> None:
    for kind, workload in WORKLOADS.items():
        spec = workload["spec"]["template"]["spec"]
        command = spec["containers"][0]["command"]
        path = command[command.index("--binding-key-file") + 1]
        mounts = [
            m
            for m in spec["containers"][0]["volumeMounts"]
            if path.startswith(m["mountPath"] + "/")
        ]
        assert len(mounts) == 1, kind
        assert mounts[0]["readOnly"] is True
        volumes = {v["name"]: v for v in spec["volumes"]}
        secret = volumes[mounts[0]["name"]]["secret"]
        assert secret["secretName"] == "gpufleet-binding-key", kind
        assert path.rsplit("/", 1)[1] == "key"  # the Secret's key, as README's command makes it
