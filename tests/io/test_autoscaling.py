"""Autoscaling declared with gpufleet's annotations, joined to the workloads it scales (model
load time, one autoscaler per workload, a target that must be there), the examples the README
shows, and a scenario reading them beside its workloads."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.kinds import Skipped
from gpufleet.io.kube.autoscaling import ANNOTATIONS, read_autoscaling
from gpufleet.io.kube.autoscaling_hpa import HPA_METRICS
from gpufleet.io.readers import read_scenario, read_workload
from gpufleet.model.autoscaling import (
    DEFAULT_SCALE_UP,
    Aggregate,
    AutoscalingSpec,
    Behavior,
    MetricSource,
    MetricTarget,
    ScaleTarget,
    ScaleToZero,
    ScalingRules,
    TargetType,
)
from gpufleet.testing.autoscaling_builders import (
    GPU_UTIL,
    LATENCY,
    QUEUE,
    RPS,
    deployment,
    hpa,
    scaled_object,
)
from tests.conftest import REPO_ROOT
from tests.io.autoscaling_helpers import assert_names, read_one, refused, write_objects
from tests.io.conftest import WriteFile

EXAMPLES = REPO_ROOT / "examples" / "autoscaling"
EXT, PODS = MetricSource.EXTERNAL, MetricSource.PODS
AVERAGE, VALUE, UTIL = TargetType.AVERAGE_VALUE, TargetType.VALUE, TargetType.UTILIZATION


def annotated(**annotations: str) -> dict[str, Any]:
    return deployment(
        annotations={f"gpufleet.dev/{k.replace('_', '-')}": v for k, v in annotations.items()}
    )


def test_every_annotation(write_file: WriteFile) -> None:
    spec = read_one(
        write_file,
        annotated(
            min_replicas="0",
            max_replicas="8",
            target_queue_depth="10",
            target_rps_per_replica="2.5",
            target_latency="800ms",
            target_gpu_utilization="70",
            scale_up_stabilization="30s",
            scale_down_stabilization="10m",
            scale_to_zero_after="15m",
            model_load_time="90s",
        ),
    )
    assert spec == AutoscalingSpec(
        ScaleTarget("Deployment", "llm", "ml"),
        1,
        8,
        (
            MetricTarget(QUEUE, EXT, AVERAGE, 10.0),
            MetricTarget(RPS, EXT, AVERAGE, 2.5),
            MetricTarget(LATENCY, EXT, VALUE, 0.8),
            MetricTarget(GPU_UTIL, PODS, UTIL, 70.0),
        ),
        Behavior(
            ScalingRules(30, DEFAULT_SCALE_UP.policies),
            ScalingRules(600, Behavior().scale_down.policies),
        ),
        ScaleToZero(900.0, 0.0, 15.0),
        model_load_s=90.0,
        declared_by="annotations of Deployment ml/llm",
    )


def test_annotation_defaults(write_file: WriteFile) -> None:
    spec = read_one(write_file, annotated(max_replicas="4", target_queue_depth="5"))
    assert (spec.min_replicas, spec.scale_to_zero, spec.model_load_s) == (1, None, 60.0)
    assert spec.behavior == Behavior()


def test_no_autoscaling_annotations_no_autoscaling(write_file: WriteFile) -> None:
    path = write_objects(write_file, annotated(model_load_time="2m"), deployment("other"))
    assert read_autoscaling(path) == []


def test_the_workloads_model_load_time_applies_to_its_hpa_and_scaled_object(
    write_file: WriteFile,
) -> None:
    path = write_objects(
        write_file,
        annotated(model_load_time="3m"),
        hpa(),
        deployment("coder", annotations={"gpufleet.dev/model-load-time": "45s"}),
        scaled_object("coder", target="coder"),
    )
    assert [(s.declared_by, s.model_load_s) for s in read_autoscaling(path)] == [
        ("HorizontalPodAutoscaler ml/llm", 180.0),
        ("ScaledObject ml/coder", 45.0),
    ]


def annotation(key: str) -> str:
    return f"metadata.annotations[gpufleet.dev/{key}]"


DEPLOYMENT = "Deployment ml/llm"
BAD = {
    "no-max": (
        annotated(target_queue_depth="5"),
        annotation("max-replicas"),
        "required with autoscaling annotations",
    ),
    "no-target": (
        annotated(max_replicas="4"),
        "metadata.annotations",
        "autoscaling needs at least one target",
    ),
    "max-below-min": (
        annotated(min_replicas="3", max_replicas="2", target_queue_depth="5"),
        annotation("max-replicas"),
        "must be at least min-replicas (3), got 2",
    ),
    "negative-min": (
        annotated(min_replicas="-1", max_replicas="2", target_queue_depth="5"),
        annotation("min-replicas"),
        "expected a whole number >= 0, got -1",
    ),
    "max-not-a-number": (
        annotated(max_replicas="many", target_queue_depth="5"),
        annotation("max-replicas"),
        "expected a whole number, got 'many'",
    ),
    "target-zero": (
        annotated(max_replicas="2", target_queue_depth="0"),
        annotation("target-queue-depth"),
        "expected a number above 0, got '0'",
    ),
    "utilization-over-100": (
        annotated(max_replicas="2", target_gpu_utilization="120"),
        annotation("target-gpu-utilization"),
        "expected a percentage up to 100",
    ),
    "latency-not-a-duration": (
        annotated(max_replicas="2", target_latency="fast"),
        annotation("target-latency"),
        "expected seconds or a duration",
    ),
    "window-too-long": (
        annotated(max_replicas="2", target_queue_depth="5", scale_down_stabilization="2h"),
        annotation("scale-down-stabilization"),
        "expected whole seconds up to 1h",
    ),
    "cooldown-without-scale-to-zero": (
        annotated(max_replicas="2", target_queue_depth="5", scale_to_zero_after="5m"),
        annotation("scale-to-zero-after"),
        'only with gpufleet.dev/min-replicas: "0"',
    ),
    "scale-to-zero-on-utilization-only": (
        annotated(min_replicas="0", max_replicas="2", target_gpu_utilization="60"),
        annotation("min-replicas"),
        "0 (scale to zero) needs gpufleet.dev/target-queue-depth",
    ),
    "typo": (
        deployment(
            annotations={"gpufleet.dev/target-queue-dept": "5", "gpufleet.dev/max-replicas": "2"}
        ),
        annotation("target-queue-dept"),
        "unknown annotation; did you mean 'gpufleet.dev/target-queue-depth'?",
    ),
    "model-load-time-negative": (
        annotated(model_load_time="-5s"),
        annotation("model-load-time"),
        "not negative",
    ),
}


@pytest.mark.parametrize(("obj", "field", "message"), BAD.values(), ids=BAD.keys())
def test_bad_annotations_name_file_object_and_field(
    write_file: WriteFile, obj: dict[str, Any], field: str, message: str
) -> None:
    path, error = refused(write_file, obj)
    assert_names(error, path, 1, DEPLOYMENT, field, message)


def test_annotations_on_the_pod_template_belong_on_the_object(write_file: WriteFile) -> None:
    obj = deployment()
    obj["spec"]["template"]["metadata"]["annotations"] = {"gpufleet.dev/max-replicas": "3"}
    path, error = refused(write_file, obj)
    assert_names(
        error, path, 1, DEPLOYMENT,
        "spec.template.metadata.annotations[gpufleet.dev/max-replicas]",
        "belongs on the Deployment's own metadata.annotations",
    )  # fmt: skip


def test_a_pod_has_nothing_to_scale(write_file: WriteFile) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "llm",
            "namespace": "ml",
            "annotations": {
                "gpufleet.dev/max-replicas": "3",
                "gpufleet.dev/target-queue-depth": "4",
            },
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    path, error = refused(write_file, pod)
    assert_names(
        error, path, 1, "Pod ml/llm", "metadata.annotations[gpufleet.dev/max-replicas]",
        "a Pod has no replicas to scale",
    )  # fmt: skip


def test_the_target_must_be_among_the_objects_read(write_file: WriteFile) -> None:
    path, error = refused(write_file, deployment("other"), hpa())
    assert_names(
        error, path, 2, "HorizontalPodAutoscaler ml/llm", "spec.scaleTargetRef.name",
        "names Deployment ml/llm, which is not among the objects read",
    )  # fmt: skip


def test_a_target_in_another_namespace_is_another_workload(write_file: WriteFile) -> None:
    path, error = refused(write_file, deployment(namespace="prod"), scaled_object())
    assert_names(
        error, path, 2, "ScaledObject ml/llm", "spec.scaleTargetRef.name",
        "names Deployment ml/llm, which is not among",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("second", "what"),
    [
        pytest.param(scaled_object(), "ScaledObject ml/llm", id="hpa-then-scaled-object"),
        pytest.param(hpa(name="llm-2"), "HorizontalPodAutoscaler ml/llm-2", id="two-hpas"),
    ],
)
def test_one_autoscaler_per_workload(
    write_file: WriteFile, second: dict[str, Any], what: str
) -> None:
    path, error = refused(write_file, deployment(), hpa(), second)
    assert_names(
        error, path, 3, what, "spec.scaleTargetRef.name",
        "Deployment ml/llm is autoscaled already by HorizontalPodAutoscaler ml/llm (at ",
    )  # fmt: skip


def test_annotations_and_an_hpa_on_one_workload(write_file: WriteFile) -> None:
    _, error = refused(write_file, annotated(max_replicas="3", target_queue_depth="4"), hpa())
    assert "autoscaled already by annotations of Deployment ml/llm" in error.reason


# ----------------------------------------------------------------------------- examples
def test_the_examples(write_file: WriteFile) -> None:
    chat, embeddings, code = read_autoscaling(EXAMPLES)
    assert chat.declared_by == "annotations of Deployment ml-serving/chat"
    assert (chat.floor, chat.max_replicas, chat.model_load_s) == (0, 8, 90.0)
    assert chat.scale_to_zero == ScaleToZero(600.0, 0.0, 15.0)
    assert [(m.metric, m.value) for m in chat.metrics] == [(QUEUE, 3.0)]
    assert embeddings.declared_by == "HorizontalPodAutoscaler ml-serving/embeddings"
    assert (embeddings.min_replicas, embeddings.max_replicas, embeddings.model_load_s) == (
        2,
        12,
        30.0,
    )
    assert embeddings.metrics == (
        MetricTarget(GPU_UTIL, PODS, AVERAGE, 70.0),
        MetricTarget(QUEUE, EXT, AVERAGE, 20.0),
    )
    assert embeddings.behavior.scale_down.stabilization_window_s == 600
    assert code.declared_by == "ScaledObject ml-serving/code"
    assert (code.floor, code.max_replicas, code.model_load_s) == (0, 6, 120.0)
    assert code.scale_to_zero == ScaleToZero(300.0, 0.0, 15.0)
    assert code.metrics == (
        MetricTarget(QUEUE, EXT, AVERAGE, 5.0, Aggregate.SUM),
        MetricTarget(LATENCY, EXT, VALUE, 1.5, Aggregate.P95),
    )


def test_a_scenario_reads_its_autoscaling_beside_its_workloads() -> None:
    skipped = Skipped()
    scenario = read_scenario(EXAMPLES, skipped)
    assert scenario.autoscaling == read_autoscaling(EXAMPLES)
    assert sorted(w.workload.name for w in scenario.workloads) == [
        "chat-0", "embeddings-0", "embeddings-1",
    ]  # fmt: skip
    assert not skipped


def test_a_bad_autoscaler_fails_the_scenario(write_file: WriteFile) -> None:
    path = write_objects(write_file, deployment(), hpa(max_replicas=0))
    with pytest.raises(InputError, match=r"HorizontalPodAutoscaler ml/llm: spec\.maxReplicas"):
        read_scenario(path)


def test_readers_of_workloads_alone_set_autoscalers_aside() -> None:
    skipped = Skipped()
    pods = read_workload(EXAMPLES / "hpa.yaml", skipped)
    assert [t.pod.name for t in pods] == ["embeddings-0", "embeddings-1"]
    assert skipped.counts == {"HorizontalPodAutoscaler": 1}


def test_the_readme_documents_every_annotation_and_metric() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n### Autoscaling inference replicas", 1)[1].split("\n### ", 1)[0]
    annotations = set(re.findall(r"`(gpufleet\.dev/[a-z-]+)`", section))
    assert annotations == set(ANNOTATIONS)
    for name in HPA_METRICS:
        assert f"`{name}`" in section, name
