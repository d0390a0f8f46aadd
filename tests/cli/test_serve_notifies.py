"""``gpufleet serve --alert-webhook URL``: the plane's alerts reach a webhook in Alertmanager's
payload format, grouped by alert name, and the deliveries are counted on /metrics."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpufleet.cli.serve_observing import observe_settings, start_notifier
from gpufleet.testing.webhook_receiver import WebhookReceiver
from tests.service.test_embedded_observing import IDLE_FAST, harness_with, run_rounds, submit


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
