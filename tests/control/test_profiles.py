"""``--profile``: a scheduling profile read from a file, checked whole at start, and the same
profile in the core of every world that takes one (the simulator's scenarios, the embedded
plane, the Kubernetes scheduler)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.backends.sim.run import run_workloads
from gpufleet.cli.main import app
from gpufleet.control.profiles import load_profile
from gpufleet.io.errors import InputError
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.scheduling.profile import Profile
from gpufleet.scheduling.registry import UnknownPluginError
from gpufleet.service.plane_book import ServeOptions
from gpufleet.testing.builders import make_node, make_pod, make_queue
from gpufleet.testing.service import make_harness
from tests.backends.kube.harness import harness

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]

GOOD = """\
name: packed
queueSort: fair-share
scores:
  - {name: gpu-packing, weight: 0.5}
permit: {name: gang-ready-timeout, args: {timeout: 42}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


def test_a_profile_file_reads_as_its_mapping(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, GOOD))
    assert profile.name == "packed"
    assert [(s.name, s.weight) for s in profile.scores] == [("gpu-packing", 0.5)]
    assert profile.permit.args == {"timeout": 42}
    assert profile.post_filter == Profile().post_filter  # left out: the default's


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param(
            "queueSrot: fair-share\n",
            "document 1 (line 1): profile: unknown key 'queueSrot' (did you mean 'queueSort'?)",
            id="unknown-key",
        ),
        pytest.param(
            "# budgets\nadmissionChecks: [gpu-hours]\n",
            "document 1 (line 2): profile 'default': unknown admission check 'gpu-hours'; "
            "known: budget, calendar-window",
            id="unknown-plugin",
        ),
        pytest.param(
            "scores: [{name: gpu-packing, weight: -1}]\n",
            "scores[0].weight: a positive number",
            id="bad-weight",
        ),
        pytest.param(
            "permit: {name: gang-ready-timeout, args: {timeout: soon}}\n",
            "gang-ready-timeout: argument 'timeout' must be a float",
            id="bad-argument",
        ),
        pytest.param(
            "permit: {name: gang-ready-timeout, args: {deadline: 5}}\n",
            "gang-ready-timeout: unknown argument 'deadline'; it takes: timeout",
            id="unknown-argument",
        ),
        pytest.param("name: a\n---\nname: b\n", "found 2 documents", id="two-documents"),
        pytest.param("# nothing\n", "found 0 documents", id="empty"),
        pytest.param("- fair-share\n", "got a list", id="not-a-mapping"),
        pytest.param("name: [unclosed\n", "not valid YAML", id="not-yaml"),
    ],
)
def test_a_bad_profile_is_an_input_error_naming_the_file_and_what(
    tmp_path: Path, text: str, says: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as raised:
        load_profile(path)
    assert str(raised.value).startswith(f"{path}:")
    assert says in str(raised.value)


def test_a_missing_profile_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot open"):
        load_profile(tmp_path / "nope.yaml")


# ---------------------------------------------------------------------- the worlds' cores
def test_the_simulator_builds_its_core_with_the_profile() -> None:
    nodes = [make_node("n1", gpus=1)]
    work = [TimedWorkload(Workload("w", "team", (make_pod("w", gpus=1),), "team"), 0.0, 10.0)]
    queues = {"team": make_queue("team", 1)}
    unknown = Profile(admission_checks=(Profile().queue_sort,))  # a queue sort is no check
    with pytest.raises(UnknownPluginError, match="admission check 'fair-share'"):
        run_workloads(nodes, work, "bestfit", 0, queues=queues, profile=unknown)


def test_the_embedded_plane_builds_its_core_with_the_profile(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, GOOD))
    service = make_harness(tmp_path, options=ServeOptions(profile=profile))
    try:
        assert service.plane.core.profile == profile
        assert service.plane.core.permit.timeout == 42  # type: ignore[attr-defined]
    finally:
        service.close()


# ----------------------------------------------------------------------------- commands
BAD = "admissionChecks: [gpu-hours]\n"


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["scheduler", "--no-leader-elect", "--metrics-port", "0"], id="scheduler"),
        pytest.param(["serve", "--port", "0"], id="serve"),
        pytest.param(
            ["simulate", "--scenario", str(REPO / "examples" / "tenancy")],
            id="simulate-scenario",
        ),
    ],
)
def test_a_command_given_a_bad_profile_says_so_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # serve's database, simulate's results: none may appear
    path = write(tmp_path, BAD)
    result = runner.invoke(app, [*args, "--profile", str(path)])
    assert result.exit_code == 2, result.output
    assert "unknown admission check 'gpu-hours'" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.yaml"]


def test_profile_without_a_scenario_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--profile", str(write(tmp_path, GOOD))])
    assert result.exit_code == 2
    assert "--profile: only with --scenario" in result.stderr


def test_a_scenario_runs_with_a_profile(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cluster = REPO / "examples" / "clusters" / "small.yaml"
    args = ["simulate", "--scenario", str(REPO / "examples" / "tenancy"), "--cluster", str(cluster)]
    result = runner.invoke(app, [*args, "--profile", str(write(tmp_path, GOOD)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"profile:  packed ({tmp_path / 'profile.yaml'})" in result.stdout
    assert (out / "results.json").is_file()


def test_the_kubernetes_scheduler_builds_its_core_with_the_profile(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, GOOD))
    with harness() as h:
        h.scheduler.options.profile = profile  # before the first turn builds the core
        h.scheduler.turn()
        core = h.scheduler.core
        assert core is not None
        assert core.profile == profile
        assert core.permit.timeout == 42  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "path",
    sorted((REPO / "examples" / "profiles").glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_every_example_profile_loads(path: Path) -> None:
    assert load_profile(path).name == path.stem
