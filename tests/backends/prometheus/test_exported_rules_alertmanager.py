"""gpufleet's exported alert rules, run by a real Prometheus, reach a real Alertmanager's webhook
as exactly the alerts gpufleet's own engine finds firing over the same Prometheus.

The chain, every piece real and on loopback: the node agent's /metrics over fake GPUs
(:class:`~gpufleet.testing.prometheus.FakeGpuExporter`) -> Prometheus (Debian's), scraping it
every second and evaluating the rule file that ``gpufleet alerts export --format rules
--no-builtin --rules FILE`` writes for a user's GPUAlertRule file -> Alertmanager (Debian's
``prometheus-alertmanager``), grouping by alertname with 1 s timers -> a webhook receiver.
Beside it gpufleet's :class:`~gpufleet.telemetry.rules.RuleEngine` evaluates the rules read
from the same file over the same Prometheus (:class:`~gpufleet.backends.prometheus.
PrometheusSeries`), round after round, as ``gpufleet serve`` does in Kubernetes mode.

The rules fire within seconds on the fake GPUs (short windows and ``for``): an XID on GPU 2, a
temperature on GPU 0, memory on GPU 1, a busy pod (with ``minRunning``, so kube-state-metrics'
pod starts are served too), and one rule no GPU crosses. Compared, alert by alert: every label
(Prometheus' ``instance`` and ``job`` included: both engines read the same scraped series),
the ``severity`` the exported rule sets, the annotations (Prometheus' rendering of the exported
templates against gpufleet's own, ``rule_annotations``) and the fingerprint. Not compared:
``startsAt``/``endsAt`` and URLs (each side's own clock and address).

Then GPU 0 cools (the fake GPUs' clock moves past its next usage point): both engines resolve
its temperature alert, Alertmanager sends the resolution, the rest stays firing. The XID cannot
be cleared that way: the agent, as dcgm-exporter, reports a GPU's last XID for as long as it
runs. Waiting is polling with deadlines; nothing sleeps for correctness.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.backends.prometheus import PrometheusSeries
from gpufleet.cli.main import app
from gpufleet.io.fleet.alert_rules import read_alert_rules
from gpufleet.model.alerts import Alert, AlertRule, AlertState
from gpufleet.telemetry.alert_dispatch import ZERO_TIME, Annotate, fingerprint, rule_annotations
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.testing.alertmanager import AlertmanagerProcess, alertmanager_binary
from gpufleet.testing.prometheus import FakeGpuExporter, PrometheusProcess, prometheus_binary
from gpufleet.testing.webhook_receiver import Received, WebhookReceiver

pytestmark = [
    pytest.mark.skipif(
        prometheus_binary() is None,
        reason="no prometheus binary (Debian's `prometheus` package; `make test` installs it "
        "where it can)",
    ),
    pytest.mark.skipif(
        alertmanager_binary() is None,
        reason="no Alertmanager (Debian's `prometheus-alertmanager` package; `make test` "
        "installs it where it can)",
    ),
]

NODE = "gpu-node-1"
H100 = "NVIDIA H100 80GB HBM3"
#: When GPU 2 raises XID 79, and when GPU 0 cools from 88 C to 60 C (the fake GPUs' clock).
XID_AT_S = 1.0
COOLED_AT_S = 100.0


def usage(util: float, fb_used_mib: int, temperature_c: float, power_w: float) -> dict[str, Any]:
    return {
        "gpu_util": util,
        "fb_used_mib": fb_used_mib,
        "temperature_c": temperature_c,
        "power_w": power_w,
    }


#: GPU 0 hot, GPU 1 nearly full (70000 of 81559 MiB), both busy for train-0; GPU 2 nearly idle
#: for notebook-0; GPU 3 idle and free. No GPU draws 1000 W.
FAKE_GPUS: dict[str, Any] = {
    "node": NODE,
    "devices": [
        {
            "product": H100,
            "utilization": [
                {"at": 0, **usage(90, 40_000, 88, 600)},
                {"at": COOLED_AT_S, "temperature_c": 60},
            ],
        },
        {"product": H100, "utilization": usage(70, 70_000, 55, 420)},
        {"product": H100, "utilization": usage(5, 9_000, 40, 110)},
        {"product": H100, "utilization": usage(0, 0, 31, 69)},
    ],
    "faults": [{"at": XID_AT_S, "gpu": 2, "xid": 79}],
}
HOLDERS = {0: ("team-a", "train-0"), 1: ("team-a", "train-0"), 2: ("team-b", "notebook-0")}
KUBE_STATE = """\
# TYPE kube_pod_start_time gauge
kube_pod_start_time{namespace="team-a",pod="train-0"} 1700000000
kube_pod_start_time{namespace="team-b",pod="notebook-0"} 1700000600
"""
#: The user's rule file: what ``gpufleet alerts export --rules`` reads.
USER_RULES = """\
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: gpu-xid}
spec:
  metric: XID_ERRORS
  comparison: ">"
  threshold: 0
  severity: critical
  summary: GPU {{ $labels.gpu }} raised XID {{ $value }}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: gpu-hot}
spec:
  metric: GPU_TEMP
  aggregation: max
  window: 5s
  comparison: ">"
  threshold: 80
  for: 2s
  summary: hotter than 80 C
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: gpu-memory-high}
spec: {metric: gpufleet_gpu_memory_used_percent, comparison: ">", threshold: 80, for: 1s}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: workload-busy}
spec:
  metric: gpufleet_workload_gpu_util
  aggregation: avg
  window: 30s
  comparison: ">"
  threshold: 50
  minRunning: 1m
  severity: info
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: gpu-power-extreme}
spec: {metric: POWER_USAGE, comparison: ">", threshold: 1000, severity: critical}
"""

#: An alert, for people and for comparing views: its alertname and its GPU (or pod).
Key = tuple[str, str]
FIRING = {
    ("GpuXid", "2"),
    ("GpuHot", "0"),
    ("GpuMemoryHigh", "1"),
    ("WorkloadBusy", "train-0"),
}
COOLED = ("GpuHot", "0")
NEVER = "GpuPowerExtreme"
#: How long each phase may take: generous for a loaded machine; a quiet one needs a few s.
SETTLE_S = 60.0
POLL_S = 0.2


def key(labels: Mapping[str, str]) -> Key:
    return labels["alertname"], labels.get("gpu") or labels["pod"]


@dataclass
class Chain:
    rules: list[AlertRule]
    #: The exported rule file, parsed: alertname -> its entry.
    exported: dict[str, dict[str, Any]]
    exporter: FakeGpuExporter
    series: PrometheusSeries
    receiver: WebhookReceiver
    engine: RuleEngine
    annotate: Annotate


def export_rules(user_rules: Path, out: Path) -> dict[str, dict[str, Any]]:
    """``gpufleet alerts export --format rules --no-builtin --rules user_rules -o out``."""
    arguments = ["alerts", "export", "--format", "rules", "--no-builtin"]
    result = CliRunner().invoke(app, [*arguments, "--rules", str(user_rules), "-o", str(out)])
    assert result.exit_code == 0, result.output
    (group,) = yaml.safe_load(out.read_text())["groups"]
    return {entry["alert"]: entry for entry in group["rules"]}


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Chain]:
    user_rules = tmp_path / "gpu-rules.yaml"
    user_rules.write_text(USER_RULES)
    exported_file = tmp_path / "gpufleet.rules.yml"
    exported = export_rules(user_rules, exported_file)
    rules = read_alert_rules(user_rules)
    assert sorted(exported) == sorted(rule.alert_name for rule in rules)
    with ExitStack() as stack:
        receiver = stack.enter_context(WebhookReceiver())
        alertmanager = stack.enter_context(
            AlertmanagerProcess(
                tmp_path / "alertmanager",
                receiver.url + "/hook",
                group_by=("alertname",),
                group_wait_s=1.0,
                group_interval_s=1.0,
            )
        )
        exporter = FakeGpuExporter(NODE, FAKE_GPUS, HOLDERS, extra=KUBE_STATE)
        stack.callback(exporter.close)
        exporter.advance_to(XID_AT_S)
        prometheus = stack.enter_context(
            PrometheusProcess(
                tmp_path / "prometheus",
                [exporter.target],
                rule_files=[exported_file],
                alertmanagers=[alertmanager.target],
            )
        )
        series = stack.enter_context(PrometheusSeries(prometheus.url))
        yield Chain(
            rules, exported, exporter, series, receiver, RuleEngine(rules), rule_annotations(rules)
        )


@dataclass
class Views:
    """Each side's alerts by state: gpufleet's engine now, and Alertmanager's latest
    notification of each group."""

    ours: dict[AlertState, dict[Key, Alert]]
    theirs: dict[str, dict[Key, dict[str, Any]]]

    def keys(self) -> dict[str, set[Key]]:
        return {
            "gpufleet firing": set(self.ours[AlertState.FIRING]),
            "gpufleet resolved": set(self.ours[AlertState.RESOLVED]),
            "Alertmanager firing": set(self.theirs["firing"]),
            "Alertmanager resolved": set(self.theirs["resolved"]),
        }


def views(engine: RuleEngine, received: list[Received]) -> Views:
    ours: dict[AlertState, dict[Key, Alert]] = {state: {} for state in AlertState}
    for alert in engine.alerts():
        ours[alert.state][key(dict(alert.labels))] = alert
    latest = {got.body["groupKey"]: got.body for got in received}
    theirs: dict[str, dict[Key, dict[str, Any]]] = {"firing": {}, "resolved": {}}
    for body in latest.values():
        for alert in body["alerts"]:
            theirs[alert["status"]][key(alert["labels"])] = alert
    return Views(ours, theirs)


def settle(chain: Chain, firing: set[Key], resolved: set[Key]) -> Views:
    """Runs gpufleet's engine a round every :data:`POLL_S` until it and Alertmanager's
    notifications both hold ``firing`` firing and ``resolved`` resolved; fails, showing both
    sides, after :data:`SETTLE_S`."""
    wanted = {
        "gpufleet firing": firing,
        "gpufleet resolved": resolved,
        "Alertmanager firing": firing,
        "Alertmanager resolved": resolved,
    }
    deadline = time.monotonic() + SETTLE_S
    while True:
        chain.engine.evaluate(chain.series, time.time())
        now = views(chain.engine, list(chain.receiver.received))
        if now.keys() == wanted:
            return now
        if time.monotonic() > deadline:
            pytest.fail(f"not settled after {SETTLE_S} s: want {wanted}, have {now.keys()}")
        time.sleep(POLL_S)


def assert_same_alerts(chain: Chain, ours: dict[Key, Alert], theirs: dict[Key, Any]) -> None:
    """Alertmanager's alerts are gpufleet's: labels, severity as exported, annotations,
    fingerprint."""
    assert sorted(theirs) == sorted(ours)
    for name, alert in sorted(ours.items()):
        got = theirs[name]
        assert got["labels"] == dict(alert.labels), name
        assert got["labels"]["severity"] == chain.exported[name[0]]["labels"]["severity"], name
        assert got["annotations"] == chain.annotate(alert), name
        assert got["fingerprint"] == fingerprint(alert.labels), name


def test_alertmanager_gets_what_gpufleet_fires_then_the_resolution(chain: Chain) -> None:
    hot = settle(chain, FIRING, set())
    assert_same_alerts(chain, hot.ours[AlertState.FIRING], hot.theirs["firing"])
    xid = hot.theirs["firing"][("GpuXid", "2")]
    assert xid["labels"]["err_code"] == "79"
    assert xid["annotations"]["summary"] == (
        f"GPU 2 ({H100}) on {NODE}, held by pod team-b/notebook-0: GPU 2 raised XID 79"
    )
    severities = {alert["labels"]["severity"] for alert in hot.theirs["firing"].values()}
    assert severities == {"critical", "warning", "info"}

    chain.exporter.advance_to(COOLED_AT_S)
    cooled = settle(chain, FIRING - {COOLED}, {COOLED})
    assert_same_alerts(chain, cooled.ours[AlertState.FIRING], cooled.theirs["firing"])
    assert_same_alerts(chain, cooled.ours[AlertState.RESOLVED], cooled.theirs["resolved"])
    assert cooled.theirs["resolved"][COOLED]["endsAt"] != ZERO_TIME
    assert cooled.ours[AlertState.RESOLVED][COOLED].value == 88.0  # its last value compared

    received = list(chain.receiver.received)
    assert {(got.path, got.body["receiver"], got.body["version"]) for got in received} == {
        ("/hook", "hook", "4")
    }
    assert not any(NEVER in got.body["groupKey"] for got in received)
    assert chain.engine.alerts("gpu-power-extreme") == []
