"""The rule engine gives the same verdicts on the series store as on the plain reference store
(every sample kept as written): the built-in device rules over two hours of a small fleet whose
GPUs run hot, full, idle, faulty or normal, values well away from the thresholds (the store
codes values with a bounded error, so a value within it of a threshold could go either way)."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.telemetry.series import SeriesStore
from gpufleet.testing.fake_series import FakeSeries

# (util %, memory used %, temperature C, xid) of each GPU; noise of +-2 added per sample.
PROFILES = {
    "normal": (70.0, 50.0, 60.0, 0),
    "idle": (5.0, 30.0, 40.0, 0),
    "hot": (90.0, 60.0, 92.0, 0),
    "full": (80.0, 97.0, 70.0, 0),
    "faulty": (60.0, 40.0, 65.0, 79),
}
STEP = 15.0


def test_builtin_device_rules_agree_on_the_store_and_the_reference() -> None:
    rules = [rule for rule in builtin_alert_rules() if not rule.metric.per_workload]
    assert len(rules) >= 4
    store, reference = SeriesStore(), FakeSeries()
    on_store, on_reference = RuleEngine(rules), RuleEngine(rules)
    rng = np.random.default_rng(14)
    # every GPU held by a pod: the idle-GPU rule looks only at allocated GPUs
    gpus = [
        (name, {"Hostname": "node-0", "gpu": str(i), "namespace": "ml", "pod": f"p{i}"})
        for i, name in enumerate(PROFILES)
    ]
    metrics = (
        "DCGM_FI_DEV_GPU_UTIL",
        "gpufleet_gpu_memory_used_percent",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_XID_ERRORS",
    )
    ids = np.array([store.add(metric, labels) for metric in metrics for _, labels in gpus])
    verdicts: list[tuple[object, ...]] = []
    expected: list[tuple[object, ...]] = []
    for k in range(int(2 * 3600 / STEP)):
        now = 1_700_000_000.0 + k * STEP
        values = []
        for m, metric in enumerate(metrics):
            for name, labels in gpus:
                base = PROFILES[name][m]
                value = base if metric.endswith("XID_ERRORS") else base + rng.uniform(-2, 2)
                values.append(value)
                reference.add(metric, labels, now, value)
        store.append(now, ids, values)
        if k % 4 == 0:  # a round a minute
            for engine, source, out in (
                (on_store, store, verdicts),
                (on_reference, reference, expected),
            ):
                out.extend(
                    (t.rule, t.labels, t.before, t.after, t.at)
                    for t in engine.evaluate(source, now)
                )
    assert verdicts == expected
    alerted = {dict(alert.labels)["gpu"] for alert in on_reference.active()}
    assert alerted == {"1", "2", "3", "4"}  # every GPU but the normal one
    for alert in on_store.active():
        match = [a for a in on_reference.active() if a.labels == alert.labels]
        assert match
        assert alert.value == pytest.approx(match[0].value, abs=0.5)
