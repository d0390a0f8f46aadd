"""examples/alerts: the rule file and the routing file the README shows read as they say, and
the rules export to Prometheus beside the built-in ones."""

from __future__ import annotations

from pathlib import Path

from gpufleet.io.fleet.alert_routing import read_alert_routing
from gpufleet.io.fleet.alert_rules import builtin_alert_rules, read_alert_rules
from gpufleet.io.fleet.prometheus_rules import rule_file
from gpufleet.model.alerts import AlertMetric, Severity

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "alerts"


def test_the_example_rules_read() -> None:
    rules = {rule.name: rule for rule in read_alert_rules(EXAMPLES / "rules.yaml")}
    assert set(rules) == {"gpu-power-high", "dev-notebook-idle"}
    assert rules["gpu-power-high"].metric is AlertMetric.POWER_USAGE
    assert rules["dev-notebook-idle"].scope.namespace == "dev"
    assert rules["dev-notebook-idle"].severity is Severity.INFO
    names = {rule.name for rule in builtin_alert_rules()}
    assert not names & set(rules), "the examples must not clash with the built-in rules"
    exported = rule_file([*builtin_alert_rules(), *rules.values()])
    alerts = [r["alert"] for group in exported["groups"] for r in group["rules"]]
    assert {"GpuPowerHigh", "DevNotebookIdle"} <= set(alerts)


def test_the_example_routing_reads() -> None:
    routing = read_alert_routing(EXAMPLES / "routing.yaml")
    by_receiver = {route.receiver: route for route in routing.routes}
    assert set(by_receiver) == {"platform-chat", "on-call"}
    pager = by_receiver["on-call"]
    assert pager.matchers == (("severity", "critical"),)
    assert pager.group_by == ("alertname", "Hostname")
    chat = by_receiver["platform-chat"]
    assert (chat.group_wait_s, chat.group_interval_s, chat.repeat_interval_s) == (30, 300, 14400)
