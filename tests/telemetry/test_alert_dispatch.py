"""Alertmanager's grouping, timing and payload, case by case (alert_dispatch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from gpufleet.model.alerts import Alert, AlertMetric, AlertRule, Comparison, label_set
from gpufleet.telemetry.alert_dispatch import (
    ZERO_TIME,
    Dispatcher,
    Notification,
    Route,
    fingerprint,
    format_labels,
    postable_alerts,
    rfc3339,
    rule_annotations,
)
from gpufleet.testing.alert_builders import firing_alert, resolved

T0 = 1_700_000_000.0
HOT0 = firing_alert("GpuHot", T0, gpu="0", Hostname="n1")
HOT1 = firing_alert("GpuHot", T0, gpu="1", Hostname="n1")
XID = firing_alert("GpuXid", T0, severity="critical", gpu="0", Hostname="n2")
ROUTE = Route("ops", group_wait_s=30, group_interval_s=300, repeat_interval_s=3600)


def run(
    dispatcher: Dispatcher, rounds: Mapping[float, list[Alert]], until: float, start: float = 0.0
) -> list[Notification]:
    """Rounds every 15 s from ``start`` to ``until`` (offsets from T0); each round's alerts
    are those of the latest entry of ``rounds`` at or before it (offsets are multiples of 15)."""
    assert all(offset % 15 == 0 for offset in rounds)
    sent: list[Notification] = []
    current: list[Alert] = []
    offset, step = start, 15.0
    while offset <= until:
        if offset in rounds:
            current = rounds[offset]
        sent += dispatcher.round(current, T0 + offset)
        offset += step
    return sent


def statuses(sent: list[Notification]) -> list[tuple[float, str, list[str]]]:
    return [
        (n.at - T0, n.payload["status"], [a["status"] for a in n.payload["alerts"]]) for n in sent
    ]


def test_the_first_notification_waits_group_wait_and_batches_the_group() -> None:
    late = firing_alert("GpuHot", T0 + 15, gpu="1", Hostname="n1")
    sent = run(Dispatcher([ROUTE]), {0: [HOT0], 15: [HOT0, late]}, until=60)
    assert statuses(sent) == [(30.0, "firing", ["firing", "firing"])]
    payload = sent[0].payload
    assert payload["groupKey"] == '{}:{alertname="GpuHot"}'
    assert payload["groupLabels"] == {"alertname": "GpuHot"}
    assert payload["commonLabels"] == {
        "alertname": "GpuHot",
        "Hostname": "n1",
        "severity": "warning",
    }
    assert [a["labels"]["gpu"] for a in payload["alerts"]] == ["0", "1"]


def test_changes_wait_for_group_interval_and_unchanged_groups_repeat() -> None:
    sent = run(Dispatcher([ROUTE]), {0: [HOT0], 105: [HOT0, HOT1]}, until=4000)
    # 30: first; 330: HOT1 is new; then nothing new until the repeat an hour after 330.
    assert [at for at, _, _ in statuses(sent)] == [30.0, 330.0, 3930.0]


def test_a_resolution_is_sent_once_then_the_group_is_gone() -> None:
    dispatcher = Dispatcher([ROUTE])
    sent = run(dispatcher, {0: [HOT0, HOT1], 60: [HOT0, resolved(HOT1, T0 + 60)]}, until=700)
    assert statuses(sent) == [
        (30.0, "firing", ["firing", "firing"]),
        (330.0, "firing", ["firing", "resolved"]),
    ]
    resolution = sent[1].payload["alerts"][1]
    assert resolution["endsAt"] == rfc3339(T0 + 60)
    assert sent[0].payload["alerts"][0]["endsAt"] == ZERO_TIME
    gone = [resolved(HOT0, T0 + 700), resolved(HOT1, T0 + 60)]
    sent = run(dispatcher, {705: gone}, until=2000, start=705)
    assert statuses(sent) == [(930.0, "resolved", ["resolved"])]
    assert dispatcher.groups() == 0


def test_without_send_resolved_only_firing_alerts_are_sent_and_nothing_when_all_resolve() -> None:
    route = Route("ops", group_wait_s=30, group_interval_s=300, send_resolved=False)
    rounds: dict[float, list[Alert]] = {
        0: [HOT0, HOT1],
        60: [HOT0, resolved(HOT1, T0 + 60)],
        405: [resolved(HOT0, T0 + 405)],
    }
    sent = run(Dispatcher([route]), rounds, until=1000)
    assert statuses(sent) == [(30.0, "firing", ["firing", "firing"])]


def test_an_alert_that_fires_and_resolves_before_the_first_flush_is_not_sent() -> None:
    sent = run(Dispatcher([ROUTE]), {0: [HOT0], 15: [resolved(HOT0, T0 + 15)]}, until=600)
    assert sent == []


def test_an_alert_gone_from_the_engine_resolves() -> None:
    sent = run(Dispatcher([ROUTE]), {0: [HOT0], 60: []}, until=400)
    assert statuses(sent) == [(30.0, "firing", ["firing"]), (330.0, "resolved", ["resolved"])]


def test_an_alert_that_fired_long_ago_is_sent_at_once() -> None:
    old = firing_alert("GpuHot", T0 - 3600, gpu="0")
    assert [n.at for n in Dispatcher([ROUTE]).round([old], T0)] == [T0]


@pytest.mark.parametrize(
    ("group_by", "keys"),
    [
        pytest.param(
            ("alertname",), ['{}:{alertname="GpuHot"}', '{}:{alertname="GpuXid"}'], id="alertname"
        ),
        pytest.param(("Hostname",), ['{}:{Hostname="n1"}', '{}:{Hostname="n2"}'], id="host"),
        pytest.param((), ["{}:{}"], id="one-group"),
        pytest.param(
            None,
            [f"{{}}:{format_labels(a.labels)}" for a in (HOT0, HOT1, XID)],
            id="every-label",
        ),
    ],
)
def test_group_by(group_by: tuple[str, ...] | None, keys: list[str]) -> None:
    route = Route("ops", group_by=group_by, group_wait_s=0)
    sent = Dispatcher([route]).round([HOT0, HOT1, XID], T0)
    assert sorted(n.group_key for n in sent) == sorted(keys)


def test_routes_match_in_order_with_continue_and_a_fallback() -> None:
    critical = Route(
        "pager",
        group_wait_s=0,
        matchers=label_set({"severity": "critical"}),
        continue_=True,
        key='{}/{severity="critical"}',
    )
    chat = Route("chat", group_wait_s=0, matchers=label_set({"Hostname": "n2"}))
    root = Route("default", group_wait_s=0, fallback=True)
    sent = Dispatcher([critical, chat, root]).round([HOT0, XID], T0)
    assert sorted((n.route.receiver, n.group_key) for n in sent) == [
        ("chat", '{}:{alertname="GpuXid"}'),
        ("default", '{}:{alertname="GpuHot"}'),
        ("pager", '{}/{severity="critical"}:{alertname="GpuXid"}'),
    ]


def test_max_alerts_truncates() -> None:
    route = Route("ops", group_wait_s=0, max_alerts=1)
    (sent,) = Dispatcher([route]).round([HOT0, HOT1], T0)
    assert len(sent.payload["alerts"]) == 1
    assert sent.payload["truncatedAlerts"] == 1


def test_the_payload_has_alertmanagers_fields() -> None:
    rule = AlertRule("gpu-hot", AlertMetric.GPU_TEMP, Comparison.GT, 85.0, summary="hot")
    alert = firing_alert("GpuHot", T0, value=91.0, gpu="0", Hostname="n1", modelName="H100")
    dispatcher = Dispatcher(
        [Route("ops", group_wait_s=0)],
        annotate=rule_annotations([rule]),
        external_url="http://gpufleet:8080/",
    )
    (sent,) = dispatcher.round([replace(alert, rule="gpu-hot")], T0)
    payload = sent.payload
    assert set(payload) == {
        "version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
        "commonLabels", "commonAnnotations", "externalURL", "alerts",
    }  # fmt: skip
    assert payload["version"] == "4"
    assert payload["externalURL"] == "http://gpufleet:8080"
    (one,) = payload["alerts"]
    assert set(one) == {
        "status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"
    }  # fmt: skip
    assert one["startsAt"] == "2023-11-14T22:13:20Z"
    assert one["generatorURL"] == "http://gpufleet:8080/api/v1/alerts?rule=gpu-hot"
    assert one["annotations"] == {
        "summary": "GPU 0 (H100) on n1: hot",
        "description": "gpufleet rule gpu-hot: DCGM_FI_DEV_GPU_TEMP is 91.0 C (> 85 C)",
    }
    assert payload["commonAnnotations"] == one["annotations"]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        # Prometheus' model.LabelSet{}.Fingerprint() and {"a":"b"}: FNV-1a 64 as in its tests.
        pytest.param({}, "cbf29ce484222325", id="empty"),
        pytest.param({"alertname": "x"}, fingerprint(label_set({"alertname": "x"})), id="stable"),
    ],
)
def test_fingerprint(labels: dict[str, str], expected: str) -> None:
    assert fingerprint(labels) == expected
    assert len(fingerprint(labels)) == 16


def test_label_sets_are_written_as_prometheus_does() -> None:
    assert format_labels(label_set({"b": 'say "hi"', "a": "1"})) == '{a="1", b="say \\"hi\\""}'


def test_rounds_go_forward() -> None:
    dispatcher = Dispatcher([ROUTE])
    dispatcher.round([], T0)
    with pytest.raises(ValueError, match="forward"):
        dispatcher.round([], T0 - 1)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"receiver": ""}, "receiver", id="no-receiver"),
        pytest.param({"group_interval_s": 0}, "group_interval", id="interval"),
        pytest.param({"repeat_interval_s": -1}, "repeat_interval", id="repeat"),
        pytest.param({"group_wait_s": -1}, "group_wait", id="wait"),
    ],
)
def test_bad_routes(changes: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"receiver": "ops", **changes}
    with pytest.raises(ValueError, match=message):
        Route(**fields)  # type: ignore[arg-type]


def test_postable_alerts_are_what_prometheus_posts() -> None:
    gone = resolved(HOT1, T0 + 60)
    posted = postable_alerts([HOT0, gone], T0 + 90, annotate=rule_annotations(()))
    assert [p["endsAt"] for p in posted] == [rfc3339(T0 + 330), rfc3339(T0 + 60)]
    assert all(p["startsAt"] == rfc3339(T0) for p in posted)


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ([HOT0, HOT1], []),
        ([HOT1], [["resolved", "firing"]]),
        ([HOT0, HOT1, XID], [["firing"]]),
    ],
    ids=["still-firing-nothing-sent", "one-resolved-is-sent", "a-new-one-is-sent"],
)
def test_a_restored_snapshot_goes_on_as_if_never_stopped(
    after: list[Alert], expected: list[list[str]]
) -> None:
    """A restart (issue 29 item 6): the snapshot goes through JSON, as the store keeps it."""
    import json

    first = Dispatcher([ROUTE])
    sent = run(first, {0: [HOT0, HOT1]}, until=60)
    assert [n.payload["status"] for n in sent] == ["firing"]
    second = Dispatcher([ROUTE])
    second.restore(json.loads(json.dumps(first.snapshot())))
    assert second.snapshot() == first.snapshot()
    gone = {a.labels for a in [HOT0, HOT1]} - {a.labels for a in after}
    now = [*after, *(resolved(a, T0 + 75) for a in [HOT0, HOT1] if a.labels in gone)]
    later = run(second, {75: now}, until=75 + 600, start=75)
    assert [[a["status"] for a in n.payload["alerts"]] for n in later] == expected


def test_payload_times_are_wall_times() -> None:
    dispatcher = Dispatcher([ROUTE], wall=lambda t: t + T0)
    early = firing_alert("GpuHot", 15.0, gpu="0", Hostname="n1")
    (sent,) = run(dispatcher, {0: [early]}, until=60, start=0)
    assert sent.payload["alerts"][0]["startsAt"] == rfc3339(T0 + 15.0)
    posted = postable_alerts([early], 60.0, annotate=rule_annotations(()), wall=lambda t: t + T0)
    assert posted[0]["startsAt"] == rfc3339(T0 + 15.0)
    assert posted[0]["endsAt"] == rfc3339(T0 + 60.0 + 240.0)
