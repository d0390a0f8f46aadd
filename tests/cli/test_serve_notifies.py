"""``gpufleet serve --alert-webhook URL``: the plane's alerts reach a webhook in Alertmanager's
payload format, grouped by alert name, and the deliveries are counted on /metrics; so do its
workloads' preemptions and ends."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpufleet.cli.serve_observing import observe_settings, start_notifier
from gpufleet.service.plane_book import ServeOptions
from gpufleet.testing.service import (
    as_yaml,
    gpu_nodes,
    make_harness,
    pod_doc,
    priority_class_doc,
    queue_doc,
)
from gpufleet.testing.webhook_receiver import WebhookReceiver
from tests.service.test_live_observing import (
    IDLE_FAST,
    YAML,
    harness_with,
    run_rounds,
    submit,
)


def test_a_firing_alert_reaches_the_webhook_and_is_counted(tmp_path: Path) -> None:
    harness = harness_with(tmp_path, IDLE_FAST)
    with WebhookReceiver() as receiver:
        settings = observe_settings(None, False, None, alert_webhook=receiver.url)
        assert settings.routing is not None
        notifier = start_notifier(harness.plane, settings.routing, "http://gpufleet.example")
        try:
            submit(harness, "team-a", "notebook", "idle")
            run_rounds(harness, 30 * 60)
            assert receiver.wait_for(lambda got: len(got) >= 1)
        finally:
            notifier.stop()
        payload = receiver.received[0].body
        assert payload["version"] == "4"
        assert payload["status"] == "firing"
        assert payload["groupLabels"] == {"alertname": "WorkloadIdleFast"}
        (alert,) = payload["alerts"]
        assert alert["labels"]["pod"] == "notebook"
        assert alert["annotations"]["summary"] == "pod team-a/notebook: idle for ten minutes"
        assert payload["externalURL"] == "http://gpufleet.example"
    text = harness.client("admin").get("/metrics").text
    sent = {
        sample.labels["receiver"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "gpufleet_alert_notifications"
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert sent == {"webhook": 1.0}
    harness.close()


def test_a_preemption_and_an_end_reach_the_alerts_webhook(tmp_path: Path) -> None:
    shared = queue_doc("shared", 2, namespaces=["team-a"])
    shared["spec"]["preemption"] = {"withinQueue": "LowerPriority"}
    harness = make_harness(
        tmp_path,
        nodes=gpu_nodes(1, 2),
        queues=[shared],
        priority_classes=[priority_class_doc("low", 10), priority_class_doc("high", 1000)],
        options=ServeOptions(speed=60.0, alert_rules=(IDLE_FAST,)),
        tenants=("team-a",),
    )
    made = harness.client().post("/api/v1/tokens", params={"tenant": "team-a", "queue": "shared"})
    harness.tokens["team-a"] = made.json()["token"]

    def post(doc: dict[str, object]) -> None:
        answer = harness.client("team-a").post(
            "/api/v1/workloads", content=as_yaml(doc), headers=YAML
        )
        assert answer.status_code == 201, answer.text

    with WebhookReceiver() as receiver:
        settings = observe_settings(None, False, None, alert_webhook=receiver.url)
        assert settings.routing is not None
        notifier = start_notifier(harness.plane, settings.routing, "http://gpufleet.example")
        try:
            post(pod_doc("victim", gpus=2, queue="shared", priority_class="low", runtime="10h"))
            harness.advance(1)
            harness.advance(180)  # past the minimum run time before preemption
            post(pod_doc("urgent", gpus=2, queue="shared", priority_class="high", runtime="10m"))
            harness.advance(60)
            harness.advance(15 * 60)  # the urgent one ends
            assert receiver.wait_for(lambda got: len(got) >= 2)
        finally:
            notifier.stop()
        alerts = [a for r in receiver.received for a in r.body["alerts"]]
    told = [(a["labels"]["alertname"], a["labels"]["workload"]) for a in alerts]
    assert told == [("WorkloadPreempted", "victim"), ("WorkloadSucceeded", "urgent")]
    assert {a["labels"]["tenant"] for a in alerts} == {"team-a"}
    assert all(r.body["version"] == "4" for r in receiver.received)
    assert alerts[0]["annotations"]["summary"] == "workload team-a/victim was preempted"
    harness.close()
