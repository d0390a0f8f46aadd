"""gpufleet's own alert engine and a real Prometheus running ``gpufleet alerts export``'s rules
agree, alert by alert, over what ``gpufleet serve`` serves (issue 29's alerts guard).

``gpufleet serve``'s simulated plane (the app in a thread, on real sockets) runs at speed 1 with
an observatory round every second: its cluster's clock is the wall's, so both engines judge the
same instants. Its GPUs are fake (:class:`FakeGpus`, over the simulated cluster's own
telemetry: the devices, the pods holding them and the labels are the cluster's; the values are
the test's), and the pods are real workloads submitted through the API. Debian's Prometheus
scrapes serve's ``/metrics`` every second (with a metrics token, as serve asks) and evaluates
the rule file ``gpufleet alerts export --format rules --rules FILE`` writes (the built-in rules
and :data:`USER_RULES`) every second. Not synthetic series fed to both: Prometheus reads the
exposition, gpufleet its own series store.

The scenario: node ``h-0`` holds a busy hot training pod and an idle notebook (started, the
plane's book says, over an hour before serve: :data:`NOTEBOOK_RAN_S`), node ``h-1``
(tainted: no pod goes there) has two free GPUs; then GPU 0 of ``h-1`` raises XID 79 with its
memory nearly full, and GPU 1 heats to 90 C with little memory used. Later the training GPU and
``h-1``'s GPU 1 cool down and the notebook's GPU draws more power. At each stage both sides must
hold exactly :data:`STAGE_1` (then :data:`STAGE_2`): the same alertnames, label sets (every one;
Prometheus' ``instance`` and ``job``, its scrape target's, stripped: gpufleet's store is not
scraped), states, and ``activeAt`` within one evaluation plus one scrape interval, and a step
of lateness each on a loaded machine (gpufleet's ``active_at`` is on the cluster's clock; its
wall time is what the plane sends out, ``PlaneWallTime``). gpufleet lists a resolved alert
for 15 minutes, Prometheus' API does not: those are checked to be gpufleet's ``resolved`` and
absent from Prometheus'.

Every built-in rule is covered (``workload-gpu-idle`` through serve's ``kube_pod_start_time``,
kube-state-metrics' series, which its exported rule joins on), and the user rules
use each comparison (== != < <= > >=) and each scope a metric allows (namespace, labels: a node
and a GPU by ``Hostname`` and ``gpu``, a pod by ``pod``; allocated; none).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.api.app import create_app
from gpufleet.cli.main import app as cli
from gpufleet.io.fleet.alert_rules import builtin_alert_rules, read_alert_rules
from gpufleet.model.alerts import AlertRule
from gpufleet.model.node import Taint, TaintEffect
from gpufleet.model.telemetry import DeviceSample
from gpufleet.service.embedded_plane import EmbeddedControlPlane
from gpufleet.service.plane_book import QUEUE, ServeOptions, create_token
from gpufleet.service.records import pods_of
from gpufleet.service.store import Store
from gpufleet.telemetry.source import NodeTelemetry, TelemetrySource
from gpufleet.testing.builders import make_node
from gpufleet.testing.prometheus import PrometheusProcess, prometheus_binary
from gpufleet.testing.service import GPU_TAINT, as_yaml, pod_doc, queue_doc
from gpufleet.testing.threaded_server import threaded_server
from gpufleet.testing.waiting import wait_until

pytestmark = pytest.mark.skipif(
    prometheus_binary() is None,
    reason="no prometheus binary (Debian's `prometheus` package; `make test` installs it "
    "where it can)",
)

#: Both engines' step: Prometheus' scrape and evaluation intervals, the plane's rounds.
STEP_S = 1.0
#: How far apart the two ``activeAt`` of one alert may be: the condition is seen by
#: Prometheus at its next scrape and judged at its next evaluation after that, by gpufleet at
#: its next round. A rule exported as a subquery (``(...)[10s:]``: a windowed expression)
#: adds one step: the subquery's points are aligned to its resolution (the evaluation
#: interval), so a sample scraped after the newest point waits for the next.
#: On a loaded machine (CI: 2 cores running the whole suite) a scrape, an evaluation or a
#: round may each come a step late: one more step for each engine (seen: 2.3 s apart).
LATE_S = 2 * STEP_S
ACTIVE_AT_SLACK_S = 2 * STEP_S + LATE_S
SUBQUERY_SLACK_S = STEP_S
#: How long each stage may take to settle (a quiet machine needs about 12 s for the first).
SETTLE_S = 40.0
POLL_S = 0.25
#: Labels Prometheus adds to every scraped series (its scrape target's), not gpufleet's.
SCRAPE_LABELS = ("instance", "job")

PODS_NODE, FREE_NODE = "h-0", "h-1"
H100_MIB = 81_559
TRAIN, NOTEBOOK = ("team-a", "train"), ("team-b", "nb")

#: Rules that fire nowhere here, and why.
NOT_FIRED = {"power-extreme": "a rule no GPU crosses: neither side may fire it"}
#: How long the notebook has run when it is placed: its start is moved back this much in
#: the plane's book, which both sides read (gpufleet's engine for ``minRunning``, serve's
#: ``kube_pod_start_time`` for Prometheus), so that ``workload-gpu-idle`` (``minRunning: 1h``)
#: judges it in a test that runs a minute on the wall's clock. Its ``for: 1h`` keeps it
#: pending, as the other built-in rules' long ``for`` keep theirs.
NOTEBOOK_RAN_S = 3_700.0

USER_RULES = """\
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: xid-is-79}
spec:
  metric: XID_ERRORS
  comparison: "=="
  threshold: 79
  severity: critical
  scope: {labels: {Hostname: h-1}}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: team-a-temp-not-40}
spec:
  metric: GPU_TEMP
  comparison: "!="
  threshold: 40
  for: 2s
  scope: {namespace: team-a}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: held-power-low}
spec:
  metric: POWER_USAGE
  comparison: "<"
  threshold: 100
  for: 10m
  severity: info
  scope: {allocated: true}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: h1-gpu1-fb-small}
spec:
  metric: FB_USED
  comparison: "<="
  threshold: 1000
  for: 3s
  scope: {labels: {Hostname: h-1, gpu: "1"}}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: held-util-median-low}
spec:
  metric: GPU_UTIL
  aggregation: quantile
  quantile: 0.5
  window: 10s
  comparison: "<="
  threshold: 5
  for: 3s
  severity: info
  scope: {allocated: true}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: temp-max-high}
spec:
  metric: GPU_TEMP
  aggregation: max
  window: 10s
  comparison: ">"
  threshold: 89
  for: 3s
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: memory-min-high}
spec:
  metric: gpufleet_gpu_memory_used_percent
  aggregation: min
  window: 10s
  comparison: ">"
  threshold: 50
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: team-a-workload-busy}
spec:
  metric: gpufleet_workload_gpu_util
  aggregation: avg
  window: 10s
  comparison: ">="
  threshold: 90
  for: 3s
  scope: {namespace: team-a}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: notebook-idle}
spec:
  metric: gpufleet_workload_gpu_util
  comparison: "<"
  threshold: 10
  for: 10m
  severity: info
  scope: {labels: {pod: nb}}
---
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: power-extreme}
spec: {metric: POWER_USAGE, comparison: ">", threshold: 1000, severity: critical}
"""


@dataclass(frozen=True)
class Values:
    """What a fake GPU reads."""

    util: float = 0.0
    fb_used: int = 2_000
    temp: float = 40.0
    power: float = 70.0
    xid: int = 0


#: A GPU nobody holds and nothing is wrong with: idle, cool, nearly empty.
CALM = Values()


@dataclass
class FakeGpus(TelemetrySource):
    """The simulated cluster's telemetry with the values the test sets: by the pod holding a
    GPU, else by (node, GPU index), else :data:`CALM`. Devices, holders and allocation are
    the cluster's."""

    inner: TelemetrySource
    by_holder: dict[tuple[str, str], Values] = field(default_factory=dict)
    by_gpu: dict[tuple[str, int], Values] = field(default_factory=dict)

    def read(self) -> Sequence[NodeTelemetry]:
        return [replace(node, samples=[self._faked(node, s) for s in node.samples])
                for node in self.inner.read()]  # fmt: skip

    def _faked(self, node: NodeTelemetry, sample: DeviceSample) -> DeviceSample:
        holders = [(u.namespace, u.pod) for u in node.users if u.uuid == sample.uuid]
        held = [self.by_holder[h] for h in holders if h in self.by_holder]
        values = held[0] if held else self.by_gpu.get((node.hostname, sample.gpu), CALM)
        return replace(
            sample, gpu_util=values.util, fb_used_mib=values.fb_used,
            fb_free_mib=H100_MIB - values.fb_used, temperature_c=values.temp,
            power_w=values.power, xid=values.xid,
        )  # fmt: skip


#: An alert as both sides are compared: its alertname and what it is about (node/GPU, or a
#: pod), and its state.
Key = tuple[str, str]

#: The pods' GPUs from the start (pods are placed when the plane starts).
HOLDERS = {
    TRAIN: Values(util=95, fb_used=60_000, temp=88, power=600),
    NOTEBOOK: Values(util=5, fb_used=2_000, temp=40, power=60),
}
#: How long h-1's GPUs stay calm after the plane starts: more than the rules' 10 s windows.
CALM_S = 12.0
#: Then h-1's GPUs go wrong.
STAGE_1_GPUS = {
    (FREE_NODE, 0): Values(fb_used=78_000, xid=79),
    (FREE_NODE, 1): Values(fb_used=500, temp=90),
}
STAGE_1: dict[Key, str] = {
    ("GpuXidError", "h-1/0"): "firing",
    ("GpuMemoryHigh", "h-1/0"): "pending",
    ("GpuTemperatureHigh", "train"): "pending",
    ("GpuTemperatureHigh", "h-1/1"): "pending",
    ("GpuUtilisationLow", "nb"): "pending",
    ("XidIs79", "h-1/0"): "firing",
    ("TeamATempNot40", "train"): "firing",
    ("HeldPowerLow", "nb"): "pending",
    ("H1Gpu1FbSmall", "h-1/1"): "firing",
    ("HeldUtilMedianLow", "nb"): "firing",
    ("TempMaxHigh", "h-1/1"): "firing",
    ("MemoryMinHigh", "h-1/0"): "firing",
    ("MemoryMinHigh", "train"): "firing",  # 60000 of 81559 MiB
    ("TeamAWorkloadBusy", "train"): "firing",
    ("NotebookIdle", "nb"): "pending",
    ("WorkloadGpuIdle", "nb"): "pending",
}
#: Then the training GPU and h-1's GPU 1 cool, the notebook's GPU draws more.
STAGE_2_HOLDERS = {
    TRAIN: replace(HOLDERS[TRAIN], temp=60),
    NOTEBOOK: replace(HOLDERS[NOTEBOOK], power=200),
}
STAGE_2_GPUS = {**STAGE_1_GPUS, (FREE_NODE, 1): replace(STAGE_1_GPUS[(FREE_NODE, 1)], temp=40)}
#: Pending alerts that stopped holding are gone on both sides; a firing one is gpufleet's
#: ``resolved`` and gone from Prometheus' list.
STAGE_2_GONE = {
    ("GpuTemperatureHigh", "train"),
    ("GpuTemperatureHigh", "h-1/1"),
    ("HeldPowerLow", "nb"),
}
STAGE_2_RESOLVED = {("TempMaxHigh", "h-1/1")}
STAGE_2 = {
    key: state
    for key, state in STAGE_1.items()
    if key not in STAGE_2_GONE and key not in STAGE_2_RESOLVED
}


def subject(labels: Mapping[str, str]) -> str:
    """What an alert is about: the pod holding the GPU, or the node/GPU of a free one."""
    return labels.get("pod") or f"{labels['Hostname']}/{labels['gpu']}"


@dataclass(frozen=True)
class Seen:
    """One alert as a side lists it."""

    labels: dict[str, str]
    state: str
    #: Unix seconds.
    active_at: float


@dataclass
class Serve:
    plane: EmbeddedControlPlane
    fake: FakeGpus
    url: str
    admin: str
    prometheus: PrometheusProcess
    rules: list[AlertRule]
    #: The exported rules' ``expr`` by alertname.
    exprs: dict[str, str]

    def gpufleet(self) -> dict[Key, Seen]:
        """``GET /api/v1/alerts`` (an admin's), active_at in wall time."""
        answer = httpx.get(
            f"{self.url}/api/v1/alerts",
            headers={"Authorization": f"Bearer {self.admin}"},
            timeout=5.0,
        )
        assert answer.status_code == 200, answer.text
        wall = self.plane.observing.observatory.wall_time
        seen = {}
        for alert in answer.json()["alerts"]:
            labels = alert["labels"]
            key = (labels["alertname"], subject(labels))
            assert key not in seen, f"gpufleet lists {key} twice"
            seen[key] = Seen(labels, alert["state"], wall(alert["active_at"]))
        return seen

    def theirs(self) -> dict[Key, Seen]:
        """Prometheus' ``/api/v1/alerts``, its scrape target's labels stripped."""
        answer = httpx.get(f"{self.prometheus.url}/api/v1/alerts", timeout=5.0)
        body = answer.json()
        assert body["status"] == "success", body
        seen = {}
        for alert in body["data"]["alerts"]:
            labels = {k: v for k, v in alert["labels"].items() if k not in SCRAPE_LABELS}
            key = (labels["alertname"], subject(labels))
            assert key not in seen, f"Prometheus lists {key} twice"
            seen[key] = Seen(labels, alert["state"], unix_time(alert["activeAt"]))
        return seen


def unix_time(rfc3339: str) -> float:
    """Prometheus' ``activeAt`` (nanoseconds, ``Z``) in Unix seconds."""
    head, _, fraction = rfc3339.removesuffix("Z").partition(".")
    whole = datetime.fromisoformat(head + "+00:00").timestamp()
    return whole + (float(f"0.{fraction}") if fraction else 0.0)


def export_rules(user_rules: Path, out: Path) -> dict[str, str]:
    """``gpufleet alerts export --format rules --rules user_rules -o out`` (built-ins
    included); the alertnames it wrote, in order, and their expressions."""
    arguments = ["alerts", "export", "--format", "rules", "--rules", str(user_rules)]
    result = CliRunner().invoke(cli, [*arguments, "-o", str(out)])
    assert result.exit_code == 0, result.output
    (group,) = yaml.safe_load(out.read_text())["groups"]
    return {entry["alert"]: entry["expr"] for entry in group["rules"]}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    user_rules = tmp_path / "rules.yaml"
    user_rules.write_text(USER_RULES)
    rules = [*builtin_alert_rules(), *read_alert_rules(user_rules)]
    exported = tmp_path / "gpufleet.rules.yml"
    exprs = export_rules(user_rules, exported)
    assert list(exprs) == [rule.alert_name for rule in rules]
    store = Store(tmp_path / "gpufleet.db")
    for tenant in ("team-a", "team-b"):
        store.put_object(QUEUE, tenant, queue_doc(tenant, 4, namespaces=[tenant]))
    tokens = {who: create_token(store, who, "tenant") for who in ("team-a", "team-b")}
    admin = create_token(store, "admin", "admin")
    credentials = tmp_path / "metrics.token"
    credentials.write_text(create_token(store, "prometheus", "metrics"))
    nodes = [
        make_node(PODS_NODE, gpus=2, model="H100", taints=(GPU_TAINT,)),
        # No pod tolerates this: h-1's GPUs stay free.
        make_node(FREE_NODE, gpus=2, model="H100",
                  taints=(GPU_TAINT, Taint("dedicated", "ops", TaintEffect.NO_SCHEDULE))),
    ]  # fmt: skip
    options = ServeOptions(speed=1.0, alert_rules=tuple(rules), observe_step_s=STEP_S)
    plane = EmbeddedControlPlane(store, nodes, options)
    assert plane.telemetry is not None
    fake = FakeGpus(plane.telemetry, dict(HOLDERS))
    plane.telemetry = fake
    app = create_app(plane)
    with (
        threaded_server(app) as url,
        PrometheusProcess(
            tmp_path / "prometheus", [url.removeprefix("http://")],
            scrape_interval_s=STEP_S, evaluation_interval_s=STEP_S,
            rule_files=[exported], credentials_file=credentials,
        ) as prometheus,
    ):  # fmt: skip
        # Both sides' series start together: Prometheus has scraped serve before the plane's
        # first round.
        prometheus.wait_for('DCGM_FI_DEV_GPU_TEMP{Hostname="h-1"}', timeout_s=20.0)
        for (namespace, name), gpus in ((TRAIN, 1), (NOTEBOOK, 1)):
            doc = pod_doc(name, gpus=gpus, namespace=namespace, runtime="10h")
            answer = httpx.post(
                f"{url}/api/v1/workloads", content=as_yaml(doc),
                headers={"Content-Type": "application/yaml",
                         "Authorization": f"Bearer {tokens[namespace]}"},
            )  # fmt: skip
            assert answer.status_code == 201, answer.text
        plane.start()
        try:
            backdate(plane, NOTEBOOK, NOTEBOOK_RAN_S)
            yield Serve(plane, fake, url, admin, prometheus, rules, exprs)
        finally:
            plane.stop()
            store.close()


def backdate(plane: EmbeddedControlPlane, pod: tuple[str, str], by_s: float) -> None:
    """Moves ``pod``'s start ``by_s`` back in the plane's book once it runs (placed at the
    plane's first turn)."""

    def moved() -> bool:
        with plane.lock:
            started = pods_of(plane.records)[1].get(pod)
            if started is None:
                return False
            (pod_record,) = [
                pod_record
                for record in plane.records.values()
                for pod_record in record.pods.values()
                if (pod_record.pod.namespace, pod_record.pod.name) == pod
            ]
            pod_record.started = started - by_s
            return True

    wait_until(moved, f"{pod} to run", timeout_s=SETTLE_S, every_s=POLL_S)


def settle(serve: Serve, want: Mapping[Key, str]) -> tuple[dict[Key, Seen], dict[Key, Seen]]:
    """Polls both sides until each lists exactly ``want`` (key -> state); fails showing both
    after :data:`SETTLE_S`. Returns (gpufleet's, Prometheus') pending and firing alerts, and
    gpufleet's resolved ones apart in the first."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        ours, theirs = serve.gpufleet(), serve.theirs()
        active = {k: s.state for k, s in ours.items() if s.state != "resolved"}
        if active == want and {k: s.state for k, s in theirs.items()} == want:
            return ours, theirs
        if time.monotonic() > deadline:
            pytest.fail(
                f"not settled after {SETTLE_S} s:\nwant {sorted(want.items())}\n"
                f"gpufleet   {sorted((k, s.state) for k, s in ours.items())}\n"
                f"Prometheus {sorted((k, s.state) for k, s in theirs.items())}"
            )
        time.sleep(POLL_S)


def history(serve: Serve, alertname: str, span_s: float = 120.0) -> str:
    """What Prometheus held over the last ``span_s`` (a failure's message): per query (the
    target's ``up``, its scrape durations, the alert's ``expr`` and ``ALERTS``), the spans of
    Unix seconds at which it had a value at each evaluation step, and when it was 0 (``up``:
    a scrape that failed, such as one past its 1 s timeout on a loaded machine, leaves every
    series stale until the next, and Prometheus' alerts on instant values start again)."""
    end = time.time()
    lines = []
    queries = ("up", "scrape_duration_seconds", serve.exprs[alertname],
               f'ALERTS{{alertname="{alertname}"}}')  # fmt: skip
    for promql in queries:
        answer = httpx.post(
            f"{serve.prometheus.url}/api/v1/query_range",
            data={"query": promql, "start": end - span_s, "end": end, "step": STEP_S},
            timeout=5.0,
        ).json()
        for series in answer.get("data", {}).get("result", []):
            points = [(float(at), value) for at, value in series["values"]]
            spans: list[list[float]] = []
            for at, _ in points:
                if spans and at - spans[-1][1] <= STEP_S * 1.01:
                    spans[-1][1] = at
                else:
                    spans.append([at, at])
            present = [(start, stop) for start, stop in spans]
            values = sorted({value for _, value in points})[:6]
            zero = [at for at, value in points if value == "0"]  # up: a failed scrape
            lines.append(
                f"{promql} {series['metric']}: present {present} values {values}"
                + (f" 0 at {zero}" if zero else "")
            )
    return "\n".join(lines)


def failed_scrapes(serve: Serve, span_s: float = 300.0) -> list[float]:
    """When Prometheus' scrapes of serve failed over the last ``span_s`` (its raw ``up``
    samples that are 0: a scrape past its timeout on a loaded machine)."""
    answer = httpx.post(
        f"{serve.prometheus.url}/api/v1/query",
        data={"query": f"up[{int(span_s)}s]", "time": time.time()},
        timeout=5.0,
    ).json()
    return sorted(
        float(at)
        for series in answer.get("data", {}).get("result", [])
        for at, value in series["values"]
        if value == "0"
    )


def assert_same(serve: Serve, ours: Mapping[Key, Seen], theirs: Mapping[Key, Seen]) -> None:
    """Every alert Prometheus lists is gpufleet's: same labels, state, activeAt. One that
    Prometheus started again after a scrape of its own failed (every series stale until the
    next, so its alerts on instant values start over, pending again) may be later than
    gpufleet's by that, in either state: a failure of the measuring side, not a difference of
    the two engines; earlier, or later with no failed scrape in between, is one."""
    failed = failed_scrapes(serve)
    for key, their in sorted(theirs.items()):
        our = ours[key]
        assert our.labels == their.labels, key
        if any(our.active_at <= at <= their.active_at for at in failed):
            continue  # started again by Prometheus (its state may be pending again too)
        assert our.state == their.state, key
        subquery = ":])" in serve.exprs[key[0]]
        slack = ACTIVE_AT_SLACK_S + (SUBQUERY_SLACK_S if subquery else 0.0)
        assert abs(our.active_at - their.active_at) <= slack, (
            f"{key}: gpufleet active at {our.active_at:.3f}, Prometheus at "
            f"{their.active_at:.3f} ({our.active_at - their.active_at:+.3f} s); Prometheus "
            f"held:\n{history(serve, key[0])}"
        )


def test_every_rule_is_fired_or_said_why_not(tmp_path: Path) -> None:
    user_rules = tmp_path / "rules.yaml"
    user_rules.write_text(USER_RULES)
    rules = [*builtin_alert_rules(), *read_alert_rules(user_rules)]
    fired = {name for name, _ in STAGE_1}
    names = {rule.name: rule.alert_name for rule in rules}
    assert {name for name, alert in names.items() if alert not in fired} == set(NOT_FIRED)
    comparisons = {rule.comparison.value for rule in rules if rule.name not in NOT_FIRED}
    assert comparisons == {"==", "!=", "<", "<=", ">", ">="}


def test_gpufleet_and_prometheus_hold_the_same_alerts(serve: Serve) -> None:
    # h-1's GPUs go wrong once both sides hold a window's worth of their calm values (the
    # windowed rules' values then move alike: gpufleet's store starts at the plane's first
    # round, Prometheus' series at its first scrape, before).
    observatory = serve.plane.observing.observatory
    deadline = time.monotonic() + SETTLE_S
    while (observatory.last_round or 0.0) < CALM_S:
        assert time.monotonic() < deadline, "the plane's rounds do not run"
        time.sleep(POLL_S)
    serve.fake.by_gpu.update(STAGE_1_GPUS)
    ours, theirs = settle(serve, STAGE_1)
    assert_same(serve, ours, theirs)
    assert theirs[("GpuXidError", "h-1/0")].labels["err_code"] == "79"
    first = ours

    serve.fake.by_holder.update(STAGE_2_HOLDERS)
    serve.fake.by_gpu.update(STAGE_2_GPUS)
    ours, theirs = settle(serve, STAGE_2)
    assert_same(serve, ours, theirs)
    assert {k for k, s in ours.items() if s.state == "resolved"} == STAGE_2_RESOLVED
    for key in STAGE_2:  # the alerts that went on are the same alerts, still active from then
        assert ours[key].active_at == first[key].active_at, key
