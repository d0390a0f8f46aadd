"""Helpers of the ``kube`` end-to-end suite: a real API server from GPUFLEET_E2E_KUBECONFIG,
fake GPU nodes as plain Node objects, and ``gpufleet scheduler`` as a child process."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from gpufleet.testing import kube_objects as ko
from gpufleet.testing.agent_builders import write_binding_key
from gpufleet.testing.fake_nodes import register_fake_node
from gpufleet.testing.waiting import wait_until

Obj = dict[str, Any]
KUBECONFIG_ENV = "GPUFLEET_E2E_KUBECONFIG"
#: A command that stops the API server (``COMMAND stop``) and starts it again (``COMMAND
#: start``, returning once it is ready), e.g. ``/work/kube-e2e/start.sh``: the fault tests that
#: restart the API server run only with it (it stops the server for everyone using it). The
#: fault suite also uses ``stop-apiserver``, ``kill-apiserver``, ``kill-etcd``,
#: ``freeze-apiserver SECONDS`` and ``compact-etcd`` (README: "Fault suite").
APISERVER_CTL_ENV = "GPUFLEET_E2E_APISERVER_CTL"
RUN_LABEL = "gpufleet.dev/e2e-run"


class Cluster:
    """A real API server and the objects one test run made in it (deleted at the end)."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.custom = kubernetes.client.CustomObjectsApi(self.client)
        self.scheduling = kubernetes.client.SchedulingV1Api(self.client)
        self.run_id = uuid.uuid4().hex[:6]
        self.namespace = f"e2e-{self.run_id}"
        self.scheduler_name = f"gpufleet-{self.run_id}"
        self.nodes: list[str] = []
        self.classes: list[str] = []
        #: The binding key the run's scheduler signs with and its agents verify with.
        self.key_dir = Path(tempfile.mkdtemp(prefix=f"gpufleet-e2e-{self.run_id}-"))
        self.binding_key_file = write_binding_key(self.key_dir / "binding.key")

    # ----------------------------------------------------------------------------- setup
    def install_crds(self) -> None:
        extensions = kubernetes.client.ApiextensionsV1Api(self.client)
        for crd in ko.crds():
            try:
                extensions.create_custom_resource_definition(crd)
            except ApiException as error:
                if error.status != 409:
                    raise
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.custom.list_cluster_custom_object("gpufleet.dev", "v1alpha1", "queues")
                return
            except ApiException:
                time.sleep(0.5)
        raise AssertionError("the CRDs did not become served")

    def create_namespace(self, gpus: int | None = None) -> None:
        """The run's namespace, and a Queue of its name that is the namespace's default (so
        that Queues already in the cluster, which make a queue mandatory, do not matter);
        ``gpus``: its nominal GPU quota (None: no quota)."""
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        quota = {"nvidia.com/gpu": gpus} if gpus is not None else {}
        queue = ko.queue(self.namespace, quota, namespaces=[self.namespace])
        self.custom.create_cluster_custom_object("gpufleet.dev", "v1alpha1", "queues", queue)
        self._ensure_default_account()

    def _ensure_default_account(self) -> None:
        """The namespace's "default" ServiceAccount, without which the ServiceAccount admission
        plugin refuses every pod. kube-controller-manager's service account controller makes it
        a moment after the namespace, but a bare kube-apiserver runs no controller: make it
        here (409 when the controller was first, which is as good)."""
        account = {"metadata": {"name": "default", "namespace": self.namespace}}
        try:
            self.core.create_namespaced_service_account(self.namespace, account)
        except ApiException as error:
            if error.status != 409:
                raise

    def add_gpu_node(self, name: str, gpus: int = 8) -> None:
        """A Ready Node object with GPUs in its status, as a kubelet with the device plugin
        shows it, and without the not-ready taint the API server gave it."""
        node = ko.gpu_node(f"{name}-{self.run_id}", gpus=gpus, labels={RUN_LABEL: self.run_id})
        # A stock API server taints a new Node not-ready (TaintNodesByCondition); with no
        # node lifecycle controller to lift it, the fake node would never take a pod.
        self.nodes.append(register_fake_node(self.core, node))

    def add_priority_class(self, name: str, value: int) -> str:
        full = f"{name}-{self.run_id}"
        self.scheduling.create_priority_class(ko.priority_class(full, value))
        self.classes.append(full)
        return full

    def submit(self, pod: Obj) -> None:
        pod["metadata"]["namespace"] = self.namespace
        pod["spec"]["schedulerName"] = self.scheduler_name
        # Only this run's nodes: the cluster may have other nodes with free GPUs.
        pod["spec"]["nodeSelector"] = {RUN_LABEL: self.run_id}
        self.core.create_namespaced_pod(self.namespace, pod)

    def pod(self, name: str) -> Obj:
        response = self.core.read_namespaced_pod(name, self.namespace, _preload_content=False)
        found: Obj = json.loads(response.data)
        return found

    def pods(self) -> list[Obj]:
        response = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        items: list[Obj] = json.loads(response.data)["items"]
        return items

    def events(self, reason: str) -> list[Obj]:
        response = self.core.list_namespaced_event(self.namespace, _preload_content=False)
        return [e for e in json.loads(response.data)["items"] if e.get("reason") == reason]

    def kubelet_runs(self, name: str) -> None:
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    def kubelet_removes(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    def cleanup(self) -> None:
        shutil.rmtree(self.key_dir, ignore_errors=True)

        def delete_queue(name: str) -> object:
            return self.custom.delete_cluster_custom_object(
                "gpufleet.dev", "v1alpha1", "queues", name
            )

        deletions: list[tuple[Callable[..., object], str]] = [
            (delete_queue, self.namespace),
            (self.core.delete_namespace, self.namespace),
            *[(self.core.delete_node, n) for n in self.nodes],
            *[(self.scheduling.delete_priority_class, c) for c in self.classes],
        ]
        for delete, name in deletions:
            with contextlib.suppress(ApiException):
                delete(name)

    # ----------------------------------------------------------------------------- scheduler
    def start_scheduler(self, log: Path, identity: str = "") -> subprocess.Popen[bytes]:
        """``gpufleet scheduler`` for this run, as ``identity`` in its leader election (else
        one of its own)."""
        identity = identity or f"e2e-{os.getpid()}-{time.monotonic_ns()}"
        command = [
            str(Path(sys.executable).parent / "gpufleet"), "scheduler",
            "--kubeconfig", self.kubeconfig,
            "--scheduler-name", self.scheduler_name,
            "--policy", "bestfit",
            "--min-runtime", "0",
            "--metrics-port", "0",
            "--lease-namespace", self.namespace,
            "--identity", identity,
            "--binding-key-file", str(self.binding_key_file),
        ]  # fmt: skip
        handle = log.open("ab")
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes], kill: bool = False) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        process.wait(timeout=30)


def wait_for(check: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """:func:`~gpufleet.testing.waiting.wait_until` with a real cluster's pace: a minute, and
    a look every 0.2 s (each look is a call to the API server)."""
    wait_until(check, what, timeout_s=timeout, every_s=0.2)


def apiserver_ctl(action: str, *args: str) -> None:
    """``stop`` or ``start`` the API server (or another fault of the suite's, with its
    ``args``) with the command in APISERVER_CTL_ENV."""
    command = [*shlex.split(os.environ[APISERVER_CTL_ENV]), action, *args]
    subprocess.run(command, check=True, timeout=180, stdout=subprocess.DEVNULL)
