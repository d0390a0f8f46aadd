"""``kind: InferenceLoad``: a daily wave or a file's points, the replica and the objective;
bad objects name the file, the object and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.serving import inference_service_from_object
from gpufleet.io.readers import read_scenario


def load_object(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "target": {"kind": "Deployment", "name": "chat"},
        "requests": {"trough": 20, "peak": 180, "peakAt": "14:30", "noise": 0.2,
                     "bursts": [{"at": "26h", "duration": "20m", "factor": 3}]},
        "replica": {"throughput": 12, "serviceTime": "250ms", "loadTime": "90s"},
        "slo": {"p95": "1s"},
    }  # fmt: skip
    base.update(spec)
    return {
        "apiVersion": "gpufleet.dev/v1alpha1",
        "kind": "InferenceLoad",
        "metadata": {"name": "chat-traffic", "namespace": "prod"},
        "spec": base,
    }


def test_a_daily_wave() -> None:
    found = inference_service_from_object(load_object(), "traffic.yaml")
    assert found.workload == "prod/Deployment/chat"
    load, replica = found.load, found.service
    assert (load.trough_rps, load.peak_rps, load.peak_at_s, load.noise) == (20, 180, 52200, 0.2)
    assert [(b.at_s, b.duration_s, b.factor) for b in load.bursts] == [(93600.0, 1200.0, 3.0)]
    assert (replica.throughput_rps, replica.service_time_s, replica.load_time_s) == (12, 0.25, 90)
    assert replica.slo_p95_s == 1.0
    assert load.until == 86400.0


def test_the_points_of_a_file_next_to_it(tmp_path: Path) -> None:
    (tmp_path / "traffic.csv").write_text("seconds,rps\n0,10\n3600,40\n\n7200,25\n")
    obj = load_object(requests={"file": "traffic.csv"})
    found = inference_service_from_object(obj, str(tmp_path / "load.yaml"))
    assert found.load.points == ((0.0, 10.0), (3600.0, 40.0), (7200.0, 25.0))
    assert found.load.rate(1800.0) == pytest.approx(25.0)
    assert found.load.until == 7200.0
    lasting = load_object(requests={"trough": 1, "peak": 2, "duration": "7d"})
    assert inference_service_from_object(lasting, "x.yaml").load.until == 7 * 86400.0


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"requests": {"trough": 5}}, "spec.requests", "needs both trough and peak"),
        ({"requests": {"trough": 5, "peak": 9, "file": "x.csv"}}, "spec.requests", "not both"),
        ({"requests": {"trough": 9, "peak": 5}}, "spec.requests", "trough <= peak"),
        ({"requests": {"trough": 1, "peak": 5, "peakAt": "25:00"}}, "spec.requests.peakAt",
         "00:00..23:59"),
        ({"replica": {"throughput": 0, "serviceTime": "1s"}}, "spec.replica.throughput", ""),
        ({"replica": {"throughput": 5, "serviceTime": "2s"}}, "spec.replica",
         "must exceed a request's own time"),
        ({"target": {"kind": "Job", "name": "x"}}, "spec.target.kind", "Deployment"),
        ({"slo": {"p99": "1s"}}, "spec.slo", ""),
        ({"requests": {"file": "missing.csv"}}, "spec.requests.file", "cannot read"),
    ],
    ids=["half-a-wave", "wave-and-file", "peak-below-trough", "bad-clock", "zero-throughput",
         "slo-below-service-time", "kind", "unknown-slo-field", "missing-file"],
)  # fmt: skip
def test_bad_objects_name_the_field(
    tmp_path: Path, spec: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(InputError) as raised:
        inference_service_from_object(load_object(**spec), str(tmp_path / "load.yaml"), "doc 1")
    error = raised.value
    assert error.field is not None
    assert error.field.startswith(field), error
    assert message in str(error)
    assert "InferenceLoad prod/chat-traffic" in str(error)


def test_a_file_with_a_bad_row_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "traffic.csv").write_text("0,10\n60,lots\n")
    with pytest.raises(InputError, match="line 2: expected seconds,rps"):
        inference_service_from_object(
            load_object(requests={"file": "traffic.csv"}), str(tmp_path / "load.yaml")
        )


def test_the_example_reads() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "autoscaling" / "chat-traffic.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "InferenceLoad"]
    (found,) = [inference_service_from_object(d, str(path)) for d in docs]
    assert found.load.peak == 80
    assert found.workload == "ml-serving/Deployment/chat"


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat, namespace: prod}
spec:
  replicas: 2
  selector: {matchLabels: {app: chat}}
  template:
    metadata: {labels: {app: chat}}
    spec:
      containers: [{name: s, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
"""


def scenario_file(tmp_path: Path, *objects: dict[str, Any], deployment: bool = True) -> Path:
    path = tmp_path / "scenario.yaml"
    docs = [yaml.safe_dump(o) for o in objects]
    path.write_text("---\n".join([DEPLOYMENT, *docs] if deployment else docs))
    return path


def test_a_scenario_reads_its_inference_loads(tmp_path: Path) -> None:
    scenario = read_scenario(scenario_file(tmp_path, load_object()))
    (service,) = scenario.inference
    assert service.workload == "prod/Deployment/chat"
    assert len(scenario.workloads) == 2


@pytest.mark.parametrize(
    ("objects", "deployment", "message"),
    [
        ((load_object(),), False, "no Deployment prod/chat in the scenario to load"),
        ((load_object(), load_object()), True, "loaded by another InferenceLoad already"),
    ],
    ids=["no-target", "twice"],
)
def test_a_scenario_refuses_an_inference_load_without_its_own_target(
    tmp_path: Path, objects: tuple[dict[str, Any], ...], deployment: bool, message: str
) -> None:
    if not deployment:
        objects = (*objects, {**yaml.safe_load(DEPLOYMENT), "metadata": {"name": "other"}})
    with pytest.raises(InputError, match=message) as raised:
        read_scenario(scenario_file(tmp_path, *objects, deployment=deployment))
    assert raised.value.field == "spec.target"


def test_a_scenario_knows_each_replicas_owner_and_a_replica_to_make_more_of(
    tmp_path: Path,
) -> None:
    none_yet = yaml.safe_load(DEPLOYMENT)
    none_yet["metadata"]["name"], none_yet["spec"]["replicas"] = "idle", 0
    scenario = read_scenario(scenario_file(tmp_path, none_yet))
    assert scenario.replica_owner == {
        "prod/chat-0": "prod/Deployment/chat",
        "prod/chat-1": "prod/Deployment/chat",
    }
    assert set(scenario.replica_templates) == {"prod/Deployment/chat", "prod/Deployment/idle"}
    template = scenario.replica_templates["prod/Deployment/idle"].workload
    assert template.name == "idle-0"
    assert template.pods[0].gpu.count == 1
    assert [w.workload.name for w in scenario.workloads] == ["chat-0", "chat-1"]
