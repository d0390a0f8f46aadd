"""Issue 28 item 2: ``spec.schedulingGates`` and a Job's ``spec.suspend`` read from files, checked
as the API server checks them, and honoured by ``place``: a gated pod or a suspended Job waits,
said why (``SchedulingGated``, ``Suspended``); a Job of parallelism 0 runs nothing, said so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.errors import InputError
from gpufleet.io.kube.pods import pods_from_object
from gpufleet.io.readers import read_scenario, read_workload

runner = CliRunner()
SMALL = "examples/clusters/small.yaml"


def one_gpu_pod(**spec: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(Path("examples/pods/one-gpu.yaml").read_text())
    manifest["spec"].update(spec)
    return manifest


def job(parallelism: int = 2, **spec: Any) -> dict[str, Any]:
    pod = one_gpu_pod()
    pod["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"parallelism": parallelism, "template": {"spec": pod["spec"]}, **spec},
    }


def test_gates_are_read_in_order() -> None:
    gates = [{"name": "example.com/quota"}, {"name": "data-ready"}]
    (timed,) = pods_from_object(one_gpu_pod(schedulingGates=gates), "pod.yaml")
    assert timed.pod.scheduling_gates == ("example.com/quota", "data-ready")


@pytest.mark.parametrize(
    ("gates", "field"),
    [
        ({"name": "a"}, r"spec\.schedulingGates: expected a list"),
        (["a"], r"spec\.schedulingGates\[0\]"),
        ([{}], r"spec\.schedulingGates\[0\]\.name: required"),
        ([{"name": "no spaces"}], r"spec\.schedulingGates\[0\]\.name"),
        ([{"name": "a"}, {"name": "a"}], r"spec\.schedulingGates\[1\]\.name: gate 'a' is given"),
    ],
    ids=["not-a-list", "not-a-mapping", "no-name", "bad-name", "twice"],
)
def test_bad_gates_are_refused_naming_the_field(gates: object, field: str) -> None:
    with pytest.raises(InputError, match=field):
        pods_from_object(one_gpu_pod(schedulingGates=gates), "pod.yaml")


def test_a_bad_suspend_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job(suspend="yes")))
    with pytest.raises(InputError, match=r"spec\.suspend: expected true or false, got 'yes'"):
        read_scenario(path)


@pytest.mark.parametrize(
    ("manifest", "reason", "pods"),
    [
        (one_gpu_pod(schedulingGates=[{"name": "example.com/quota"}]), "SchedulingGated", 1),
        (
            job(template_gates=True),  # replaced below: a gate in the Job's pod template
            "SchedulingGated",
            2,
        ),
        (job(suspend=True), "Suspended", 2),
    ],
    ids=["gated-pod", "gated-job-template", "suspended-job"],
)
def test_place_leaves_held_workloads_waiting_and_says_why(
    tmp_path: Path, manifest: dict[str, Any], reason: str, pods: int
) -> None:
    if manifest["spec"].pop("template_gates", False):
        manifest["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "data-ready"}]
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = runner.invoke(app, ["place", "--cluster", SMALL, "--scenario", str(path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert reason in text, text
    assert f"0 of {pods} pods placed" in text, text


@pytest.mark.parametrize(
    ("spec", "paused"),
    [
        pytest.param({"parallelism": 0}, True, id="parallelism-0"),
        pytest.param({"parallelism": 0, "completions": 4}, True, id="parallelism-0-of-4"),
        pytest.param({"parallelism": 2, "completions": 0}, False, id="completions-0"),
        pytest.param({"parallelism": 2}, False, id="running"),
    ],
)
def test_only_a_job_of_parallelism_zero_is_paused(
    tmp_path: Path, spec: dict[str, Any], paused: bool
) -> None:
    path = tmp_path / "job.yaml"
    parallelism = spec.pop("parallelism")
    path.write_text(yaml.safe_dump(job(parallelism, **spec)))
    notes: list[str] = []
    pods = read_workload(path, paused=notes)
    assert read_scenario(path).paused_jobs == notes
    assert len(notes) == int(paused)
    assert not (paused and pods)


def test_a_job_of_parallelism_zero_runs_nothing_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job(parallelism=0)))
    scenario = read_scenario(path)
    assert scenario.workloads == []
    (note,) = scenario.paused_jobs
    assert note.startswith("Job default/train: parallelism 0 runs no pods")
