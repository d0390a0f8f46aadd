"""vLLM's metrics to gpufleet's, and gpufleet's queries over them, by Prometheus' own engine
(``promtool test rules``): the recording rules of
``examples/autoscaling/kubernetes/vllm-rules.yaml`` give the series gpufleet reads, and the
PromQL the replica autoscaler sends (:func:`~gpufleet.backends.prometheus.inference.metric_query`)
over them gives the values its readings are made of. The series are those of two vLLM pods of
Deployment ``llm`` (one with two engines), a pod of another Deployment that must not count, and
a router's queue that names the Deployment.

Each scrape is 15 s apart; counters go up at constant rates, so a rate is exact: ``llm-0``
finishes 5 requests a second with ``stop`` and 1 with ``length``, of which half take at most
0.5 s, 90% at most 1 s and all at most 2.5 s (a p95 of 1 + 0.5 x 1.5 = 1.75 s)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.backends.prometheus.inference import ServingPods, metric_query, reading_of
from gpufleet.model.autoscaling import InferenceMetric, MetricReading

REPO_ROOT = Path(__file__).resolve().parents[3]
RULES = REPO_ROOT / "examples" / "autoscaling" / "kubernetes" / "vllm-rules.yaml"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None,
    reason="no promtool (`make test` installs Debian's prometheus package where it can)",
)
SCRAPES = 21  # 5 minutes at 15 s
EVAL = "5m"


def steady(value: float) -> str:
    return f"{value:g}x{SCRAPES}"


def climbing(per_second: float) -> str:
    return f"0+{per_second * 15:g}x{SCRAPES}"


def vllm(pod: str, engine: str = "0", namespace: str = "ml") -> str:
    return f'namespace="{namespace}",pod="{pod}",model_name="llama",engine="{engine}"'


FINISHED = [
    ("llm-0", "stop", 5), ("llm-0", "length", 1), ("llm-0", "abort", 0),
    ("llm-1", "stop", 2), ("other-0", "stop", 100),
]  # fmt: skip
LATENCIES = [
    *(("llm-0", le, rate) for le, rate in (("0.5", 3), ("1.0", 5.4), ("2.5", 6), ("+Inf", 6))),
    *(("other-0", le, 100) for le in ("0.5", "1.0", "2.5", "+Inf")),
]
#: GPUs: llm-0 holds two (80%, 60%), llm-1 one (10%); a GPU no pod holds.
GPUS = [
    ('gpu="0",namespace="ml",pod="llm-0"', 80),
    ('gpu="1",namespace="ml",pod="llm-0"', 60),
    ('gpu="2",namespace="ml",pod="llm-1"', 10),
    ('gpu="3",namespace="",pod=""', 3),
]
INPUT: list[dict[str, str]] = [
    # requests outstanding: llm-0 3 running + 2 waiting; llm-1 (two engines) 1+2 and 0+4.
    {"series": f"vllm:num_requests_running{{{vllm('llm-0')}}}", "values": steady(3)},
    {"series": f"vllm:num_requests_waiting{{{vllm('llm-0')}}}", "values": steady(2)},
    {"series": f"vllm:num_requests_running{{{vllm('llm-1')}}}", "values": steady(1)},
    {"series": f"vllm:num_requests_waiting{{{vllm('llm-1')}}}", "values": steady(0)},
    {"series": f"vllm:num_requests_running{{{vllm('llm-1', '1')}}}", "values": steady(2)},
    {"series": f"vllm:num_requests_waiting{{{vllm('llm-1', '1')}}}", "values": steady(4)},
    {"series": f"vllm:num_requests_running{{{vllm('other-0')}}}", "values": steady(50)},
    {"series": f"vllm:num_requests_waiting{{{vllm('other-0')}}}", "values": steady(50)},
    # The router's queue for the Deployment, exported under gpufleet's name by the router.
    {
        "series": 'gpufleet_inference_queue_depth{namespace="ml",deployment="llm",pod="router-0"}',
        "values": steady(4),
    },
    # requests finished: llm-0 5/s + 1/s; llm-1 2/s; other-0 100/s.
    *(
        {
            "series": f'vllm:request_success_total{{{vllm(pod)},finished_reason="{reason}"}}',
            "values": climbing(rate),
        }
        for pod, reason, rate in FINISHED
    ),
    *(
        {
            "series": f'vllm:e2e_request_latency_seconds_bucket{{{vllm(pod)},le="{le}"}}',
            "values": climbing(rate),
        }
        for pod, le, rate in LATENCIES
    ),
    *(
        {"series": f"DCGM_FI_DEV_GPU_UTIL{{{labels}}}", "values": steady(util)}
        for labels, util in GPUS
    ),
]

SERVING = ServingPods("ml", "Deployment", "llm", ("llm-0", "llm-1"), frozenset({"llm-0"}))


def sample(labels: str, value: float) -> dict[str, Any]:
    return {"labels": labels, "value": value}


RECORDED = [
    (
        "gpufleet_inference_queue_depth",
        [
            sample('gpufleet_inference_queue_depth{namespace="ml",pod="llm-0"}', 5),
            sample('gpufleet_inference_queue_depth{namespace="ml",pod="llm-1"}', 7),
            sample('gpufleet_inference_queue_depth{namespace="ml",pod="other-0"}', 100),
            sample(
                'gpufleet_inference_queue_depth{namespace="ml",deployment="llm",pod="router-0"}',
                4,
            ),
        ],
    ),
    (
        'sum by (pod) (rate(gpufleet_inference_requests_total{namespace="ml"}[1m]))',
        [sample('{pod="llm-0"}', 6), sample('{pod="llm-1"}', 2), sample('{pod="other-0"}', 100)],
    ),
    (
        "gpufleet_workload_gpu_util",
        [
            sample('gpufleet_workload_gpu_util{namespace="ml",pod="llm-0"}', 70),
            sample('gpufleet_workload_gpu_util{namespace="ml",pod="llm-1"}', 10),
        ],
    ),
]
#: What gpufleet's own queries of Deployment llm answer, and the readings made of that.
QUERIED: list[tuple[InferenceMetric, list[dict[str, Any]], MetricReading]] = [
    (
        InferenceMetric.QUEUE_DEPTH,
        [sample('{pod="llm-0"}', 5), sample('{pod="llm-1"}', 7), sample('{pod="router-0"}', 4)],
        MetricReading((5.0,), 16.0),
    ),
    (
        InferenceMetric.REQUESTS_PER_SECOND,
        [sample('{pod="llm-0"}', 6), sample('{pod="llm-1"}', 2)],
        MetricReading((6.0,), 8.0),
    ),
    (InferenceMetric.LATENCY_P95, [sample("{}", 1.75)], MetricReading((), 1.75)),
    (
        InferenceMetric.GPU_UTILIZATION,
        [sample('{pod="llm-0"}', 70), sample('{pod="llm-1"}', 10)],
        MetricReading((70.0,)),
    ),
]


def run_promtool(tmp_path: Path, tests: list[dict[str, Any]]) -> None:
    spec = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": INPUT, "promql_expr_test": tests}],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rule_file_is_valid() -> None:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_vllm_metrics_recorded_under_gpufleets_names(tmp_path: Path) -> None:
    run_promtool(
        tmp_path,
        [{"expr": expr, "eval_time": EVAL, "exp_samples": samples} for expr, samples in RECORDED],
    )


def test_the_autoscalers_queries_over_the_recorded_series(tmp_path: Path) -> None:
    def rounded(metric: InferenceMetric) -> str:
        """The query, its p95 to the millisecond (an interpolation is not exact in floats)."""
        query = metric_query(metric, SERVING)
        return f"round({query}, 0.001)" if metric is InferenceMetric.LATENCY_P95 else query

    run_promtool(
        tmp_path,
        [
            {"expr": rounded(metric), "eval_time": EVAL, "exp_samples": samples}
            for metric, samples, _ in QUERIED
        ],
    )


@pytest.mark.parametrize(
    ("metric", "samples", "reading"), QUERIED, ids=[m.name.lower() for m, _, _ in QUERIED]
)
def test_the_readings_made_of_those_answers(
    metric: InferenceMetric, samples: list[dict[str, Any]], reading: MetricReading
) -> None:
    answer = {}
    for found in samples:
        labels = found["labels"].strip("{}")
        pairs = [tuple(p.split("=", 1)) for p in labels.split(",") if p]
        answer[tuple((k, v.strip('"')) for k, v in pairs)] = float(found["value"])
    assert reading_of(metric, SERVING, answer) == reading
