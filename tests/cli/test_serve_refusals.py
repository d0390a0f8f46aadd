"""A ``gpufleet serve`` refused at start says why in one line, exits 2 and creates nothing: no
database file (nor its ``-wal``/``-shm``), no state directory. An empty scenario, or GPUs that
are none, are refused as ``place --scenario`` refuses an empty scenario."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.service.protocol import Plane
from gpufleet.testing.service import as_yaml, job_doc, pod_doc
from tests.backends.local.conftest import DGX_EXAMPLE

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]

#: Files each case may name: written into the test's directory.
FILES = {
    "empty.yaml": "",
    "comments.yaml": "# the queues will go here\n",
    "bad-pod.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: 3}\n",
    "pod.yaml": as_yaml(pod_doc("p")),
    "paused-job.yaml": as_yaml(
        {**job_doc("held", 2), "spec": {**job_doc("held", 2)["spec"], "parallelism": 0}}
    ),
    "no-gpus.yaml": "devices: []\n",
    "fake-typo.yaml": "devices: [{product: Tesla T4, cont: 2}]\n",
}
LOCAL = ["--local", "--fake-gpus", str(DGX_EXAMPLE)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--scenario", "empty.yaml"],
            "empty.yaml: expected one of Queue, PriorityClass,",
            id="empty-scenario",
        ),
        pytest.param(
            ["--scenario", "comments.yaml"],
            "comments.yaml: expected one of Queue",
            id="scenario-of-comments",
        ),
        pytest.param(
            ["--scenario", "bad-pod.yaml"],
            "bad-pod.yaml:document 1 (line 1), Pod default/x: spec.containers: expected a list",
            id="bad-workload",
        ),
        pytest.param(
            ["--scenario", "missing.yaml"], "missing.yaml: no such file", id="no-scenario"
        ),
        pytest.param(["--cluster", "missing.yaml"], "missing.yaml: no such file", id="no-cluster"),
        pytest.param(["--cluster", "empty.yaml"], "found no objects", id="empty-cluster"),
        pytest.param(["--rules", "missing.yaml"], "missing.yaml: cannot open", id="no-rules"),
        pytest.param(
            ["--kubeconfig", "missing", "--insecure-unsigned-bindings"],
            "missing: no such file",
            id="no-kubeconfig",
        ),
        pytest.param(
            ["--local", "--fake-gpus", "missing.yaml"], "missing.yaml: cannot read", id="no-fake"
        ),
        pytest.param(
            ["--local", "--fake-gpus", "empty.yaml"],
            "empty.yaml: expected a fake GPU description (node, devices, faults), found no objects",
            id="empty-fake",
        ),
        pytest.param(
            ["--local", "--fake-gpus", "no-gpus.yaml"],
            "no-gpus.yaml: describes no GPUs",
            id="fake-without-gpus",
        ),
        pytest.param(
            ["--local", "--fake-gpus", "fake-typo.yaml"],
            "fake-typo.yaml: devices[0].cont: unknown field; did you mean 'count'?",
            id="fake-typo",
        ),
        pytest.param(
            [*LOCAL, "--run-as", "team-a=no-such-user-here"],
            "no local user 'no-such-user-here'",
            id="no-such-run-as-user",
        ),
        pytest.param(
            [*LOCAL, "--scenario", "empty.yaml"], "empty.yaml: expected one of", id="local-empty"
        ),
        pytest.param(
            [*LOCAL, "--scenario", "pod.yaml"],
            "--local reads only Queue, PriorityClass and IdlePolicy objects",
            id="local-workloads",
        ),
        pytest.param(
            [*LOCAL, "--scenario", "paused-job.yaml"],
            "--local reads only Queue, PriorityClass and IdlePolicy objects",
            id="local-paused-job",
        ),
    ],
)
def test_a_refused_start_creates_no_database(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    served: list[Plane],
    args: list[str],
    message: str,
) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["serve", "--db", "g.db", "--port", "0", *args])
    output = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert message in output
    assert served == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)


@pytest.mark.parametrize("args", [[], LOCAL], ids=["simulated", "local"])
def test_a_good_start_creates_its_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, served: list[Plane], args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["serve", "--db", "g.db", "--port", "0", *args])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "g.db").is_file()
    assert len(served) == 1


def test_serve_and_place_refuse_an_empty_scenario_alike(
    tmp_path: Path, served: list[Plane]
) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    cluster = REPO / "examples" / "clusters" / "small.yaml"
    placed = runner.invoke(app, ["place", "--cluster", str(cluster), "--scenario", str(empty)])
    refused = runner.invoke(
        app, ["serve", "--db", str(tmp_path / "g.db"), "--port", "0", "--scenario", str(empty)]
    )
    assert served == []
    for result in (placed, refused):
        assert result.exit_code == 2
        assert f"{empty}: expected " in result.output
        assert result.output.rstrip().endswith("found no objects")
