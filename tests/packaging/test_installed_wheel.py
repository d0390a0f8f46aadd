"""The wheel installed into a fresh virtual environment runs (issue 33 item 5): ``gpufleet
--version`` reports the wheel's version, the bundled data files load from the installed
package, and ``gpufleet serve`` answers its health routes and serves the dashboard with its
static files.

Honest about what runs: the environment holds the wheel's files and nothing of the source
tree; every command runs from an empty temporary folder without PYTHONPATH, and the first test
checks that gpufleet and its metadata come from the new environment (see
:func:`tests.packaging.support.install` for how the dependencies are lent, offline)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.testing.prometheus import free_port
from gpufleet.testing.server_process import wait_until_ready
from tests.packaging.support import (
    PACKAGE,
    REPO_ROOT,
    Venv,
    clean_environment,
    install,
    pyproject_version,
)

pytestmark = pytest.mark.slow

#: Where the installed package and its metadata were found, as the new environment sees it.
WHERE_FROM = """
import json, os, sys, importlib.metadata as metadata, gpufleet
print(json.dumps({
    "file": gpufleet.__file__,
    "version": gpufleet.__version__,
    "metadata": str(metadata.distribution("gpufleet").locate_file("")),
    "path": [os.path.abspath(entry) for entry in sys.path],
}))
"""

#: Every reader of a file the package ships, run from the installed package: each prints the
#: path it read, to be checked inside the new environment.
READ_BUNDLED = """
import json
from gpufleet.agent import kubelet_api
from gpufleet.cli.scenarios import BUNDLED_CLUSTER
from gpufleet.cli.serve_worlds import bundled
from gpufleet.io.cluster_traces.shapes import (
    BUNDLED_RUNTIMES, BUNDLED_SHAPES, bundled_path, bundled_shape_table,
)
from gpufleet.io.fleet.alert_rules import builtin_alert_rules, builtin_rules_path
from gpufleet.io.fleet.prices import default_prices, default_prices_path
from gpufleet.io.kube.schema import tables
from gpufleet.io.readers import read_cluster, read_scenario

assert bundled_shape_table().shapes and builtin_alert_rules() and default_prices().gpus
assert tables()[0] and read_cluster(bundled_path(BUNDLED_CLUSTER))
assert read_cluster(bundled("cluster.yaml"))
for name in ("queues.yaml", "local-queues.yaml"):
    read_scenario(bundled(name))
print(json.dumps([str(p) for p in [
    bundled_path(BUNDLED_SHAPES), bundled_path(BUNDLED_RUNTIMES), bundled_path(BUNDLED_CLUSTER),
    builtin_rules_path(), default_prices_path(), bundled("cluster.yaml"), bundled("queues.yaml"),
    bundled("local-queues.yaml"), kubelet_api._PROTOS,
]]))
"""

#: ``import ... from "./x.js"`` in the dashboard's modules.
JS_IMPORT = re.compile(r"""\bfrom\s+"\./([\w.-]+)\"""")
#: The dashboard page's own references to the server's files.
PAGE_ASSET = re.compile(r"""(?:src|href)="(/static/[^"]+)\"""")
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return install(wheel, tmp_path_factory.mktemp("installed") / "venv")


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """An empty folder to run from, away from the source tree."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    return folder


def _run(venv: Venv, cwd: Path, *args: str) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=clean_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _inside(path: str, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())


def test_gpufleet_comes_from_the_wheel_not_the_source_tree(venv: Venv, elsewhere: Path) -> None:
    found = json.loads(_run(venv, elsewhere, str(venv.python), "-c", WHERE_FROM))
    assert _inside(found["file"], venv.site_packages), found["file"]
    assert _inside(found["metadata"], venv.site_packages), found["metadata"]
    assert found["version"] == pyproject_version()
    on_path = [Path(entry).resolve() for entry in found["path"]]
    assert REPO_ROOT.resolve() not in on_path
    assert on_path.index(venv.site_packages.resolve()) < min(
        index
        for index, entry in enumerate(on_path)
        if entry.name == "site-packages" and entry != venv.site_packages.resolve()
    )


def test_gpufleet_version_reports_the_wheels_version(venv: Venv, elsewhere: Path) -> None:
    assert _run(venv, elsewhere, str(venv.bin / PACKAGE), "--version").strip() == (
        pyproject_version()
    )


def test_the_bundled_files_load_from_the_installed_package(venv: Venv, elsewhere: Path) -> None:
    read = json.loads(_run(venv, elsewhere, str(venv.python), "-c", READ_BUNDLED))
    assert [path for path in read if not _inside(path, venv.site_packages)] == []


@pytest.fixture
def served(venv: Venv, elsewhere: Path) -> Iterator[str]:
    """``gpufleet serve`` from the new environment (the simulated cluster, a new database in
    the temporary folder, a free loopback port); its URL. Stopped as systemd stops it, and
    must then shut down cleanly."""
    port = free_port()
    log = elsewhere / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(venv.bin / PACKAGE), "serve", "--db", str(elsewhere / "gpufleet.db"),
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=elsewhere, env=clean_environment(), stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, process, log, timeout=90.0)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    # uvicorn shuts down, then raises the signal it caught again, as the default action would.
    said = log.read_text(errors="replace")
    assert code == -signal.SIGTERM, said[-4000:]
    assert "Finished server process" in said, said[-4000:]


def _dashboard_assets(url: str, page: str) -> dict[str, httpx.Response]:
    """Every file the dashboard's page loads, and the modules they import, fetched."""
    fetched: dict[str, httpx.Response] = {}
    waiting = PAGE_ASSET.findall(page)
    while waiting:
        path = waiting.pop()
        if path in fetched:
            continue
        fetched[path] = response = httpx.get(url + path, timeout=10.0)
        if path.endswith(".js") and response.status_code == 200:
            folder = path.rsplit("/", 1)[0]
            waiting += [f"{folder}/{name}" for name in JS_IMPORT.findall(response.text)]
    return fetched


def test_gpufleet_serve_runs_from_the_wheel(served: str) -> None:
    health = httpx.get(f"{served}/healthz", timeout=10.0)
    assert health.status_code == 200, health.text
    page = httpx.get(served, timeout=10.0)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assets = _dashboard_assets(served, page.text)
    assert {"/static/dashboard.css", "/static/dashboard.js", "/static/vendor/plotly.min.js",
            "/static/api.js", "/static/workloads.js"} <= set(assets)  # fmt: skip
    for path, response in sorted(assets.items()):
        assert response.status_code == 200, path
        expected = CONTENT_TYPES[Path(path).suffix]
        assert response.headers["content-type"].startswith(expected), (path, response.headers)
        assert response.content, path
