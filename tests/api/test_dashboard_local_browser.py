"""The web dashboard in a real headless browser, against a real ``gpufleet serve --local``.

A server subprocess on a free loopback port (temp database and state directory, an admin token,
four fake GPUs whose utilisation the fake NVML YAML fixes, the alert rules recorded every
second: ``--observe-every 1``) gets through the API what a user of one box submits: a 1-GPU
Pod and a gang of two 1-GPU pods (a Job) that run until a file appears, a Pod that exits 3 at
once, and a 2-GPU Pod that waits for GPUs the others hold. Chromium then shows what a user
would check: each workload in the table with the state the API reports, the machine's GPUs on
the node map with the running pods on the GPUs the API says they hold and the utilisation
NVML gives, the failed Pod's detail row with its ``Exited`` event, times as wall-clock dates,
the alert on the busy GPUs, the cost card, and no script error or failed request.

At the end the file appears (the runs exit 0), what still waits or runs is cancelled through
the API and the test waits for every workload to end before it stops the server: a run's shim
outlives the server by design. Should the test fail before that, the runs' shims and process
groups are killed from the state directory. Playwright drives the system chromium; the module
skips without it or playwright (the browser helpers: ``browser.py``). The
screenshot goes to the test's temporary directory, or to $GPUFLEET_DASHBOARD_LOCAL_PNG.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml

from gpufleet.backends.local.run_state import (
    CHILD_FILE,
    RUNS_DIR,
    SHIM_FILE,
    alive,
    read_process,
)
from gpufleet.model.times import wall_clock_time
from gpufleet.testing.server_process import wait_until_ready
from tests.api.browser import BROWSER_MARKS, Watched, eventually, new_page
from tests.api.test_dashboard_browser import _cli, _free_port, close, snapshot

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = BROWSER_MARKS

#: Each fake GPU's utilisation (%), by index: what NVML reports whoever holds it.
UTILISATION = [40, 75, 90, 5]
FAKE_GPUS = {
    "driver_version": "550.54.15",
    "devices": [
        {"product": "NVIDIA H100 80GB HBM3", "utilization": {"gpu_util": u, "fb_used_mib": 1024}}
        for u in UTILISATION
    ],
}
#: Fires on GPUs 0 to 2 at the first round that sees them (GPU 3 stays below).
BUSY_RULE = """
apiVersion: gpufleet.dev/v1alpha1
kind: GPUAlertRule
metadata: {name: gpu-busy}
spec: {metric: DCGM_FI_DEV_GPU_UTIL, comparison: ">", threshold: 30, for: 0s, severity: info}
"""
#: Prints, then exits with argv[1] unless argv[2] names a file to wait for first (and says
#: when it appeared).
WAIT_THEN_EXIT = """
import os, sys, time
print("started", flush=True)
if len(sys.argv) > 2:
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.05)
    print("released", flush=True)
sys.exit(int(sys.argv[1]))
"""
NAMESPACE = "research"
#: Where the screenshot goes when asked (else the test's temporary directory).
SCREENSHOT_ENV = "GPUFLEET_DASHBOARD_LOCAL_PNG"
WALL_CLOCK = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


# ---- the server and its runs -----------------------------------------------------------


@dataclass(frozen=True)
class LocalServer:
    url: str
    token: str
    client: httpx.Client
    release: Path  # the file the waiting runs wait for
    launched: float  # the wall clock just before the server started

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

    def workloads(self) -> dict[str, dict[str, Any]]:
        return {w["name"]: w for w in self.get("/workloads")}


def kill_runs(state_dir: Path) -> None:
    """Kill every run's shim and process group still alive (a test that failed half-way)."""
    for run_dir in sorted((state_dir / RUNS_DIR).glob("*")):
        for name, kill in ((SHIM_FILE, os.kill), (CHILD_FILE, os.killpg)):
            process = read_process(run_dir / name)
            if process is not None and alive(process):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(process.pid, signal.SIGKILL)


def end_every_workload(server: LocalServer) -> None:
    """Let the runs end (the file they wait for), cancel what still waits or runs, and wait
    until the API says every workload ended."""
    server.release.touch()
    deadline = time.monotonic() + 30
    while True:
        active = [w for w in server.get("/workloads") if w["state"] in ACTIVE]
        if not active:
            return
        for workload in active:
            server.client.delete(
                f"/api/v1/workloads/{workload['namespace']}/{workload['name']}",
                params={"kind": workload["kind"]},
            )
        if time.monotonic() > deadline:
            pytest.fail(f"workloads still active after 30 s: {active}")
        time.sleep(0.2)


ACTIVE = ("Pending", "Admitted", "Running")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalServer]:
    db = tmp_path / "fleet.db"
    state_dir = tmp_path / "state"
    fake_gpus = tmp_path / "fake-gpus.yaml"
    fake_gpus.write_text(yaml.safe_dump(FAKE_GPUS))
    rules = tmp_path / "rules.yaml"
    rules.write_text(BUSY_RULE)
    made = subprocess.run(
        _cli("admin", "create-token", "--db", str(db), "--tenant", "platform", "--role", "admin"),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    token = made.stdout.strip().splitlines()[-1].strip()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # As root, the tenant's runs run as root too (--allow-root switches no user, so serve
    # does not need to hide processes, which needs CAP_SYS_ADMIN).
    as_root = ["--allow-root"] if os.geteuid() == 0 else []
    log = tmp_path / "serve.log"
    serve_args = [
        "serve", "--local", "--fake-gpus", str(fake_gpus), "--db", str(db),
        "--state-dir", str(state_dir), "--host", "127.0.0.1", "--port", str(port),
        "--alert-rules", str(rules), "--observe-every", "1", "--grace", "2", *as_root,
    ]  # fmt: skip
    launched = time.time()
    with log.open("wb") as out:
        process = subprocess.Popen(
            _cli(*serve_args),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        wait_until_ready(url, process, log)
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            served = LocalServer(url, token, client, tmp_path / "release", launched)
            try:
                yield served
            finally:
                end_every_workload(served)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        kill_runs(state_dir)


# ---- the workloads ---------------------------------------------------------------------


def _container(gpus: int, exit_code: int, release: Path | None) -> dict[str, Any]:
    args = [str(exit_code)] + ([str(release)] if release is not None else [])
    return {
        "name": "main",
        "command": [sys.executable, "-c", WAIT_THEN_EXIT, *args],
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": {"gpufleet.dev/queue": NAMESPACE}}


def pod(name: str, gpus: int, exit_code: int = 0, release: Path | None = None) -> dict[str, Any]:
    spec = {"restartPolicy": "Never", "containers": [_container(gpus, exit_code, release)]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(name), "spec": spec}


def gang(name: str, workers: int, release: Path) -> dict[str, Any]:
    template = {"restartPolicy": "Never", "containers": [_container(1, 0, release)]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name),
        "spec": {
            "parallelism": workers,
            "completions": workers,
            "backoffLimit": 0,
            "template": {"spec": template},
        },
    }


def wait_for(server: LocalServer, states: dict[str, str], timeout: float = 20.0) -> None:
    """Until each named workload is in its state (and a waiting one says why)."""
    deadline = time.monotonic() + timeout
    while True:
        workloads = server.workloads()
        seen = {name: workloads[name]["state"] for name in states if name in workloads}
        tried = all(
            workloads[name]["waiting_for"] not in (None, "not tried yet")
            for name, state in states.items()
            if state == "Pending" and name in workloads
        )
        if seen == states and tried:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"expected {states}, the API says {seen}")
        time.sleep(0.1)


@pytest.fixture
def submitted(server: LocalServer) -> LocalServer:
    """``hold`` (1 GPU) and ``gang`` (2 x 1 GPU) run, ``crash`` failed with exit code 3,
    ``waiter`` (2 GPUs) waits: one GPU is free."""
    server.submit(
        pod("hold", 1, release=server.release),
        gang("gang", 2, server.release),
        pod("crash", 1, exit_code=3),
    )
    wait_for(server, {"hold": "Running", "gang": "Running", "crash": "Failed"})
    server.submit(pod("waiter", 2, release=server.release))
    wait_for(server, {"hold": "Running", "gang": "Running", "crash": "Failed", "waiter": "Pending"})
    return server


# ---- the browser -----------------------------------------------------------------------


def watch_requests(watched: Watched) -> None:
    """Record every request that failed or was answered with an error status."""
    page = watched.page
    page.on(
        "requestfailed",
        lambda request: watched.errors.append(f"request failed: {request.url} ({request.failure})"),
    )
    page.on(
        "response",
        lambda response: (
            watched.errors.append(f"{response.status} for {response.url}")
            if response.status >= 400
            else None
        ),
    )


def open_dashboard(page: Page, server: LocalServer) -> None:
    page.goto(f"{server.url}/?token={server.token}")
    page.wait_for_selector("body[data-loaded]", timeout=20_000)
    page.wait_for_selector("#live-indicator[data-state='live']", timeout=20_000)


# ---- the checks ------------------------------------------------------------------------


def check_workloads(page: Page, server: LocalServer) -> None:
    """Every workload, in the state the API reports, holding what it says."""
    check_states(page, server, ("Running", "Running", "Failed", "Pending"))


def check_states(page: Page, server: LocalServer, states: tuple[str, str, str, str]) -> None:
    """Every workload in the state the API reports, holding what it says; ``hold``, ``gang``,
    ``crash`` and ``waiter`` in ``states``."""
    workloads = {w["key"]: w for w in server.get("/workloads")}
    dom = snapshot(page)["workloads"]
    assert sorted(w["key"] for w in dom) == sorted(workloads)
    for row in dom:
        api = workloads[row["key"]]
        assert row["state"] == api["state"], row["key"]
        assert close(row["gpus"], api["gpus"]), row["key"]
    shown = {workloads[row["key"]]["name"]: row["state"] for row in dom}
    assert shown == dict(zip(("hold", "gang", "crash", "waiter"), states, strict=True))


def check_map(page: Page, server: LocalServer, running: tuple[str, ...] = ("hold", "gang")) -> None:
    """The machine and its four GPUs: the ``running`` workloads' pods on the GPUs their
    detail says they hold, each GPU's utilisation as the fake NVML gives it, the header's
    counts."""
    (node,) = server.get("/nodes")
    cluster = server.get("/cluster")
    holders: dict[int, list[str]] = {}
    for name in running:
        kind = "Job" if name == "gang" else "Pod"
        detail = server.get(f"/workloads/{NAMESPACE}/{name}?kind={kind}")
        for placed in detail["pod_views"]:
            assert placed["node"] == node["name"]
            for index in placed["gpu_indices"]:  # the map names each pod's workload
                holders.setdefault(index, []).append(detail["key"])
    assert sum(len(pods) for pods in holders.values()) == 3 * bool(running)
    dom = snapshot(page)
    assert [(n["name"], n["gpus"]) for n in dom["nodes"]] == [(node["name"], 4)]
    assert close(dom["nodes"][0]["allocated"], node["gpus_allocated"])
    assert close(node["gpus_allocated"], 3 * bool(running))
    devices = {d["id"]: d for d in dom["devices"]}
    assert sorted(devices) == [f"{node['name']}/{i}" for i in range(4)]
    api_devices = {d["index"]: d for d in node["devices"]}
    for index, utilisation in enumerate(UTILISATION):
        device = devices[f"{node['name']}/{index}"]
        assert sorted(api_devices[index]["pods"]) == sorted(holders.get(index, [])), index
        assert device["pods"] == sorted(holders.get(index, [])), index
        assert close(device["allocated"], 1.0 if index in holders else 0.0), index
        assert device["util"] is not None, index
        assert close(device["util"], utilisation / 100), index
        assert f"{utilisation}.0% used" in device["label"], device["label"]
    summary = dom["summary"]
    assert (summary["nodes"], summary["gpus"]) == ("1", "4")
    assert (summary["running"], summary["pending"]) == (
        str(cluster["workloads_running"]),
        str(cluster["workloads_pending"]),
    )


def check_alerts(page: Page, server: LocalServer) -> None:
    """The busy GPUs' alert, as many as the API has, firing."""
    counts: dict[tuple[str, str], int] = {}
    for alert in server.get("/alerts")["alerts"]:
        key = (alert["alertname"], alert["state"])
        counts[key] = counts.get(key, 0) + 1
    dom = {(a["name"], a["state"]): a["count"] for a in snapshot(page)["alerts"]}
    assert dom == counts
    assert dom.get(("GpuBusy", "firing")) == 3, dom


def check_wall_clock(page: Page) -> None:
    """The header's clock is the wall clock, as a date (not a simulated ``t=...``), running in
    real time."""
    shown = page.text_content("#summary-time") or ""
    assert WALL_CLOCK.match(shown), shown
    value = float(page.get_attribute("#summary-time", "data-value") or "nan")
    assert abs(value - time.time()) < 60, (value, time.time())
    assert page.get_attribute("#summary-backend", "data-value") == "local"
    assert page.text_content("#summary-speed") == "real time"


def check_failed_detail(page: Page, server: LocalServer) -> None:
    """The failed Pod's detail row: its pod failed, and its ``Exited`` event (exit code 3)
    at the wall-clock time the API recorded."""
    key = f"{NAMESPACE}/Pod/crash"
    page.click(f"tr[data-workload='{key}'] button[data-toggle]")
    page.wait_for_selector(f"tr[data-detail-for='{key}'] tr[data-pod]", timeout=15_000)
    detail = server.get(f"/workloads/{NAMESPACE}/crash?kind=Pod")
    (exited,) = [e for e in detail["events"] if e["reason"] == "Exited"]
    assert "exit code 3" in exited["message"]
    row = f"tr[data-detail-for='{key}']"
    events = page.eval_on_selector_all(
        f"{row} ul.events li",
        "(items) => items.map((li) => ({type: li.dataset.type,"
        " when: li.querySelector('.when').textContent,"
        " reason: li.querySelector('strong').textContent, text: li.textContent}))",
    )
    shown = [e for e in events if e["reason"] == "Exited"]
    assert len(shown) == 1, events
    assert shown[0]["type"] == "Warning"
    assert shown[0]["when"] == wall_clock_time(exited["time"])
    assert exited["message"] in shown[0]["text"]
    for event in events:
        assert WALL_CLOCK.match(event["when"]), event
    # a process runs until it ends: no expected runtime it did not declare
    facts = page.text_content(f"{row} p.facts") or ""
    assert detail["expected_runtime"] is None
    assert "expected runtime" not in facts, facts
    pod_state = page.text_content(f"{row} tr[data-pod] td:nth-child(2)")
    assert pod_state == detail["pod_views"][0]["state"]
    # its output, as the API keeps it
    log = f"{row} .log[data-log-for='crash']"
    assert page.text_content(f"{log} pre") == "started\n"
    assert "run 1 of 1" in (page.text_content(f"{log} .log-head") or "")
    assert page.get_attribute(log, "data-running") == "false"


def log_of(page: Page, workload: str, pod: str) -> str:
    return (
        page.text_content(f"tr[data-detail-for='{workload}'] .log[data-log-for='{pod}'] pre") or ""
    )


def check_pending(page: Page, server: LocalServer) -> None:
    """The waiting Pod says why, as the API does."""
    page.click("#state-filter button[data-filter='Pending']")
    (waiter,) = server.get("/workloads?state=Pending")
    dom = snapshot(page)["workloads"]
    assert [w["key"] for w in dom] == [waiter["key"]]
    assert dom[0]["message"], "it waits without a reason"
    assert dom[0]["message"] == waiter["message"]


def check_cost(page: Page, server: LocalServer) -> None:
    """The cost card reads its report without an error and shows the API's lines, from the
    server's first start (not a day of idle GPUs before it ran) to now, as dates."""
    page.wait_for_selector("#cost-table[data-end]", timeout=15_000)
    assert page.is_hidden("#cost-error")
    window = page.get_attribute("#cost-table", "data-window")
    by = page.get_attribute("#cost-table", "data-by")
    report = server.get(f"/cost?by={by}&window={window}")
    shown = page.eval_on_selector_all(
        "#cost-table tbody tr[data-line]", "(rows) => rows.map((r) => r.dataset.line)"
    )
    assert shown == [line["name"] for line in report["lines"]]
    assert server.launched <= report["start"] <= time.time()
    start = float(page.get_attribute("#cost-table", "data-start") or "nan")
    end = float(page.get_attribute("#cost-table", "data-end") or "nan")
    assert server.launched <= start <= end <= time.time(), (start, end)
    span = page.text_content("#cost-span") or ""
    assert f"{wall_clock_time(start)} to {wall_clock_time(end)}" in span, span


# ---- the test --------------------------------------------------------------------------


def check_date_axis(page: Page, chart: str) -> None:
    assert page.evaluate(f"() => document.querySelector('{chart}').layout.xaxis.type") == "date"


def test_dashboard_of_a_local_server(
    submitted: LocalServer, browser: Browser, tmp_path: Path
) -> None:
    server = submitted
    watched = new_page(browser)
    watch_requests(watched)
    page = watched.page
    open_dashboard(page, server)

    check_wall_clock(page)
    page.click("#state-filter button[data-filter='all']")
    eventually(lambda: check_workloads(page, server))
    eventually(lambda: check_map(page, server))
    eventually(lambda: check_alerts(page, server), timeout=20.0)
    check_failed_detail(page, server)
    check_pending(page, server)
    eventually(lambda: check_cost(page, server))
    # the charts drew from /api/v1/history, over dates (Plotly takes the axis type from the
    # data: a chart drawn before the history holds a point has a plain axis until a redraw)
    for chart in ("#chart-allocation", "#chart-delay", "#chart-workloads"):
        page.wait_for_selector(f"{chart} .main-svg", timeout=15_000)
        eventually(functools.partial(check_date_axis, page, chart))

    # the runs end (exit 0), the waiting one runs and ends too: the page follows, no reload,
    # and the open rows of the gang follows its pods' output
    page.click("#state-filter button[data-filter='all']")
    gang_key = f"{NAMESPACE}/Job/gang"
    page.click(f"tr[data-workload='{gang_key}'] button[data-toggle]")
    page.wait_for_selector(f"tr[data-detail-for='{gang_key}'] .log[data-running='true']")
    assert [log_of(page, gang_key, p) for p in ("gang-0", "gang-1")] == ["started\n"] * 2
    screenshot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "dashboard-local.png")
    page.screenshot(path=str(screenshot), full_page=True)
    page.evaluate("() => { window.__sameDocument = true; }")
    server.release.touch()
    wait_for(server, dict.fromkeys(("hold", "gang", "waiter"), "Succeeded") | {"crash": "Failed"})
    ended = ("Succeeded", "Succeeded", "Failed", "Succeeded")
    eventually(lambda: check_states(page, server, ended))
    assert page.evaluate("() => window.__sameDocument === true"), "the page reloaded"
    eventually(lambda: check_map(page, server, running=()))
    for pod_name in ("gang-0", "gang-1"):
        assert log_of(page, gang_key, pod_name) == "started\nreleased\n"
    assert watched.errors == []
