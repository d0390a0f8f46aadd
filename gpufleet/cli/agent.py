"""``gpufleet agent``: the node agent of one GPU node (device plugin, labels, health, metrics)."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.markup import escape

from gpufleet.cli.output import EXIT_FAILED, fail

DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def agent(
    node_name: Annotated[
        str | None,
        typer.Option(envvar="NODE_NAME", help="this node's name (the DaemonSet sets NODE_NAME)"),
    ] = None,
    fake_gpus: Annotated[
        Path | None,
        typer.Option(
            help="read the GPUs from this fake NVML YAML instead of the driver (demos, tests; "
            "e.g. examples/agent/fake-gpus.yaml)",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            envvar="KUBECONFIG",
            help="kubeconfig file; without one, the in-cluster service account is used",
        ),
    ] = None,
    device_plugin_dir: Annotated[
        Path, typer.Option(help="the kubelet's device plugin directory (kubelet.sock)")
    ] = DEVICE_PLUGIN_DIR,
    pod_resources_socket: Annotated[
        Path, typer.Option(help="the kubelet's PodResources API socket")
    ] = POD_RESOURCES_SOCKET,
    metrics_address: Annotated[
        str, typer.Option(help="HOST:PORT of /metrics (dcgm-exporter's names and port)")
    ] = "0.0.0.0:9400",
    shares_per_gpu: Annotated[
        int,
        typer.Option(
            min=1, max=1000, help="gpufleet.dev/gpu-share slots advertised per (non-MIG) GPU"
        ),
    ] = 10,
    mps: Annotated[
        bool, typer.Option(help="give shares the CUDA MPS limits (an MPS daemon runs on the node)")
    ] = False,
    cdi: Annotated[
        bool, typer.Option(help="answer Allocate with CDI device names instead of env")
    ] = False,
    device_plugin_config: Annotated[
        Path | None,
        typer.Option(
            help="the NVIDIA device plugin's config (file or ConfigMap): time-slicing, MPS",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    device_plugin_config_key: Annotated[
        str | None,
        typer.Option(help="the ConfigMap key of the config (needed when it has several)"),
    ] = None,
    binding_key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="GPUFLEET_BINDING_KEY_FILE",
            help="the key gpufleet's scheduler signs bindings with (the gpufleet-binding-key "
            "Secret, mounted): only pods whose device binding it signed get devices",
            dir_okay=False,
        ),
    ] = None,
    scheduler_name: Annotated[
        list[str] | None,
        typer.Option(
            help="the spec.schedulerName of gpufleet's scheduler (repeat for several); pods "
            "of any other scheduler get no device by their annotations  [default: gpufleet]"
        ),
    ] = None,
    insecure_unsigned_bindings: Annotated[
        bool,
        typer.Option(
            help="INSECURE, for tests and demos only: without --binding-key-file, honour the "
            "unsigned bindings of gpufleet's pods (any pod author can write them)"
        ),
    ] = False,
    node_resync_period: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="seconds between comparisons of the Node's labels, inventory and GPU health "
            "condition with what the agent knows, each difference written back (as GPU Feature "
            "Discovery relabels); a change is written at once, a refused write tried again "
            "with back-off",
        ),
    ] = 60.0,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
) -> None:
    """Run the node agent: discover the GPUs through NVML, publish GPU Feature Discovery's
    labels and the device inventory on the Node, serve the kubelet's device plugin API so that
    every container gets exactly the devices gpufleet chose, withdraw devices that fail (XID,
    ECC, lost), and serve dcgm-exporter's metrics at /metrics.

    Example (no GPU, against a test cluster):
    gpufleet agent --node-name gpu-1 --fake-gpus examples/agent/fake-gpus.yaml
    --binding-key-file binding.key
    --device-plugin-dir /tmp/dp --pod-resources-socket /tmp/dp/pod-resources.sock"""
    if log_level.upper() not in LOG_LEVELS:
        raise fail(f"--log-level: expected one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not node_name:
        raise fail("--node-name is required (or NODE_NAME in the environment)")
    # Heavy imports after the arguments are read: grpc, the kubernetes client, NVML.
    from gpufleet.agent.binding_trust import DEFAULT_SCHEDULER_NAMES
    from gpufleet.agent.device_plugin import PluginConfig
    from gpufleet.agent.kube.node_agent import NodeAgentApi
    from gpufleet.agent.runner import AgentSettings, NodeAgent, split_address
    from gpufleet.devices.fake import make_fake_nvml
    from gpufleet.devices.nvml import NvmlUnavailableError, load_nvml
    from gpufleet.devices.nvml_source import NvmlDeviceSource
    from gpufleet.io.errors import InputError
    from gpufleet.io.kube.binding_signature import BindingKeyError, read_binding_key
    from gpufleet.io.kube.device_plugin_config import read_device_plugin_config
    from gpufleet.kube_client.api_types import ApiError
    from gpufleet.model.gpu import NO_SHARING

    try:
        split_address(metrics_address)
        sharing = (
            read_device_plugin_config(device_plugin_config, device_plugin_config_key).gpu_sharing()
            if device_plugin_config is not None
            else NO_SHARING
        )
        nvml = make_fake_nvml(fake_gpus) if fake_gpus is not None else load_nvml()
    except (InputError, ValueError) as error:
        raise fail(escape(str(error))) from None
    except NvmlUnavailableError as error:  # no driver here: a failure, not bad input
        raise fail(escape(str(error)), EXIT_FAILED) from None
    try:
        binding_key = read_binding_key(binding_key_file, insecure_unsigned_bindings)
    except BindingKeyError as error:
        raise fail(escape(str(error))) from None
    source = NvmlDeviceSource(nvml)
    try:
        api = NodeAgentApi.connect(node_name, str(kubeconfig) if kubeconfig else None)
    except Exception as error:  # the config loaders raise several unrelated types
        source.close()
        raise fail(f"cannot load the Kubernetes configuration: {escape(str(error))}") from None
    settings = AgentSettings(
        PluginConfig(
            node_name=node_name,
            plugin_dir=device_plugin_dir,
            sharing=sharing,
            shares_per_gpu=shares_per_gpu,
            cdi=cdi,
            mps=mps,
            binding_key=binding_key,
            scheduler_names=frozenset(scheduler_name or DEFAULT_SCHEDULER_NAMES),
            unsigned_bindings=insecure_unsigned_bindings,
        ),
        pod_resources_socket=pod_resources_socket,
        metrics_address=metrics_address,
        node_resync_s=node_resync_period,
    )
    node_agent = NodeAgent(source, api, settings)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        node_agent.stop_soon()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        node_agent.start()
    except ApiError as error:  # the Node is missing, or the account may not touch it
        node_agent.stop()
        hint = " (is --node-name this node's name?)" if error.status == 404 else ""
        raise fail(
            f"cannot publish node {escape(node_name)}'s GPUs: {escape(str(error))}{hint}",
            EXIT_FAILED,
        ) from None
    logging.getLogger(__name__).info("agent pid %d running; SIGTERM stops it", os.getpid())
    node_agent.wait()
    node_agent.stop()
