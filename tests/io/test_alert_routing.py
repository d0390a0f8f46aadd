"""Alertmanager-style routing files read into the dispatcher's routes, and bad ones refused
with the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.fleet.alert_routing import (
    parse_prometheus_duration,
    read_alert_routing,
    webhook_routing,
)
from gpufleet.model.alerts import label_set

GOOD = """
route:
  receiver: ops
  group_by: [alertname, Hostname]
  group_wait: 10s
  repeat_interval: 1d
  routes:
    - receiver: pager
      matchers: ['severity="critical"']
      continue: true
      group_wait: 0s
receivers:
  - name: ops
    webhook_configs:
      - url: http://chat:8080/hook
  - name: pager
    webhook_configs:
      - url: https://pager.example/a
        send_resolved: false
      - url: https://pager.example/b
        max_alerts: 5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "alerts.yml"
    path.write_text(text)
    return path


def test_a_file_in_alertmanagers_terms(tmp_path: Path) -> None:
    routing = read_alert_routing(write(tmp_path, GOOD))
    first, second, root = routing.routes
    assert (first.receiver, first.target, first.send_resolved, first.continue_) == (
        "pager", "https://pager.example/a", False, True,
    )  # fmt: skip
    assert (second.target, second.max_alerts, second.continue_) == (
        "https://pager.example/b",
        5,
        True,
    )
    assert first.matchers == label_set({"severity": "critical"})
    assert first.key == '{}/{severity="critical"}'
    assert (first.group_wait_s, first.group_interval_s, first.repeat_interval_s) == (0, 300, 86_400)
    assert first.group_by == ("alertname", "Hostname")
    assert (root.receiver, root.fallback, root.key, root.group_wait_s) == ("ops", True, "{}", 10)


def test_one_webhook_has_alertmanagers_defaults() -> None:
    (route,) = webhook_routing("http://127.0.0.1:9/hook").routes
    assert route.group_by == ("alertname",)
    assert (route.group_wait_s, route.group_interval_s, route.repeat_interval_s) == (
        30, 300, 14_400,
    )  # fmt: skip
    assert route.target == "http://127.0.0.1:9/hook"


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        pytest.param(
            "route: {receiver: x}\nreceivers: [{name: ops}]",
            "route.receiver",
            "no receiver named 'x'",
            id="unknown-receiver",
        ),
        pytest.param(
            "route: {receiver: ops}\nreceivers: [{name: ops, webhook_configs: [{url: ftp://x}]}]",
            "receivers[0].webhook_configs[0].url",
            "http",
            id="bad-url",
        ),
        pytest.param(
            "route: {receiver: ops, group_wait: soon}\nreceivers: [{name: ops}]",
            "route.group_wait",
            "duration",
            id="bad-duration",
        ),
        pytest.param(
            "route: {receiver: ops, group_interval: 0s}\nreceivers: [{name: ops}]",
            "route",
            "group_interval",
            id="zero-interval",
        ),
        pytest.param(
            "route: {receiver: ops, routes: [{matchers: ['a=~b']}]}\nreceivers: [{name: ops}]",
            "route.routes[0].matchers[0]",
            "equality",
            id="regex",
        ),
        pytest.param(
            "route: {receiver: ops, routes: [{receiver: ops}]}\nreceivers: [{name: ops}]",
            "route.routes[0]",
            "needs matchers",
            id="no-matchers",
        ),
        pytest.param(
            "route: {receiver: ops}\nreceivers: [{name: ops, email_configs: [{to: a}]}]",
            "receivers[0].email_configs",
            "webhook_configs only",
            id="email",
        ),
        pytest.param(
            "route: {receiver: ops}\ninhibit_rules: []\nreceivers: [{name: ops}]",
            "inhibit_rules",
            "not supported",
            id="inhibit",
        ),
        pytest.param(
            "route: {receiver: ops}\nreceivers: [{name: ops}, {name: ops}]",
            "receivers[1].name",
            "second receiver",
            id="twice",
        ),
        pytest.param(
            "route: {receiver: ops, group_by: [..., a]}\nreceivers: [{name: ops}]",
            "route.group_by",
            "stands alone",
            id="group-by",
        ),
        pytest.param(
            "route: {receiver: ops, grup_by: [a]}\nreceivers: [{name: ops}]",
            "route.grup_by",
            "",
            id="typo",
        ),
        pytest.param("route: {receiver: ops}", "receivers", "", id="no-receivers"),
    ],
)
def test_bad_files_name_the_file_and_field(
    tmp_path: Path, text: str, field: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        read_alert_routing(path)
    assert caught.value.source == str(path)
    assert caught.value.field == field
    assert message in caught.value.reason


def test_a_bad_webhook_url_is_refused() -> None:
    with pytest.raises(InputError, match="--alert-webhook"):
        webhook_routing("not a url")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("4h", 14_400),
        ("1d", 86_400),
        ("1h30m", 5_400),
        ("500ms", 0.5),
        (90, 90),
    ],
)
def test_prometheus_durations(text: str | int, seconds: float) -> None:
    assert parse_prometheus_duration(text) == seconds
