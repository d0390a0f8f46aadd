"""The two engines agree: the built-in rules, evaluated by gpufleet's RuleEngine over a
FakeSeries and by Prometheus' own engine (``promtool test rules`` on the exported rule file),
give the same verdicts on the same series: which alerts fire at which minute, with which labels.

Each scenario is GPU curves (utilisation, memory, temperature, XID per minute) and pod starts.
gpufleet gets the samples with its two derived series computed as the rules define them
(memory percent, a pod's average utilisation); Prometheus gets the raw dcgm-exporter and
kube-state-metrics series and the exported PromQL. gpufleet's verdict at every minute, checked
first against what the scenario says should happen (so no scenario passes by firing nothing),
becomes the ``alert_rule_test`` expectations that promtool must confirm.

Debian's promtool is Prometheus 2.42, whose windows are closed on the left (``[t-5m, t]``);
Prometheus 3, like gpufleet, opens them (``(t-5m, t]``). A sample on a window's left edge can
therefore count in one and not the other: the scenarios' steps are chosen so that it never
decides a verdict (the step from 30% to 100% crosses 40% at the same minute either way).
Annotations are left out of the compared file: they are text, not verdicts
(``test_exported_rules_pass_promtool_check`` checks their templates).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.cli.alerts import ExportFormat, render
from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.io.fleet.prometheus_rules import rule_file, to_yaml
from gpufleet.model.alerts import (
    WORKLOAD_START_TIME,
    Aggregation,
    AlertMetric,
    AlertRule,
    AlertState,
    Comparison,
    Severity,
    promql_duration,
)
from gpufleet.telemetry.alert_dispatch import rule_annotations
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.testing.fake_series import FakeSeries

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None,
    reason="no promtool (`make test` installs Debian's prometheus package where it can)",
)

STEP_S = 60
TOTAL_MIB = 80_000
FB_FREE = "DCGM_FI_DEV_FB_FREE"

Curve = Callable[[int], float]
#: Per minute, per alertname: the label sets of the firing alerts (alertname left out).
Verdicts = dict[int, dict[str, list[dict[str, str]]]]


def const(value: float) -> Curve:
    return lambda minute: value


NO_XID = const(0)


def steps(*points: tuple[int, float]) -> Curve:
    """``steps((0, 5), (130, 100))``: 5 from minute 0, 100 from minute 130."""
    return lambda minute: [value for start, value in points if start <= minute][-1]


@dataclass(frozen=True)
class Gpu:
    index: int
    host: str
    util: Curve
    memory_percent: Curve
    temperature: Curve
    xid: Curve = NO_XID
    namespace: str = ""
    pod: str = ""

    def labels(self) -> dict[str, str]:
        labels = {
            "gpu": str(self.index),
            "UUID": f"GPU-{self.host}-{self.index}",
            "Hostname": self.host,
            "modelName": "NVIDIA H100 80GB HBM3",
        }
        if self.pod:
            labels |= {"namespace": self.namespace, "pod": self.pod, "container": "main"}
        return labels


@dataclass(frozen=True)
class Scenario:
    name: str
    minutes: int
    gpus: tuple[Gpu, ...]
    #: (namespace, pod) -> start, in seconds.
    starts: dict[tuple[str, str], float] = field(default_factory=dict)
    #: Rule name -> (the minute it starts firing, the minute it resolves or None); a rule not
    #: named never fires.
    expect: dict[str, tuple[int, int | None]] = field(default_factory=dict)

    def raw_series(self) -> list[tuple[str, dict[str, str], list[float]]]:
        """What dcgm-exporter and kube-state-metrics would have Prometheus scrape."""
        series = []
        for gpu in self.gpus:
            used = [gpu.memory_percent(m) * TOTAL_MIB / 100 for m in range(self.minutes)]
            for metric, values in (
                (AlertMetric.GPU_UTIL.value, [gpu.util(m) for m in range(self.minutes)]),
                (AlertMetric.FB_USED.value, used),
                (FB_FREE, [TOTAL_MIB - u for u in used]),
                (AlertMetric.GPU_TEMP.value, [gpu.temperature(m) for m in range(self.minutes)]),
                (AlertMetric.XID_ERRORS.value, [gpu.xid(m) for m in range(self.minutes)]),
            ):
                series.append((metric, gpu.labels(), values))
        for (namespace, pod), start in self.starts.items():
            labels = {"namespace": namespace, "pod": pod}
            series.append((WORKLOAD_START_TIME, labels, [start] * self.minutes))
        return series

    def fake_series(self) -> FakeSeries:
        """The raw series and gpufleet's two derived ones, as the rules define them."""
        store = FakeSeries()
        raw = self.raw_series()
        for metric, labels, values in raw:
            for minute, value in enumerate(values):
                store.add(metric, labels, minute * STEP_S, value)
        for gpu in self.gpus:
            for minute in range(self.minutes):
                used = gpu.memory_percent(minute) * TOTAL_MIB / 100
                percent = 100 * used / (used + (TOTAL_MIB - used))
                store.add(AlertMetric.FB_USED_PERCENT.value, gpu.labels(), minute * STEP_S, percent)
        pods = {(gpu.namespace, gpu.pod) for gpu in self.gpus if gpu.pod}
        for namespace, pod in sorted(pods):
            held = [gpu for gpu in self.gpus if (gpu.namespace, gpu.pod) == (namespace, pod)]
            for minute in range(self.minutes):
                util = sum(gpu.util(minute) for gpu in held) / len(held)
                labels = {"namespace": namespace, "pod": pod}
                store.add(AlertMetric.WORKLOAD_GPU_UTIL.value, labels, minute * STEP_S, util)
        return store


IDLE = ("ml", "notebook")
TRAIN = ("ml", "train")
SERVE = ("ml", "serve")
SCENARIOS = [
    Scenario(
        "fires-after-for",
        150,
        (
            Gpu(
                0,
                "node-a",
                util=const(5),
                memory_percent=steps((0, 50), (10, 95)),
                temperature=steps((0, 60), (20, 90)),
                xid=steps((0, 0), (30, 43)),
                namespace=IDLE[0],
                pod=IDLE[1],
            ),
            Gpu(1, "node-a", util=const(90), memory_percent=const(30), temperature=const(50)),
        ),
        starts={IDLE: 0.0},
        expect={
            "gpu-memory-high": (15, None),
            "gpu-temperature-high": (25, None),
            "gpu-xid-error": (30, None),
            "gpu-utilisation-low": (120, None),
            "workload-gpu-idle": (120, None),
        },
    ),
    Scenario(
        "resolves",
        160,
        (
            Gpu(
                0,
                "node-b",
                util=steps((0, 5), (130, 100)),
                memory_percent=steps((0, 95), (20, 40)),
                temperature=steps((0, 90), (40, 70)),
                xid=steps((0, 79), (10, 0)),
                namespace=TRAIN[0],
                pod=TRAIN[1],
            ),
            Gpu(
                1,
                "node-b",
                util=steps((0, 30), (130, 100)),
                memory_percent=const(40),
                temperature=const(60),
                namespace=TRAIN[0],
                pod=TRAIN[1],
            ),
        ),
        starts={TRAIN: 0.0},
        expect={
            "gpu-memory-high": (5, 20),
            "gpu-temperature-high": (5, 40),
            "gpu-xid-error": (0, 10),
            "gpu-utilisation-low": (120, 139),
            "workload-gpu-idle": (120, 131),
        },
    ),
    Scenario(
        "never-fires",
        130,
        (
            Gpu(
                0,
                "node-c",
                util=const(80),
                memory_percent=steps((0, 50), (10, 95), (14, 50)),
                temperature=steps((0, 60), (30, 90), (34, 60)),
                namespace=SERVE[0],
                pod=SERVE[1],
            ),
            Gpu(1, "node-c", util=const(25), memory_percent=const(20), temperature=const(40)),
        ),
        starts={SERVE: 0.0},
    ),
]


def gpufleet_verdicts(scenario: Scenario) -> Verdicts:
    engine = RuleEngine(builtin_alert_rules())
    store = scenario.fake_series()
    verdicts: Verdicts = {}
    for minute in range(scenario.minutes):
        engine.evaluate(store, minute * STEP_S)
        firing: dict[str, list[dict[str, str]]] = {r.alert_name: [] for r in engine.rules}
        for alert in engine.alerts():
            if alert.state is AlertState.FIRING:
                labels = {k: v for k, v in alert.labels if k != "alertname"}
                firing[alert.label("alertname")].append(labels)
        verdicts[minute] = firing
    return verdicts


def firing_span(verdicts: Verdicts, alertname: str) -> tuple[int, int | None] | None:
    """(the first minute any alert of ``alertname`` fires, the first minute after it when none
    does, or None), or None when it never fires."""
    minutes = [minute for minute, firing in sorted(verdicts.items()) if firing[alertname]]
    if not minutes:
        return None
    after = [m for m in verdicts if m > minutes[0] and not verdicts[m][alertname]]
    return minutes[0], min(after) if after else None


def promtool_test(scenario: Scenario, verdicts: Verdicts) -> dict[str, Any]:
    input_series = [
        {
            "series": metric
            + "{"
            + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            + "}",
            "values": " ".join(repr(float(v)) for v in values),
        }
        for metric, labels, values in scenario.raw_series()
    ]
    tests = [
        {
            "eval_time": promql_duration(minute * STEP_S),
            "alertname": alertname,
            "exp_alerts": [{"exp_labels": labels} for labels in alerts],
        }
        for minute, firing in sorted(verdicts.items())
        for alertname, alerts in firing.items()
    ]
    return {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": promql_duration(STEP_S),
        "tests": [
            {
                "interval": promql_duration(STEP_S),
                "input_series": input_series,
                "alert_rule_test": tests,
            }
        ],
    }


def run_promtool(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def promtool_agrees(
    tmp_path: Path, scenario: Scenario, verdicts: Verdicts
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of the built-in rules (less annotations) against ``verdicts``."""
    document = rule_file(builtin_alert_rules())
    for entry in document["groups"][0]["rules"]:
        del entry["annotations"]
    (tmp_path / "rules.yaml").write_text(to_yaml(document))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(promtool_test(scenario, verdicts)))
    return run_promtool(tmp_path, "test", "rules", "test.yaml")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_gpufleet_and_prometheus_give_the_same_verdicts(scenario: Scenario, tmp_path: Path) -> None:
    verdicts = gpufleet_verdicts(scenario)
    rules = builtin_alert_rules()
    spans = {rule.name: firing_span(verdicts, rule.alert_name) for rule in rules}
    assert spans == {rule.name: scenario.expect.get(rule.name) for rule in rules}

    result = promtool_agrees(tmp_path, scenario, verdicts)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_a_wrong_verdict_fails_promtool(tmp_path: Path) -> None:
    """The comparison can fail: promtool refuses a verdict gpufleet did not give."""
    scenario = SCENARIOS[0]
    verdicts = gpufleet_verdicts(scenario)
    verdicts[14]["GpuMemoryHigh"] = verdicts[15]["GpuMemoryHigh"]  # one minute early
    result = promtool_agrees(tmp_path, scenario, verdicts)
    assert result.returncode != 0
    assert "GpuMemoryHigh" in result.stdout + result.stderr


@pytest.mark.parametrize("export_format", list(ExportFormat))
def test_exported_rules_pass_promtool_check(export_format: ExportFormat, tmp_path: Path) -> None:
    text = render(builtin_alert_rules(), export_format, None)
    document = yaml.safe_load(text)
    if export_format is ExportFormat.PROMETHEUS_RULE:
        document = {"groups": document["spec"]["groups"]}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(document))
    result = run_promtool(tmp_path, "check", "rules", "rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


# -- annotations --------------------------------------------------------------------------------
#: Rules whose annotations show what a template can differ in: the aggregation of a windowed
#: rule, a summary's label and value references (a label the series lacks included), values Go
#: prints in exponent form, a quantile, a workload's pod, and text that looks like an action
#: (a rule made in code, which the reader would refuse).
ANNOTATED_RULES = [
    AlertRule("util-low", AlertMetric.GPU_UTIL, Comparison.LT, 20.0, Aggregation.AVG, 300.0),
    AlertRule(
        "fb-huge",
        AlertMetric.FB_USED,
        Comparison.GT,
        1_000_000.0,
        summary="{{$labels.gpu}} holds {{ $value }} MiB{{ $labels.absent }}",
    ),
    AlertRule(
        "power-tiny",
        AlertMetric.POWER_USAGE,
        Comparison.LT,
        0.001,
        severity=Severity.INFO,
        summary="power {{ $value }} W",
    ),
    AlertRule(
        "temp-q",
        AlertMetric.GPU_TEMP,
        Comparison.GT,
        85.0,
        Aggregation.QUANTILE,
        300.0,
        quantile=0.9,
        severity=Severity.CRITICAL,
        summary="at {{ $value }}, {{ not a reference",
    ),
    AlertRule(
        "pod-idle",
        AlertMetric.WORKLOAD_GPU_UTIL,
        Comparison.LT,
        40.0,
        Aggregation.AVG,
        300.0,
        summary="{{ $labels.pod }} idle",
    ),
]
HELD = {"namespace": "ml", "pod": "nb", "container": "main"}
#: (labels, {metric: constant value}) of two GPUs: one held, one without a model or holder.
ANNOTATED_GPUS = [
    (
        {"gpu": "0", "UUID": "GPU-a", "Hostname": "n1", "modelName": "NVIDIA H100", **HELD},
        {"GPU_UTIL": 5.0, "FB_USED": 1_234_567.0, "POWER_USAGE": 0.00001, "GPU_TEMP": 85.82317},
    ),
    (
        {"gpu": "1", "UUID": "GPU-b", "Hostname": "n1"},
        {"GPU_UTIL": 12.25, "FB_USED": 2_000_000.0, "POWER_USAGE": 0.0001, "GPU_TEMP": 90.0},
    ),
]
ANNOTATED_MINUTES = 11


def test_prometheus_renders_the_annotations_gpufleet_writes(tmp_path: Path) -> None:
    """gpufleet's own notifications annotate an alert as Prometheus renders the exported
    rule's templates for it: every alert gpufleet's engine fires, with gpufleet's annotations
    (:func:`~gpufleet.telemetry.alert_dispatch.rule_annotations`) as promtool's expected ones.
    (Before, gpufleet wrote a windowed rule's description without its aggregation and a
    summary's ``{{ $labels.gpu }}`` as it stood.)"""
    store = FakeSeries()
    input_series = []
    for labels, values in ANNOTATED_GPUS:
        for name, value in values.items():
            metric = AlertMetric[name].value
            for minute in range(ANNOTATED_MINUTES):
                store.add(metric, labels, minute * STEP_S, value)
            written = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            input_series.append(
                {"series": f"{metric}{{{written}}}", "values": f"{value:f}x{ANNOTATED_MINUTES}"}
            )
    held = ANNOTATED_GPUS[0][1]["GPU_UTIL"]
    for minute in range(ANNOTATED_MINUTES):
        pod = {k: HELD[k] for k in ("namespace", "pod")}
        store.add(AlertMetric.WORKLOAD_GPU_UTIL.value, pod, minute * STEP_S, held)
    at = (ANNOTATED_MINUTES - 1) * STEP_S
    engine = RuleEngine(ANNOTATED_RULES)
    engine.evaluate(store, at)
    annotate = rule_annotations(ANNOTATED_RULES)
    expected: dict[str, list[dict[str, Any]]] = {rule.alert_name: [] for rule in ANNOTATED_RULES}
    for alert in engine.alerts():
        assert alert.state is AlertState.FIRING
        expected[alert.label("alertname")].append(
            {
                "exp_labels": {k: v for k, v in alert.labels if k != "alertname"},
                "exp_annotations": dict(annotate(alert)),
            }
        )
    assert {name: len(alerts) for name, alerts in expected.items()} == {
        "UtilLow": 2,
        "FbHuge": 2,
        "PowerTiny": 2,
        "TempQ": 2,
        "PodIdle": 1,
    }
    summaries = {a["exp_annotations"]["summary"] for alerts in expected.values() for a in alerts}
    assert "GPU 1 () on n1: 1 holds 2e+06 MiB" in summaries
    assert "GPU 0 (NVIDIA H100) on n1, held by pod ml/nb: power 1e-05 W" in summaries
    assert "GPU 0 (NVIDIA H100) on n1, held by pod ml/nb: at 85.82317, {{ not a reference" in (
        summaries
    )

    (tmp_path / "rules.yaml").write_text(to_yaml(rule_file(ANNOTATED_RULES)))
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": promql_duration(STEP_S),
        "tests": [
            {
                "interval": promql_duration(STEP_S),
                "input_series": input_series,
                "alert_rule_test": [
                    {"eval_time": promql_duration(at), "alertname": name, "exp_alerts": alerts}
                    for name, alerts in expected.items()
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    result = run_promtool(tmp_path, "test", "rules", "test.yaml")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
