"""The web dashboard in a real headless browser, against a real ``gpufleet serve``.

A server subprocess on a free loopback port (temp database, an admin token, the small example
cluster with the example queues) gets a busy mix of workloads through the API: some run, some
share GPUs or use MIG slices, some wait, one holds a GPU it never uses (the ``idle`` usage
profile), most carry a ``team`` label. Every workload runs for hours of simulated time, so
once admission settles nothing changes while the page is compared with the API (except the
cost, which grows with the clock: the cost card is compared with the very report the page
read, recorded on its way to the page, and with a fresh one for what does not move). Playwright
drives the system chromium (never a downloaded browser); the module skips when either is
missing. The screenshot goes to the test's temporary directory, or to $GPUFLEET_DASHBOARD_PNG
(`GPUFLEET_DASHBOARD_PNG=docs/dashboard.png` refreshes the README's picture).
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
import yaml

from gpufleet.model.times import format_duration, simulated_time, wall_clock_time
from gpufleet.testing.server_process import wait_until_ready
from tests.api.browser import BROWSER_MARKS, eventually, new_page

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Route

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER = REPO_ROOT / "examples" / "clusters" / "small.yaml"
QUEUES = REPO_ROOT / "examples" / "tenancy" / "queues.yaml"
#: Where the screenshot goes when asked (else the test's temporary directory).
SCREENSHOT_ENV = "GPUFLEET_DASHBOARD_PNG"

#: A rule the busy mix fires within a minute of simulated time (beside the built-in ones).
BUSY_RULE = """
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: gpu-busy}
spec: {metric: DCGM_FI_DEV_GPU_UTIL, comparison: ">", threshold: 30, for: 1m, severity: info}
"""
SPEED = 60  # a simulated minute per second: the charts move, the 10-hour workloads do not end
RUNTIME = "10h"


pytestmark = BROWSER_MARKS

TOLERATE_GPU_TAINT = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


# ---- the server ------------------------------------------------------------------------


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from gpufleet.cli.main import app; app()", *args]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Server:
    url: str
    token: str
    client: httpx.Client

    def get(self, path: str) -> Any:
        response = self.client.get(f"/api/v1{path}")
        response.raise_for_status()
        return response.json()

    def submit(self, *documents: dict[str, Any]) -> None:
        response = self.client.post(
            "/api/v1/workloads",
            content=yaml.safe_dump_all(documents),
            headers={"Content-Type": "application/yaml"},
        )
        assert response.status_code == 201, response.text


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    workdir = tmp_path
    db = workdir / "fleet.db"
    made = subprocess.run(
        _cli("admin", "create-token", "--db", str(db), "--tenant", "platform", "--role", "admin"),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    token = made.stdout.strip().splitlines()[-1].strip()
    rules = workdir / "rules.yaml"
    rules.write_text(BUSY_RULE)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            _cli(
                "serve",
                "--cluster",
                str(CLUSTER),
                "--scenario",
                str(QUEUES),
                "--speed",
                str(SPEED),
                "--db",
                str(db),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--alert-rules",
                str(rules),
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    try:
        wait_until_ready(url, process, log)
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            yield Server(url=url, token=token, client=client)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


# ---- the workloads ---------------------------------------------------------------------


def _pod_spec(
    limits: dict[str, Any],
    *,
    models: str | None = None,
    milli: int | None = None,
    usage: str | None = None,
) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if usage:  # what its GPU does (gpufleet/telemetry/profiles.py)
        annotations["gpufleet.dev/usage-profile"] = usage
    if models:
        annotations["gpufleet.dev/gpu-models"] = models
    if milli:
        annotations["gpufleet.dev/gpu-milli"] = str(milli)
        annotations["gpufleet.dev/gpu-memory"] = "4Gi"
    return {
        "metadata": {"annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "example/worker:1",
                    "resources": {
                        "requests": {"cpu": "2", "memory": "8Gi"},
                        "limits": {"memory": "8Gi", **limits},
                    },
                }
            ],
            "tolerations": TOLERATE_GPU_TAINT,
        },
    }


#: The team label of each namespace's workloads, for the cost card's "team" grouping; chat's
#: carry none (the cost report's ``__unallocated__`` line).
TEAMS = {"research": "vision", "llm": "language", "inference": "serving"}


def _meta(name: str, namespace: str, queue: str) -> dict[str, Any]:
    team = {"team": TEAMS[namespace]} if namespace in TEAMS else {}
    return {
        "name": name,
        "namespace": namespace,
        "labels": {"gpufleet.dev/queue": queue, **team},
        "annotations": {
            "gpufleet.dev/sim-duration": RUNTIME,
            "gpufleet.dev/expected-runtime": RUNTIME,
        },
    }


def pod(name: str, namespace: str, queue: str, **kwargs: Any) -> dict[str, Any]:
    limits = kwargs.pop("limits", {"nvidia.com/gpu": 1})
    template = _pod_spec(limits, **kwargs)
    meta = _meta(name, namespace, queue)
    meta["annotations"].update(template["metadata"]["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def job(name: str, namespace: str, queue: str, parallelism: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, namespace, queue),
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": _pod_spec({"nvidia.com/gpu": gpus}),
        },
    }


def deployment(name: str, namespace: str, queue: str, replicas: int, milli: int) -> dict[str, Any]:
    # A time-sliced replica of a T4 (the example cluster's T4s advertise nvidia.com/gpu.shared)
    template = _pod_spec({"nvidia.com/gpu.shared": 1}, models="T4", milli=milli)
    template["metadata"]["labels"] = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, namespace, queue),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def busy_workloads() -> list[dict[str, Any]]:
    """Whole GPUs, a gang, GPU shares, a MIG slice, a GPU held idly, and work that has to
    wait."""
    four, two = {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 2}
    docs = [pod(f"train-{i}", "research", "research", limits=four) for i in range(8)]
    docs += [pod(f"serve-{i}", "inference", "inference", limits=two) for i in range(5)]
    docs.append(job("finetune", "llm", "llm", parallelism=4, gpus=2))
    docs.append(deployment("embeddings", "inference", "inference", replicas=5, milli=250))
    docs.append(deployment("chat-small", "chat", "chat", replicas=3, milli=500))
    docs.append(pod("notebook", "research", "research", limits={"nvidia.com/mig-1g.10gb": 1}))
    # a whole GPU held and never used: an idle GPU holder with an idle cost
    docs.append(pod("standby", "inference", "inference", usage="idle"))
    # more than the research queue may ever hold (nominal 56 + borrowing 16): waits for quota
    docs.append(job("sweep", "research", "research", parallelism=10, gpus=8))
    # no such GPU model in the cluster: waits for capacity
    docs.append(pod("legacy", "research", "research", models="V100"))
    return docs


def _settled(server: Server) -> list[dict[str, Any]]:
    """Wait until admission is done: no workload half placed (Admitted) or about to be
    (preempting for it), every waiting one tried by the scheduler (it says why it waits).
    Asked of the server process until it holds; the deadline only bounds a failure."""
    deadline = time.monotonic() + 90
    while True:
        workloads: list[dict[str, Any]] = server.get("/workloads")
        if all(
            w["state"] != "Admitted"
            and (
                w["state"] != "Pending"
                or w["waiting_for"] not in (None, "not tried yet", "preempting")
            )
            for w in workloads
        ):
            return workloads
        if time.monotonic() > deadline:
            pytest.fail(f"workloads did not settle within 90 s: {workloads}")
        time.sleep(0.2)


@pytest.fixture
def busy(server: Server) -> list[dict[str, Any]]:
    server.submit(*busy_workloads())
    workloads = _settled(server)
    states = [w["state"] for w in workloads]
    assert "Running" in states, states
    assert "Pending" in states, states
    devices = [d for n in server.get("/nodes") for d in n["devices"]]
    assert any(d["shared"] for d in devices), "no shared device: the busy mix did not share"
    assert any(d["mig"] and d["allocated"] > 0 for d in devices), "no MIG slice in use"
    return workloads


# ---- the browser -----------------------------------------------------------------------


DOM_SNAPSHOT = """() => {
  const text = (sel) => document.querySelector(sel)?.dataset.value ?? null;
  return {
    summary: {
      nodes: text('#summary-nodes'), gpus: text('#summary-gpus'),
      allocation: text('#gpu-allocation'), pending: text('#summary-pending'),
      running: text('#summary-running'),
    },
    nodes: [...document.querySelectorAll('[data-node]')].map((n) => ({
      name: n.dataset.node, gpus: Number(n.dataset.gpus),
      allocated: Number(n.dataset.gpusAllocated),
    })),
    devices: [...document.querySelectorAll('[data-device]')].map((d) => ({
      id: d.dataset.device, allocated: Number(d.dataset.allocated),
      shared: d.dataset.shared === 'true', mig: d.dataset.mig === 'true',
      pods: d.dataset.pods ? d.dataset.pods.split(',').sort() : [],
      label: d.getAttribute('aria-label'),
      util: d.dataset.util === undefined ? null : Number(d.dataset.util),
    })),
    queues: [...document.querySelectorAll('#queues-table tr[data-queue]')].map((r) => {
      const field = (f) => r.querySelector(`[data-field="${f}"]`).dataset.value;
      return {
        name: r.dataset.queue, nominal: field('nominal'), usage: Number(field('usage')),
        pending: Number(field('pending')), running: Number(field('running')),
      };
    }),
    alerts: [...document.querySelectorAll('#alerts-table tr[data-alert]')].map((r) => ({
      name: r.dataset.alert, state: r.dataset.state, count: Number(r.dataset.count),
    })),
    workloads: [...document.querySelectorAll('#workloads-table tr[data-workload]')].map((r) => ({
      key: r.dataset.workload, state: r.dataset.state,
      gpus: Number(r.querySelector('[data-field="gpus"]').dataset.value),
      message: r.querySelector('[data-field="message"]')?.textContent ?? null,
    })),
  };
}"""


def snapshot(page: Page) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(DOM_SNAPSHOT)
    return result


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, abs_tol=1e-6)


def open_dashboard(page: Page, server: Server) -> None:
    page.goto(f"{server.url}/?token={server.token}")
    page.wait_for_selector("body[data-loaded]", timeout=20_000)
    page.wait_for_selector("#live-indicator[data-state='live']", timeout=20_000)


# ---- the checks ------------------------------------------------------------------------


def check_summary_and_map(page: Page, server: Server) -> None:
    cluster = server.get("/cluster")
    nodes = server.get("/nodes")
    dom = snapshot(page)
    assert dom["summary"]["nodes"] == str(cluster["nodes"])
    assert dom["summary"]["gpus"] == str(cluster["gpus"])
    assert close(float(dom["summary"]["allocation"]), cluster["gpu_allocation"])
    assert dom["summary"]["pending"] == str(cluster["workloads_pending"])
    assert dom["summary"]["running"] == str(cluster["workloads_running"])
    assert sorted(n["name"] for n in dom["nodes"]) == sorted(n["name"] for n in nodes)
    api_nodes = {n["name"]: n for n in nodes}
    for node in dom["nodes"]:
        assert node["gpus"] == api_nodes[node["name"]]["gpus"]
        assert close(node["allocated"], api_nodes[node["name"]]["gpus_allocated"])
    api_devices = {f"{n['name']}/{d['index']}": d for n in nodes for d in n["devices"]}
    assert len(dom["devices"]) == len(api_devices) == cluster["gpus"]
    # Real use beside allocation: every simulated device measured, some held ones busy.
    assert all(d["util"] is not None and 0.0 <= d["util"] <= 1.0 for d in dom["devices"])
    assert any(d["util"] > 0.0 for d in dom["devices"] if d["pods"])
    for device in dom["devices"]:
        expected = api_devices[device["id"]]
        assert close(device["allocated"], expected["allocated"]), device["id"]
        assert device["shared"] == expected["shared"], device["id"]
        assert device["mig"] == expected["mig"], device["id"]
        assert device["pods"] == sorted(expected["pods"]), device["id"]
        for pod_key in expected["pods"]:  # the tooltip text names the pods
            assert pod_key in device["label"]


def check_queues(page: Page, server: Server) -> None:
    queues = {q["name"]: q for q in server.get("/queues")}
    dom = snapshot(page)
    assert sorted(q["name"] for q in dom["queues"]) == sorted(queues)
    for row in dom["queues"]:
        api = queues[row["name"]]
        nominal = api["nominal"].get("nvidia.com/gpu")
        assert row["nominal"] == ("" if nominal is None else str(nominal).removesuffix(".0"))
        assert close(row["usage"], api["usage"].get("nvidia.com/gpu", 0))
        assert row["pending"] == api["pending"]
        assert row["running"] == api["running"]


def check_all_workloads(page: Page, server: Server) -> None:
    workloads = {w["key"]: w for w in server.get("/workloads")}
    dom = snapshot(page)
    assert sorted(w["key"] for w in dom["workloads"]) == sorted(workloads)
    for row in dom["workloads"]:
        api = workloads[row["key"]]
        assert row["state"] == api["state"], row["key"]
        assert close(row["gpus"], api["gpus"]), row["key"]


def check_pending_workloads(page: Page, server: Server) -> None:
    pending = {w["key"]: w for w in server.get("/workloads?state=Pending")}
    assert pending, "nothing pending"
    dom = snapshot(page)
    assert sorted(w["key"] for w in dom["workloads"]) == sorted(pending)
    for row in dom["workloads"]:
        assert row["message"], f"{row['key']} waits without a reason"
        assert row["message"] == pending[row["key"]]["message"], row["key"]


def check_header_matches_map(page: Page) -> None:
    """What the header says is allocated is what the map's devices add up to."""
    dom = snapshot(page)
    devices = dom["devices"]
    allocated = sum(d["allocated"] for d in devices)
    assert close(sum(n["allocated"] for n in dom["nodes"]), allocated)
    shown = float(dom["summary"]["allocation"])
    assert math.isclose(shown, allocated / len(devices), abs_tol=1e-3), (
        f"header says {shown:.4f} allocated; the map's devices add up to {allocated:.3f} "
        f"of {len(devices)} = {allocated / len(devices):.4f}"
    )


def check_alerts(page: Page, server: Server) -> None:
    """One row per alert name and state, with as many alerts as the API has."""
    counts: dict[tuple[str, str], int] = {}
    for alert in server.get("/alerts")["alerts"]:
        key = (alert["alertname"], alert["state"])
        counts[key] = counts.get(key, 0) + 1
    dom = {(a["name"], a["state"]): a["count"] for a in snapshot(page)["alerts"]}
    assert dom == counts
    assert ("GpuBusy", "firing") in dom, "the busy mix fires the rule given with --alert-rules"


# ---- the cost card ---------------------------------------------------------------------

COST_SNAPSHOT = """() => {
  const cells = (r) => Object.fromEntries(
    [...r.querySelectorAll('[data-field]')].map((c) => [c.dataset.field, c.textContent]));
  const table = document.querySelector('#cost-table');
  const error = document.querySelector('#cost-error');
  const chart = document.querySelector('#chart-cost');
  return {
    by: table.dataset.by ?? null, window: table.dataset.window ?? null,
    end: table.dataset.end ?? null,
    lines: [...table.querySelectorAll('tbody tr[data-line]')].map((r) => (
      { name: r.dataset.line, cells: cells(r) })),
    total: [...table.querySelectorAll('tfoot tr[data-line]')].map((r) => (
      { name: r.dataset.line, cells: cells(r) }))[0] ?? null,
    notes: [...document.querySelectorAll('#cost-notes li')].map((li) => li.textContent),
    notMeasured: !document.querySelector('#cost-measured').hidden,
    error: error.hidden ? null : error.textContent,
    bars: (chart.data ?? []).map((t) => ({ name: t.name, x: [...t.x], y: [...t.y] })),
    caption: document.querySelector('#idle-caption').textContent,
    holders: [...document.querySelectorAll('#idle-table tr[data-holder]')].map((r) => (
      { workload: r.dataset.holder, cells: cells(r) })),
  };
}"""


#: The cost report's lines that are no group of workloads.
SPECIAL_LINES = ("__idle__", "__unallocated__", "__total__")


#: The most lines the cost chart shows.
MAX_BARS = 20


def charted(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines the cost chart shows: all, or the groups costing most (the API sorts them so)
    and then ``__unallocated__`` and ``__idle__``."""
    if len(lines) <= MAX_BARS:
        return lines
    special = [line for line in lines if line["name"] in SPECIAL_LINES]
    groups = [line for line in lines if line["name"] not in SPECIAL_LINES]
    return groups[: MAX_BARS - len(special)] + special


def _half_up(value: float, places: str) -> Decimal:
    """``value`` rounded as JavaScript's toFixed and toLocaleString round: its exact binary
    value, halves up."""
    return Decimal(value).quantize(Decimal(places), rounding=ROUND_HALF_UP)


def amount(value: float) -> str:
    """Money and GPU-hours as util.js's formatAmount writes them: 1234.5 -> '1,234.50'."""
    return f"{_half_up(value, '0.01'):,.2f}"


def pct(value: float | None) -> str:
    """A fraction as util.js's pct writes it: 0.5405 -> '54.1%', None -> '–'."""
    return "–" if value is None else f"{_half_up(value * 100, '0.1')}%"


def gpus(value: float) -> str:
    """GPUs as util.js's formatGpus writes them: 2 -> '2', 0.2667 -> '0.27'."""
    if value.is_integer():
        return str(int(value))
    return repr(math.floor(value * 100 + 0.5) / 100).removesuffix(".0")


def cost_cells(line: dict[str, Any]) -> dict[str, str]:
    """What the cost table shows of one of the API's lines (but its name), as the page
    formats it."""
    return {
        "workloads": "–" if line["name"] == "__idle__" else str(line["workloads"]),
        "gpu_hours": amount(line["gpu_hours"]),
        "allocated": amount(line["allocated"]),
        "used": amount(line["used"]),
        "idle": amount(line["idle"]),
        "unmeasured": amount(line["unmeasured"]),
        "utilisation": pct(line["utilisation"]),
    }


def holder_cells(holder: dict[str, Any], end: float) -> dict[str, str]:
    """What the idle holders table shows of one of the API's holders."""
    name = holder["workload"].removeprefix(f"{holder['namespace']}/{holder['kind']}/")
    return {
        "workload": name + holder["kind"],  # the name, then its kind below it
        "namespace": holder["namespace"],
        "queue": holder["queue"],
        "gpus": gpus(holder["gpus"]),
        "utilisation": pct(holder["utilisation"]),
        "gpu_hours": amount(holder["gpu_hours"]),
        "idle": amount(holder["idle"]),
        "held_for": format_duration(max(0.0, end - holder["held_since"])),
    }


def record_cost_reports(page: Page) -> list[dict[str, Any]]:
    """Every cost report the page reads, as the server sent it (passed on unchanged)."""
    reports: list[dict[str, Any]] = []

    def record(route: Route) -> None:
        response = route.fetch()
        if response.ok:
            reports.append(response.json())
        route.fulfill(response=response)

    page.route(lambda url: urlsplit(url).path == "/api/v1/cost", record)
    return reports


def reread_cost(page: Page) -> None:
    """Ask the page for a fresh report (as a click on the chosen window does) and wait until
    it shows one."""
    before = page.get_attribute("#cost-table", "data-end")
    page.click("#cost-window button[aria-pressed='true']")
    page.wait_for_function(
        "(before) => document.querySelector('#cost-table').dataset.end !== before",
        arg=before,
        timeout=15_000,
    )


def check_cost(page: Page, server: Server, reports: list[dict[str, Any]], by: str) -> None:
    """The cost card and the idle holders show the report the page read for ``by`` and the
    chosen window, formatted as the page formats numbers; the lines, their workloads and the
    idle holders are the ones a fresh report of the API has."""
    reread_cost(page)
    dom: dict[str, Any] = page.evaluate(COST_SNAPSHOT)
    window = page.get_attribute("#cost-window button[aria-pressed='true']", "data-window")
    assert (dom["by"], dom["window"]) == (by, window)
    shown = next(
        (
            r
            for r in reversed(reports)
            if r["end"] == float(dom["end"]) and ",".join(r["by"]) == by and r["window"] == window
        ),
        None,
    )
    assert shown is not None, f"the page shows a report it did not read: {dom['end']}"
    # every line and the total, each number as the API has it
    assert [line["name"] for line in dom["lines"]] == [line["name"] for line in shown["lines"]]
    rows = [*dom["lines"], dom["total"]]
    for row, line in zip(rows, [*shown["lines"], shown["total"]], strict=True):
        cells = dict(row["cells"])
        label = cells.pop("name").removesuffix(" *")  # *: an estimated price
        # the special lines and the total are named in words
        assert label == line["name"] or line["name"] in SPECIAL_LINES, (label, line["name"])
        assert cells == cost_cells(line), line["name"]
    assert dom["total"]["name"] == "__total__"
    assert dom["notes"][: len(shown["notes"])] == shown["notes"]
    assert dom["notMeasured"] == (not shown["measured"])
    assert dom["error"] is None
    # the bars: each charted line's used, idle and unmeasured cost
    bars = {bar["name"]: bar["x"] for bar in dom["bars"]}
    for split in ("used", "idle", "unmeasured"):
        assert bars[split] == [line[split] for line in charted(shown["lines"])]
    # the idle holders, most idle cost first, under the report's threshold
    assert pct(shown["idle_below"]) in dom["caption"]
    assert [h["workload"] for h in dom["holders"]] == [h["workload"] for h in shown["idle_holders"]]
    for row, holder in zip(dom["holders"], shown["idle_holders"], strict=True):
        assert row["cells"] == holder_cells(holder, shown["end"]), holder["workload"]
    # what a fresh report says: the same lines, workloads, holders and notes
    fresh = server.get(f"/cost?by={quote(by)}&window={window}")
    assert [(line["name"], line["workloads"]) for line in fresh["lines"]] == [
        (line["name"], line["workloads"]) for line in shown["lines"]
    ]
    assert fresh["total"]["workloads"] == shown["total"]["workloads"]
    assert sorted(h["workload"] for h in fresh["idle_holders"]) == sorted(
        h["workload"] for h in shown["idle_holders"]
    )
    assert (fresh["currency"], fresh["measured"], fresh["notes"]) == (
        shown["currency"],
        shown["measured"],
        shown["notes"],
    )


def cost_lines(page: Page) -> list[str]:
    names: list[str] = page.evaluate(
        "() => [...document.querySelectorAll('#cost-table tbody tr[data-line]')]"
        ".map((r) => r.dataset.line)"
    )
    return names


def group_cost_by(page: Page, by: str, *, typed: bool = False) -> None:
    """Choose a grouping, from the list or typed into the field, and wait until it shows."""
    if typed:
        page.fill("#cost-by-key", by)
        page.press("#cost-by-key", "Enter")
    else:
        page.select_option("#cost-by", by)
    page.wait_for_selector(f"#cost-table[data-by='{by}']", timeout=15_000)


def check_idle_holder(server: Server) -> None:
    """The workload that never uses its GPU is one of the report's idle holders."""
    holders = {h["workload"]: h for h in server.get("/cost?by=namespace&window=1d")["idle_holders"]}
    standby = holders.get("inference/Pod/standby")
    assert standby is not None, f"the idle pod is no idle holder: {sorted(holders)}"
    assert standby["utilisation"] == 0.0
    assert standby["idle"] > 0.0


#: An annotation a tenant writes to have the admin's cost chart show a link and a huge text.
HOSTILE_KEY = "note"
HOSTILE_NOTE = '<a href="https://evil.example/">click</a><span style="font-size:60px">big</span>'
HOSTILE_NOTE += "<br>two & <b>more</b>"

HOSTILE_CHART = """() => {
  const chart = document.querySelector('#chart-cost');
  return {
    y: (chart.data ?? []).flatMap((t) => [...t.y]),
    links: chart.querySelectorAll('a').length,
    styled: [...chart.querySelectorAll('.ytick text, .ytick tspan')]
      .filter((t) => (t.getAttribute('style') ?? '').includes('font-size:60px')).length,
    ticks: [...chart.querySelectorAll('.ytick text')].map((t) => t.textContent.trim()),
  };
}"""


def check_hostile_label(page: Page) -> None:
    """The chart's data holds the annotation escaped for Plotly, and Plotly drew it as text."""
    chart: dict[str, Any] = page.evaluate(HOSTILE_CHART)
    escaped = HOSTILE_NOTE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped in chart["y"], chart["y"]
    assert HOSTILE_NOTE not in chart["y"]
    assert chart["links"] == 0
    assert chart["styled"] == 0
    assert HOSTILE_NOTE in chart["ticks"], chart["ticks"]


def filter_workloads(page: Page, state: str) -> None:
    page.click(f"#state-filter button[data-filter='{state}']")


# ---- the test --------------------------------------------------------------------------


def test_dashboard_in_a_browser(
    server: Server, busy: list[dict[str, Any]], browser: Browser, tmp_path: Path
) -> None:
    """One test, not several: under pytest-xdist each would start its own server and browser."""
    watched = new_page(browser)
    page = watched.page
    cost_reports = record_cost_reports(page)
    open_dashboard(page, server)
    assert "token=" not in page.url, "the token stays in the address bar"

    # the header, the map, the queues and the workloads say what the API says
    eventually(lambda: check_summary_and_map(page, server))
    eventually(lambda: check_queues(page, server))
    eventually(lambda: check_alerts(page, server), timeout=30.0)

    # cost per group and the idle GPU holders, as the API reports them, for the grouping and
    # window chosen; another grouping shows other lines
    check_idle_holder(server)
    eventually(lambda: check_cost(page, server, cost_reports, "namespace"), timeout=30.0)
    by_namespace = cost_lines(page)
    group_cost_by(page, "label:team")
    eventually(lambda: check_cost(page, server, cost_reports, "label:team"), timeout=30.0)
    assert cost_lines(page) != by_namespace
    assert {"vision", "serving", "language", "__unallocated__"} <= set(cost_lines(page))
    page.click("#cost-window button[data-window='1h']")
    page.wait_for_selector("#cost-table[data-window='1h']", timeout=15_000)
    eventually(lambda: check_cost(page, server, cost_reports, "label:team"), timeout=30.0)
    group_cost_by(page, "label:app", typed=True)  # the Deployments' pods carry app
    eventually(lambda: check_cost(page, server, cost_reports, "label:app"), timeout=30.0)
    assert {"embeddings", "chat-small"} <= set(cost_lines(page))
    group_cost_by(page, "workload")  # more lines than the chart shows
    eventually(lambda: check_cost(page, server, cost_reports, "workload"), timeout=30.0)
    assert len(cost_lines(page)) > MAX_BARS
    # a key the server refuses: its message in the card, the last report still shown
    page.fill("#cost-by-key", "label:")
    page.press("#cost-by-key", "Enter")
    refused = server.client.get("/api/v1/cost", params={"by": "label:", "window": "1h"})
    assert refused.status_code == 400
    page.wait_for_selector("#cost-error:not([hidden])", timeout=15_000)
    assert refused.json()["message"] in (page.text_content("#cost-error") or "")
    assert page.get_attribute("#cost-table", "data-by") == "workload"
    assert page.is_hidden("#error-banner")
    page.fill("#cost-by-key", "")
    group_cost_by(page, "namespace")
    page.click("#cost-window button[data-window='1d']")
    eventually(lambda: check_cost(page, server, cost_reports, "namespace"), timeout=30.0)
    filter_workloads(page, "all")
    eventually(lambda: check_all_workloads(page, server))
    filter_workloads(page, "Pending")
    eventually(lambda: check_pending_workloads(page, server))
    # the charts drew from /api/v1/history
    for chart in ("#chart-allocation", "#chart-delay", "#chart-workloads"):
        page.wait_for_selector(f"{chart} .main-svg", timeout=15_000)

    # times read as the CLI and the API's messages write them (gpufleet/model/times.py)
    seconds = [0, 8.1, 59, 60, 2349, 3599, 3600, 7500, 90061, -75]
    shown = page.evaluate(
        """async (values) => {
            const util = await import("/static/util.js");
            return values.map((v) => [
                util.formatDuration(v),
                util.formatClock(v, "simulated"),
                util.formatClock(1.7e9 + v, "kubernetes"),
            ]);
        }""",
        seconds,
    )
    assert shown == [
        [format_duration(v), simulated_time(v), wall_clock_time(1.7e9 + v)] for v in seconds
    ]

    # a workload's detail row: its pods and where they run
    filter_workloads(page, "Running")
    running = "llm/Job/finetune"
    assert {w["key"]: w["state"] for w in busy}[running] == "Running"
    page.click(f"tr[data-workload='{running}'] button[data-toggle]")
    detail = page.wait_for_selector(f"tr[data-detail-for='{running}'] tr[data-pod]")
    assert detail is not None
    text = page.inner_text(f"tr[data-detail-for='{running}']")
    for placed in server.get("/workloads/llm/finetune?kind=Job")["pod_views"]:
        assert placed["name"] in text
        assert placed["node"] in text

    # a new workload appears without a reload, through the event stream
    filter_workloads(page, "all")
    page.evaluate("() => { window.__sameDocument = true; }")
    replica = {"nvidia.com/gpu.shared": 1}  # a time-sliced T4 replica
    probe = pod("live-probe", "research", "research", limits=replica, models="T4", milli=250)
    probe["metadata"]["annotations"][HOSTILE_KEY] = HOSTILE_NOTE
    server.submit(probe)
    page.wait_for_selector("tr[data-workload='research/Pod/live-probe']", timeout=15_000)
    assert page.evaluate("() => window.__sameDocument === true"), "the page reloaded"
    assert page.get_attribute("#live-indicator", "data-state") == "live"
    eventually(lambda: check_summary_and_map(page, server))

    filter_workloads(page, "active")
    page.evaluate("() => window.scrollTo(0, 0)")  # the sticky header at the top
    page.wait_for_timeout(1500)  # let the plots finish their transitions
    screenshot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "dashboard.png")
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
    # the refused grouping key is an expected 400 in the console; nothing else may fail
    assert [e for e in watched.errors if "status of 400" not in e] == []

    # a tenant's annotation in the cost chart is text, not Plotly markup (a link, a style)
    group_cost_by(page, f"annotation:{HOSTILE_KEY}", typed=True)
    eventually(lambda: check_hostile_label(page), timeout=30.0)
    assert [e for e in watched.errors if "status of 400" not in e] == []

    # without a token: the sign-in form; a wrong token is refused, the right one works
    form = new_page(browser)
    form.page.goto(server.url)
    form.page.wait_for_selector("#sign-in:not([hidden])")
    assert form.page.is_hidden("#dashboard")
    form.page.fill("#token-input", "not-a-token")
    form.page.click("#sign-in-form button[type='submit']")
    form.page.wait_for_selector("#sign-in-error:not([hidden])")
    assert form.page.is_hidden("#dashboard")
    form.page.fill("#token-input", server.token)
    form.page.click("#sign-in-form button[type='submit']")
    form.page.wait_for_selector("body[data-loaded]", timeout=20_000)
    assert form.page.is_visible("#dashboard")
    assert form.page.text_content("#whoami") == "platform · admin"
    # the refused token is an expected 401 in the console; nothing else may fail
    assert [e for e in form.errors if "401" not in e] == []

    # last, as it fails while the server counts MIG devices differently in the two places
    eventually(lambda: check_header_matches_map(page), timeout=5)
