"""The commands against a control plane: rendering of schema instances, where the server and
token come from, every command against a fake server (its answers built from schema
instances), the error paths with their exit codes, and at the end every command against the
real app in-process (``gpufleet.testing.service``'s harness, through FastAPI's TestClient),
authorisation failures included.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import typer
import yaml
from fastapi.testclient import TestClient
from rich.console import Console, RenderableType
from typer.testing import CliRunner

from gpufleet.api.schemas import (
    FairShareView,
    Role,
    SubmitResult,
    WorkloadState,
)
from gpufleet.cli.client import ApiClient
from gpufleet.cli.main import app
from gpufleet.cli.remote import split_workload_name, use_http
from gpufleet.cli.remote_config import (
    DEFAULT_SERVER,
    ConfigError,
    read_config_file,
    resolve,
    write_config,
)
from gpufleet.cli.remote_render import (
    Clock,
    Output,
    describe_explanation,
    describe_node,
    describe_queue,
    describe_workload,
    dump,
    format_mib,
    format_resources,
    nodes_table,
    queues_table,
    top_nodes,
    workloads_table,
)
from gpufleet.testing import job_objects as jo
from gpufleet.testing.service import ServiceHarness, as_yaml, job_doc, make_harness, pod_doc
from tests.cli.test_client import (
    FakeServer,
    W,
    answer,
    cluster,
    detail,
    dumped,
    event,
    explanation,
    node,
    pod,
    queue,
    whoami,
    workload,
)

runner = CliRunner()


def render(renderable: RenderableType, width: int = 200) -> str:
    out = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    out.print(renderable)
    return out.export_text()


def lines_with(text: str, needle: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if needle in line]


# -- rendering ------------------------------------------------------------------------------

CLOCK = Clock(now=600.0)


def test_workloads_table_has_kubectl_columns_and_ages() -> None:
    rows = [
        workload("train-1", submitted=60.0),
        workload("serve", gpus=0.5, pods=1, state=WorkloadState.PENDING, started=None),
    ]
    text = render(workloads_table(rows, CLOCK, namespaces=False))
    assert lines_with(text, "NAME") == ["NAME KIND QUEUE STATE PODS GPUS REQUEST AGE"]
    assert lines_with(text, "train-1") == ["train-1 Job team-a Running 2/2 2 2x1 9m00s"]
    assert lines_with(text, "serve") == ["serve Job team-a Pending 0/1 0.5 1x1 9m00s"]


def test_workloads_table_wide_adds_why_it_waits_and_namespaces() -> None:
    waiting = workload(
        "serve",
        namespace="team-b",
        state=WorkloadState.PENDING,
        started=None,
        priority=100,
        priority_class="high",
        waiting_for="quota",
        message="queue team-b is at its quota",
    )
    text = render(workloads_table([waiting], CLOCK, wide=True, namespaces=True))
    assert lines_with(text, "NAMESPACE")[0].startswith("NAMESPACE NAME KIND")
    assert lines_with(text, "serve") == [
        "team-b serve Job team-b Pending 0/2 2 2x1 9m00s team-b 100 (high) - quota "
        "queue team-b is at its quota"
    ]


def test_queues_table_shows_gpu_quota_usage_and_borrowing() -> None:
    text = render(queues_table([queue()]))
    assert lines_with(text, "team-a") == ["team-a org 1 8 10 2 0.25 3 5 - -"]
    wide = render(queues_table([queue()], wide=True), width=240)
    assert "gpu=8 cpu=64 mem=512Gi" in " ".join(wide.split())


def test_nodes_table_shows_allocation_and_wide_labels() -> None:
    text = render(nodes_table([node()], wide=True))
    assert lines_with(text, "node-a") == [
        "node-a A100 1.5/4 38% 8/64 32Gi/256Gi gpufleet.dev/rack=r1 "
        "nvidia.com/gpu=present:NoSchedule"
    ]


def test_top_nodes_has_a_bar_per_node_and_per_device() -> None:
    text = render(top_nodes([node()]))
    assert text.splitlines()[0] == "1 nodes, 1.5/4 GPUs allocated (38%)"
    assert lines_with(text, "node-a") == ["node-a A100 ████░░░░░░ 1.5/4 38% 12% 12%"]
    assert lines_with(text, "gpu0") == ["gpu0 A100 ██████████ 1 100% team-a/p0"]
    assert lines_with(text, "gpu1") == ["gpu1 A100 █████░░░░░ 0.5 shared 50% team-a/p1"]
    assert lines_with(text, "gpu3") == ["gpu3 A100 ░░░░░░░░░░ 0 0% -"]
    assert "gpu0" not in render(top_nodes([node()], devices=False))


def test_describe_workload_shows_gpu_indices_timeline_and_events() -> None:
    shown = detail(
        workload(submitted=60.0, started=90.0, expected_runtime=7200.0),
        pods=[
            pod("train-1-0", gpu_indices=[0, 1], gpus=2.0),
            pod("train-1-1", node="node-b", gpu_indices=[3], gpu_share=0.5, gpus=0.5),
        ],
        events=[
            event(90.0, "Scheduled", "bound to node-a gpus 0,1"),
            event(60.0, "Submitted", "to queue team-a"),
        ],
        min_member=2,
    )
    text = render(describe_workload(shown, CLOCK))
    assert lines_with(text, "Pods:")[0] == "Pods: 2/2 running (gang of 2)"
    assert lines_with(text, "Expected runtime") == ["Expected runtime: 2h00m"]
    assert lines_with(text, "submitted") == ["submitted t=1m00s 9m00s ago"]
    assert lines_with(text, "started") == ["started t=1m30s after waiting 30s"]
    assert lines_with(text, "train-1-0") == ["train-1-0 Running node-a 0,1 - - 2 1 4 16Gi"]
    assert lines_with(text, "train-1-1") == ["train-1-1 Running node-b 3 0.5 - 0.5 1 4 16Gi"]
    events = lines_with(text, "+")
    assert events == [
        "t=1m00s +0s Normal Submitted to queue team-a",
        "t=1m30s +30s Normal Scheduled bound to node-a gpus 0,1",
    ]


def test_describe_pending_workload_shows_its_queue_position() -> None:
    pending = detail(
        workload(state=WorkloadState.PENDING, started=None, waiting_for="quota", message="full")
    )
    text = render(describe_workload(pending, CLOCK, explanation()))
    assert lines_with(text, "Queue position") == ["Queue position: 2"]
    assert lines_with(text, "Estimated start") == ["Estimated start: t=25m00s (in 15m00s)"]
    assert lines_with(text, "started") == ["started - waiting for 9m00s"]
    assert lines_with(text, "<none>") == ["<none>", "<none>"]


def test_describe_finished_workload_shows_its_run_time() -> None:
    done = detail(workload(state=WorkloadState.SUCCEEDED, started=90.0, finished=3690.0))
    text = render(describe_workload(done, Clock(now=4000.0)))
    assert lines_with(text, "succeeded") == ["succeeded t=1h01m after running 1h00m"]


def test_kubernetes_clock_shows_dates() -> None:
    clock = Clock.of(cluster(time=1_700_000_000.0, backend="kubernetes"))
    assert clock.at(1_700_000_000.0).startswith("2023-11-")
    assert clock.age(1_699_999_000.0) == "16m40s"


def test_explain_text_names_the_position_and_estimate() -> None:
    text = render(describe_explanation(explanation(position=1), CLOCK))
    assert lines_with(text, "Position") == ["Position: 1 (next to be tried)"]
    assert "queue team-a is at its nominal quota of 8 GPUs and cannot borrow" in text
    running = render(describe_explanation(explanation(state=WorkloadState.RUNNING), CLOCK))
    assert "Position" not in running


def test_explain_of_a_workload_that_can_never_fit_says_never() -> None:
    """Not "next to be tried" with an estimate (issue 29, item 14; Kueue: Inadmissible)."""
    shown = explanation(position=1, never=True, estimated_start=None, waiting_for="capacity")
    text = render(describe_explanation(shown, CLOCK))
    assert lines_with(text, "Position") == [
        "Position: 1 (inadmissible: it can never fit as the cluster stands)"
    ]
    assert lines_with(text, "Estimated start") == ["Estimated start: never"]


def test_describe_queue_shows_decayed_usage_share_and_factor() -> None:
    fair = FairShareView(
        usage_half_life=7 * 86400.0, usage_gpu_hours=120.5, share=0.25, ratio=2.0, factor=0.25,
        users={"alice": 100.0, "team-a": 20.5},
    )  # fmt: skip
    text = render(describe_queue(queue(fair_share=fair)))
    flat = [" ".join(line.split()) for line in text.splitlines()]
    for needle in [
        "Name: team-a", "Parent: org", "Nominal: gpu=8 cpu=64 mem=512Gi", "Share now: 0.25",
        "Usage half-life: 7d00h", "Decayed usage: 120.50 GPU-hours",
        "Fair share: 0.250 of its siblings'", "Usage / share: 2.000", "Fair-share factor: 0.250",
        "alice 100.00", "team-a 20.50",
    ]:  # fmt: skip
        assert needle in flat, (needle, flat)
    unshared = FairShareView(usage_half_life=3600.0, usage_gpu_hours=1.0, share=0.0, ratio=None,
                             factor=0.0)  # fmt: skip
    shown = " ".join(render(describe_queue(queue(fair_share=unshared))).split())
    assert "Usage / share: - (used some, has no share)" in shown
    off = " ".join(render(describe_queue(queue())).split())
    assert "Fair share: off (no fairSharing in the scheduling profile)" in off


def test_describe_node_lists_devices() -> None:
    text = render(describe_node(node()))
    assert lines_with(text, "GPUs:") == ["GPUs: 1.5/4 allocated"]
    assert lines_with(text, "team-a/p1") == ["1 A100 80Gi █████░░░░░ 0.5 shared team-a/p1"]


WITHDRAWN = node(allocations=(1.0, 1.0, 1.0, 0.0), withdrawn=(3,))


@pytest.mark.parametrize(
    ("shown", "pattern", "lines"),
    [
        pytest.param(nodes_table([WITHDRAWN]), "node-a",
                     ["node-a A100 3/3 of 4 100% 8/64 32Gi/256Gi"], id="get-nodes"),
        pytest.param(top_nodes([WITHDRAWN]), "node-a",
                     ["node-a A100 ██████████ 3/3 of 4 100% 12% 12%"], id="top-nodes"),
        pytest.param(top_nodes([WITHDRAWN]), "allocated",
                     ["1 nodes, 3/3 GPUs allocated (100%); 1 GPU(s) withdrawn as unhealthy"],
                     id="top-nodes-summary"),
        pytest.param(top_nodes([WITHDRAWN]), "gpu3", ["gpu3 A100 ░░░░░░░░░░ 0 withdrawn 0% -"],
                     id="top-nodes-device"),
        pytest.param(describe_node(WITHDRAWN), "GPU", ["GPU model: A100", "GPUs: 3/3 allocated",
                     "GPU capacity: 4, allocatable 3 (GPU 3 withdrawn: unhealthy)",
                     "GPU MODEL MEMORY ALLOCATION GPUS PODS"], id="describe-node"),
        pytest.param(describe_node(WITHDRAWN), "team-a/p2",
                     ["2 A100 80Gi ██████████ 1 team-a/p2"], id="describe-node-device"),
        pytest.param(describe_node(WITHDRAWN), "0 withdrawn",
                     ["3 A100 80Gi ░░░░░░░░░░ 0 withdrawn -"], id="describe-node-withdrawn"),
        pytest.param(describe_node(node()), "GPU capacity", ["GPU capacity: 4, allocatable 4"],
                     id="describe-healthy-node"),
    ],
)  # fmt: skip
def test_a_withdrawn_gpu_is_capacity_not_allocatable(
    shown: RenderableType, pattern: str, lines: list[str]
) -> None:
    """A GPU withdrawn as unhealthy is no free room: every node view shows allocated of
    allocatable, and the capacity beside it, as ``kubectl describe node`` does (issue 29,
    item 15: ``GPUS 0/8`` hid it)."""
    assert lines_with(render(shown), pattern) == lines


@pytest.mark.parametrize(
    ("mib", "text"),
    [
        pytest.param(512, "512Mi", id="mebi"),
        pytest.param(8192, "8Gi", id="gibi"),
        pytest.param(1536, "1.5Gi", id="fraction"),
        pytest.param(2 * 1024 * 1024, "2Ti", id="tebi"),
    ],
)
def test_memory_is_written_as_kubectl_quantities(mib: int, text: str) -> None:
    assert format_mib(mib) == text


def test_resources_put_the_gpu_first() -> None:
    values = {"cpu": 4.0, "nvidia.com/gpu.A100": 2.0, "nvidia.com/gpu": 4.0, "memory": 1024.0}
    assert format_resources(values) == "gpu=4 A100=2 cpu=4 mem=1Gi"
    assert format_resources({}) == "-"


@pytest.mark.parametrize("output", [Output.JSON, Output.YAML])
def test_json_and_yaml_are_the_schema_dumps(output: Output) -> None:
    models = [workload(), workload("b")]
    load = json.loads if output is Output.JSON else yaml.safe_load
    assert load(dump(models, output)) == dumped(models)
    assert load(dump(models[0], output)) == dumped(models[0])


@pytest.mark.parametrize(
    ("text", "namespace", "kind", "expected"),
    [
        pytest.param("train", None, None, (None, "train", None), id="bare"),
        pytest.param("train", "ns", None, ("ns", "train", None), id="with-n"),
        pytest.param("ns/train", None, None, ("ns", "train", None), id="slashed"),
        pytest.param("ns/train", "ns", None, ("ns", "train", None), id="slashed-and-same-n"),
        pytest.param("job/train", None, None, (None, "train", "Job"), id="kind-first"),
        pytest.param("PyTorchJob/train", "ns", None, ("ns", "train", "PyTorchJob"), id="kind-case"),
        pytest.param("ns/job/train", None, None, ("ns", "train", "Job"), id="namespace-kind-name"),
        pytest.param("ns/train", None, "rayjob", ("ns", "train", "RayJob"), id="kind-option"),
        pytest.param("job/train", None, "Job", (None, "train", "Job"), id="kind-both-agree"),
    ],
)
def test_workload_names(
    text: str, namespace: str | None, kind: str | None, expected: tuple[str, str, str | None]
) -> None:
    assert split_workload_name(text, namespace, kind) == expected


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        pytest.param("a/b/c/d", None, "expected NAME, NAMESPACE/NAME, KIND/NAME", id="four-parts"),
        pytest.param("ns/cronjob/x", None, "unknown workload kind 'cronjob'", id="unknown-kind"),
        pytest.param("job/x", "PyTorchJob", "names kind Job, but --kind says", id="kinds-differ"),
    ],
)
def test_bad_workload_names(
    text: str, kind: str | None, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit):
        split_workload_name(text, None, kind)
    assert message in capsys.readouterr().err


# -- configuration --------------------------------------------------------------------------

CONFIG_CASES = [
    # id, flags (server, token), environment, config file, expected (server, token, from)
    ("defaults", (None, None), {}, None, (DEFAULT_SERVER, None, "default")),
    ("file", (None, None), {}, "server: http://file:1\ntoken: ft\n",
     ("http://file:1", "ft", "FILE")),
    ("env-over-file", (None, None),
     {"GPUFLEET_SERVER": "http://env:2", "GPUFLEET_TOKEN": "et"},
     "server: http://file:1\ntoken: ft\n", ("http://env:2", "et", "GPUFLEET_SERVER")),
    ("flags-over-env", ("http://flag:3", "xt"),
     {"GPUFLEET_SERVER": "http://env:2", "GPUFLEET_TOKEN": "et"},
     "server: http://file:1\n", ("http://flag:3", "xt", "--server")),
    ("mixed: flag server, file token", ("http://flag:3", None), {}, "token: ft\n",
     ("http://flag:3", "ft", "--server")),
    ("empty env counts as unset", (None, None), {"GPUFLEET_SERVER": "", "GPUFLEET_TOKEN": ""},
     "server: http://file:1\ntoken: ft\n", ("http://file:1", "ft", "FILE")),
    ("host:port gets http://", ("localhost:9000/", None), {}, None,
     ("http://localhost:9000", None, "--server")),
    ("flags skip a broken file", ("http://flag:3", "xt"), {}, "server: [oops\n",
     ("http://flag:3", "xt", "--server")),
    ("empty file", (None, None), {}, "", (DEFAULT_SERVER, None, "default")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "env", "file", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CONFIG_CASES],
)
def test_config_precedence(
    tmp_path: Path,
    flags: tuple[str | None, str | None],
    env: dict[str, str],
    file: str | None,
    expected: tuple[str, str | None, str],
) -> None:
    path = tmp_path / "config.yaml"
    if file is not None:
        path.write_text(file)
    config = resolve(*flags, env={**env, "GPUFLEET_CONFIG": str(path)})
    server, token, server_from = expected
    assert (config.server, config.token) == (server, token)
    assert config.server_from == server_from.replace("FILE", str(path))


@pytest.mark.parametrize(
    ("server", "env", "file", "ca_file"),
    [
        ("https://s:1", {}, "ca_file: /f/ca.pem\n", "/f/ca.pem"),
        ("https://s:1", {"GPUFLEET_CA_FILE": "/e/ca.pem"}, "ca_file: /f/ca.pem\n", "/e/ca.pem"),
        ("https://s:1", {}, None, None),
        (None, {}, "server: https://s:1\nca_file: /f/ca.pem\n", "/f/ca.pem"),
        ("http://s:1", {}, "server: [oops\n", None),
    ],
    ids=["file", "env-over-file", "none", "file-server-and-ca", "http-skips-a-broken-file"],
)
def test_ca_file_precedence(
    tmp_path: Path, server: str | None, env: dict[str, str], file: str | None, ca_file: str | None
) -> None:
    path = tmp_path / "config.yaml"
    if file is not None:
        path.write_text(file)
    config = resolve(server, "t", env={**env, "GPUFLEET_CONFIG": str(path)})
    assert config.ca_file == ca_file


def test_config_file_location_defaults_to_the_home_directory(tmp_path: Path) -> None:
    path = tmp_path / ".config" / "gpufleet" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("server: http://home:1\n")
    assert resolve(env={"HOME": str(tmp_path)}).server == "http://home:1"
    xdg = tmp_path / "xdg" / "gpufleet" / "config.yaml"
    xdg.parent.mkdir(parents=True)
    xdg.write_text("server: http://xdg:1\n")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert resolve(env=env).server == "http://xdg:1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("server: [oops\n", "not valid YAML at line 2", id="bad-yaml"),
        pytest.param("- a\n- b\n",
                     "expected a mapping with the keys server, token and ca_file, got a list",
                     id="not-a-mapping"),
        pytest.param("sever: http://x\n", "unknown key 'sever'", id="typo"),
        pytest.param("token: 12\n", "token must be a string, got int", id="number"),
        pytest.param("server: 'ftp://x'\n", "server: 'ftp://x' is not a server address",
                     id="bad-address"),
    ],
)  # fmt: skip
def test_malformed_config_files_name_the_path_and_the_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_config_file(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in str(caught.value)


def test_written_config_is_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "config.yaml"
    path.parent.mkdir()
    path.write_text("old")
    path.chmod(0o644)
    write_config(path, "http://s:1", "secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_config_file(path).token == "secret"


# -- commands against a fake server ---------------------------------------------------------


@pytest.fixture
def fake(env: Path) -> Iterator[FakeServer]:
    server = FakeServer(
        {
            ("GET", "/api/v1/whoami"): answer(dumped(whoami())),
            ("GET", "/api/v1/cluster"): answer(dumped(cluster())),
            ("GET", W): answer(dumped([workload(), workload("serve", gpus=0.5)])),
            ("GET", f"{W}/team-a/train-1"): answer(dumped(detail(pods=[pod()]))),
            ("GET", "/api/v1/queues"): answer(dumped([queue()])),
            ("GET", "/api/v1/queues/team-a"): answer(dumped(queue())),
            ("GET", "/api/v1/nodes"): answer(dumped([node(), node("node-b")])),
            ("GET", "/api/v1/nodes/node-a"): answer(dumped(node())),
            ("GET", f"{W}/team-a/train-1/explain"): answer(dumped(explanation())),
            ("DELETE", f"{W}/team-a/train-1"): answer(
                dumped(workload(state=WorkloadState.CANCELLED))
            ),
            **{
                ("POST", f"{W}/team-a/train-1/{action}"): answer(
                    dumped(workload(state=WorkloadState.PENDING))
                )
                for action in ("ungate", "resume", "suspend")
            },
            ("POST", W): answer(
                dumped(SubmitResult(accepted=[workload(state=WorkloadState.PENDING)])), 201
            ),
        }
    )
    with use_http(lambda _: httpx.Client(transport=server.transport())):
        yield server


def cli(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


COMMAND_CASES = [
    # id, arguments, what stdout must hold
    (
        "get-workloads",
        ["get", "workloads"],
        ["train-1 Job team-a Running 2/2 2 2x1 9m00s", "serve"],
    ),
    ("get-wl-alias-wide", ["get", "wl", "-o", "wide"], ["TENANT PRIORITY STARTED"]),
    ("get-one-workload", ["get", "workload", "team-a/train-1"], ["train-1 Job team-a Running"]),
    ("get-queues", ["get", "queues"], ["team-a org 1 8 10 2 0.25 3 5 - -"]),
    ("get-one-queue", ["get", "queue", "team-a"], ["team-a org"]),
    ("get-nodes", ["get", "nodes"], ["node-a A100 1.5/4", "node-b A100"]),
    ("get-one-node", ["get", "node", "node-a"], ["node-a A100 1.5/4"]),
    ("describe", ["describe", "workload", "train-1"], ["Namespace: team-a", "train-1-0 Running"]),
    ("describe-node", ["describe", "node", "node-a"], ["GPU model: A100"]),
    ("describe-queue", ["describe", "queue", "team-a"], ["Parent: org", "Fair share: off"]),
    ("explain", ["explain", "train-1", "-n", "team-a"], ["Position: 2", "Waiting for: quota"]),
    ("delete", ["delete", "wl", "team-a/train-1"], ["workload/team-a/train-1 (Job) cancelled"]),
    ("ungate", ["ungate", "team-a/train-1"], ["workload/team-a/train-1 (Job) ungated"]),
    ("resume", ["resume", "train-1", "-n", "team-a"], ["workload/team-a/train-1 (Job) resumed"]),
    ("suspend", ["suspend", "team-a/train-1"], ["workload/team-a/train-1 (Job) suspended"]),
    ("top", ["top", "nodes", "--gpus"], ["2 nodes, 3/8 GPUs allocated (38%)", "gpu1 A100"]),
    ("whoami", ["whoami"], ["Tenant: team-a", "Role: tenant"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "expected"), [pytest.param(*case[1:], id=case[0]) for case in COMMAND_CASES]
)
def test_commands_print_what_the_server_answers(
    fake: FakeServer, args: list[str], expected: list[str]
) -> None:
    code, out, err = cli(*args, "--token", "t0k")
    assert (code, err) == (0, "")
    flat = "\n".join(" ".join(line.split()) for line in out.splitlines())
    for needle in expected:
        assert needle in flat
    assert all(r.headers["authorization"] == "Bearer t0k" for r in fake.requests)


@pytest.mark.parametrize(
    ("args", "params"),
    [
        pytest.param(["-n", "team-b"], {"namespace": "team-b"}, id="namespace"),
        pytest.param(["-A"], {}, id="all-namespaces"),
        pytest.param([], {}, id="server-decides"),
        pytest.param(["--state", "pending", "--queue", "q"], {"state": "Pending", "queue": "q"},
                     id="filters"),
    ],
)  # fmt: skip
def test_get_workloads_passes_the_filters(
    fake: FakeServer, args: list[str], params: dict[str, str]
) -> None:
    code, _, err = cli("get", "workloads", *args)
    assert (code, err) == (0, "")
    (listing,) = [r for r in fake.requests if r.url.path == W]
    assert dict(listing.url.params) == params


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_get_json_and_yaml_print_schema_dumps(fake: FakeServer, output: str) -> None:
    code, out, _ = cli("get", "nodes", "-o", output)
    assert code == 0
    load = json.loads if output == "json" else yaml.safe_load
    assert load(out) == dumped([node(), node("node-b")])
    code, out, _ = cli("get", "workload", "team-a/train-1", "-o", output)
    assert load(out) == dumped(detail(pods=[pod()]))


def test_submit_reads_files_and_stdin_with_their_content_type(
    fake: FakeServer, tmp_path: Path
) -> None:
    manifest = tmp_path / "job.json"
    manifest.write_text('{"kind": "Pod"}')
    code, out, err = cli("submit", "-f", str(manifest), "-f", "-", input="kind: Job\n")
    assert (code, err) == (0, "")
    assert out.count("workload/team-a/train-1 accepted: Job, 2 pod(s), GPU request 2x1, queue") == 2
    sent = [(r.headers["content-type"], r.content) for r in fake.requests if r.method == "POST"]
    assert sent == [
        ("application/json", b'{"kind": "Pod"}'),
        ("application/yaml", b"kind: Job\n"),
    ]


def test_submit_a_directory_sends_its_manifests_in_order(fake: FakeServer, tmp_path: Path) -> None:
    for name in ("b.yaml", "a.yml", "notes.txt"):
        (tmp_path / name).write_text(f"# {name}\nkind: Pod\n")
    code, _, _ = cli("submit", "-f", str(tmp_path))
    assert code == 0
    assert [r.content.split(b"\n")[0] for r in fake.requests] == [b"# a.yml", b"# b.yaml"]


def test_a_bare_name_is_looked_up_when_the_token_has_several_namespaces(
    fake: FakeServer,
) -> None:
    fake.routes[("GET", "/api/v1/whoami")] = answer(
        dumped(whoami("ops", Role.ADMIN, queues=[], namespaces=[]))
    )
    code, _, _ = cli("describe", "workload", "serve")
    assert code == 1  # found in team-a, but the fake has no detail for it
    fake.routes[("GET", W)] = answer(dumped([workload(), workload(namespace="team-b")]))
    code, _, err = cli("explain", "train-1")
    assert code == 2
    assert "several namespaces (team-a/train-1, team-b/train-1); give -n" in err
    code, _, err = cli("explain", "nothere")
    assert code == 1
    assert "workload 'nothere' not found" in err


ERROR_CASES = [
    # id, status, body, arguments, exit code, stderr must hold
    ("401", 401, {"error": "unauthorized", "message": "unknown token"}, ["whoami"], 1,
     "unknown token (401 unauthorized) — the token from --token was refused; give one with "
     "--token, GPUFLEET_TOKEN or `gpufleet login`"),
    ("403", 403, {"error": "forbidden", "message": "tenant team-a may not submit to queue b"},
     ["submit", "-f", "-"], 1, "tenant team-a may not submit to queue b (403 forbidden)"),
    ("404", 404, {"error": "not_found", "message": "workload team-a/x not found"},
     ["describe", "workload", "team-a/x"], 1, "workload team-a/x not found (404 not_found)"),
    ("413", 413, {"error": "too_large", "message": "body over 1 MiB"}, ["submit", "-f", "-"], 2,
     "body over 1 MiB (413 too_large)"),
    ("422", 422, {"error": "invalid", "message": "not a quantity: 'lots' [spec]",
                  "field": "spec.containers[0].resources.limits.cpu"},
     ["submit", "-f", "-"], 2,
     "not a quantity: 'lots' [spec] (422 invalid, field spec.containers[0].resources.limits.cpu)"),
    ("500", 500, {"error": "internal", "message": "boom"}, ["get", "nodes"], 1,
     "boom (500 internal)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "args", "code", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in ERROR_CASES],
)
def test_server_errors_are_one_clear_line_with_the_exit_code(
    env: Path, status: int, body: dict[str, str], args: list[str], code: int, expected: str
) -> None:
    server = FakeServer(fallback=answer(body, status))
    with use_http(lambda _: httpx.Client(transport=server.transport())):
        result = runner.invoke(app, [*args, "--token", "t"], input="kind: Pod\n")
    assert result.exit_code == code
    assert result.stdout == ""
    assert result.stderr == f"error: {expected}\n"


def test_401_without_a_token_says_how_to_give_one(env: Path) -> None:
    server = FakeServer(fallback=answer({"error": "unauthorized", "message": "need a token"}, 401))
    with use_http(lambda _: httpx.Client(transport=server.transport())):
        code, _, err = cli("get", "nodes")
    assert code == 1
    assert "(401 unauthorized) — no token given; give one with --token" in err


def test_an_unreachable_server_is_exit_1_naming_the_address(env: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    with use_http(lambda _: httpx.Client(transport=httpx.MockTransport(refuse))):
        code, _, err = cli("top", "nodes", "--server", "http://10.0.0.9:8080")
    assert code == 1
    assert err.startswith("error: cannot reach the gpufleet server at http://10.0.0.9:8080 (")


BAD_INPUT_CASES = [
    ("unknown-resource", ["get", "pods"], "unknown resource type 'pods' (expected workloads, "
     "queues, nodes or priorityclasses)"),
    ("describe-pod", ["describe", "pod", "q"], "unknown resource type 'pod' (expected "
     "workloads, nodes or queues)"),
    ("top-workloads", ["top", "workloads"], "unknown resource type 'workloads' (expected nodes)"),
    ("all-and-name", ["get", "workloads", "x", "-A"], "-A/--all-namespaces lists everything"),
    ("bad-name", ["explain", "a/b/c/d"], "'a/b/c/d': expected NAME, NAMESPACE/NAME, KIND/NAME"),
    ("bad-kind", ["explain", "a/b/c"], "unknown workload kind 'b' (expected one of Pod, Job,"),
    ("namespace-mismatch", ["delete", "wl", "a/x", "-n", "b"],
     "'a/x' names namespace 'a', but -n says 'b'"),
    ("missing-file", ["submit", "-f", "/nonexistent.yaml"], "/nonexistent.yaml: no such file"),
    ("bad-server", ["get", "nodes", "--server", "ftp://x"],
     "--server: 'ftp://x' is not a server address"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "expected"), [pytest.param(*case[1:], id=case[0]) for case in BAD_INPUT_CASES]
)
def test_bad_input_is_exit_2_before_any_request(
    fake: FakeServer, args: list[str], expected: str
) -> None:
    code, _, err = cli(*args)
    assert code == 2
    assert err.startswith(f"error: {expected}")
    assert len(err.splitlines()) == 1
    assert not [r for r in fake.requests if r.url.path != "/api/v1/whoami"]


def test_empty_stdin_is_bad_input(fake: FakeServer) -> None:
    code, _, err = cli("submit", "-f", "-", input="  \n")
    assert (code, err) == (2, "error: stdin: empty, nothing to submit\n")


def test_a_malformed_config_file_is_bad_input(env: Path, fake: FakeServer) -> None:
    env.write_text("server: [\n")
    code, _, err = cli("get", "nodes")
    assert code == 2
    assert err.startswith(f"error: {env}: not valid YAML at line 2")


def test_login_verifies_and_writes_a_private_config(env: Path, fake: FakeServer) -> None:
    code, out, err = cli("login", "--server", "gpufleet.test:8080", "--token", "t0k")
    assert (code, err) == (0, "")
    assert (
        out.strip() == f"logged in to http://gpufleet.test:8080 as team-a (tenant); saved to {env}"
    )
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert yaml.safe_load(env.read_text()) == {
        "server": "http://gpufleet.test:8080",
        "token": "t0k",
    }
    code, _, _ = cli("whoami")
    assert code == 0
    assert fake.requests[-1].headers["authorization"] == "Bearer t0k"


def test_login_with_a_refused_token_writes_nothing(env: Path, fake: FakeServer) -> None:
    fake.routes[("GET", "/api/v1/whoami")] = answer(
        {"error": "unauthorized", "message": "unknown token"}, 401
    )
    code, _, _ = cli("login", "--server", "http://s:1", "--token", "bad")
    assert code == 1
    assert not env.exists()
    code, _, _ = cli("login", "--server", "http://s:1", "--token", "bad", "--no-verify")
    assert code == 0
    assert env.exists()


# -- against the real app, in-process -------------------------------------------------------


@pytest.fixture
def served(env: Path, tmp_path: Path) -> Iterator[ServiceHarness]:
    """The real app over a control plane of 4 nodes x 4 A100 (16 GPUs), queues team-a and
    team-b; the commands reach it in-process. Its clock moves only with ``advance``."""
    harness = make_harness(tmp_path)
    client = TestClient(harness.app)
    with use_http(lambda _: client):
        yield harness
    client.close()
    harness.close()


def as_(harness: ServiceHarness, who: str, *args: str, input: str | None = None) -> Result:
    token = harness.tokens.get(who, who)
    result = runner.invoke(app, [*args, "--token", token], input=input)
    return Result(result.exit_code, result.stdout, result.stderr)


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def rows(self, needle: str) -> list[str]:
        return lines_with(self.out, needle)


def _busy(harness: ServiceHarness) -> None:
    """team-a runs 13 GPUs of the 16 (a 2x2-GPU job ``train``, a 1-GPU pod ``one`` and two more
    4-GPU jobs), 5 of them borrowed from team-b's quota; team-b's 4-GPU ``late`` then waits."""
    jobs = [job_doc("train", 2, 2), pod_doc("one", 1)]
    jobs += [job_doc(f"fill-{i}", 2, 2) for i in range(2)]
    result = as_(harness, "team-a", "submit", "-f", "-", input=as_yaml(*jobs))
    assert result.code == 0, result.err
    harness.advance(60)
    result = as_(harness, "team-b", "submit", "-f", "-", input=as_yaml(job_doc("late", 2, 2)))
    assert result.code == 0, result.err
    harness.advance(60)


def test_app_submit_prints_what_was_accepted(served: ServiceHarness, tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(as_yaml(job_doc("train", 2, 2), pod_doc("one", 1)))
    result = as_(served, "team-a", "submit", "-f", str(manifest))
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [
        "workload/team-a/train accepted: Job, 2 pod(s), GPU request 2x2, queue team-a, Pending",
        "workload/team-a/one accepted: Pod, 1 pod(s), GPU request 1, queue team-a, Pending",
    ]
    as_json = tmp_path / "pod.json"
    as_json.write_text(json.dumps(pod_doc("from-json", 1)))
    assert as_(served, "team-a", "submit", "-f", str(as_json)).code == 0
    dry = as_(served, "team-a", "submit", "--dry-run", "-f", "-", input=as_yaml(pod_doc("d")))
    assert "workload/team-a/d valid (dry run)" in dry.out
    listed = as_(served, "team-a", "get", "workloads", "-o", "json")
    assert [w["name"] for w in json.loads(listed.out)] == ["train", "one", "from-json"]


@pytest.mark.parametrize(
    ("documents", "error"),
    [
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: 3}\n",
            "FILE:document 1 (line 1), Pod team-a/x: spec.containers: expected a list",
            id="bad-field",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec: {containers: [{name: c, "
            "image: i}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {}\n",
            "FILE:document 2 (line 6), Pod (unnamed): metadata.name: required",
            id="second-document",
        ),
        pytest.param("apiVersion: v1\nkind: DaemonSet\n", "FILE:document 1", id="not-read"),
    ],
)
def test_app_submit_errors_name_the_file_given(
    served: ServiceHarness, tmp_path: Path, documents: str, error: str
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(documents)
    result = as_(served, "team-a", "submit", "-f", str(manifest))
    assert result.code == 2, result.err
    message = " ".join(result.err.split())
    assert error.replace("FILE", str(manifest)) in message
    assert "request" not in message


def test_app_get_workloads_queues_and_nodes(served: ServiceHarness) -> None:
    _busy(served)
    mine = as_(served, "team-a", "get", "workloads")
    assert mine.rows("train") == ["train Job team-a Running 2/2 4 2x2 2m00s"]
    assert "late" not in mine.out  # team-b's
    everyone = as_(served, "admin", "get", "workloads", "-A", "-o", "wide")
    assert everyone.rows("late")[0].startswith(
        "team-b late Job team-b Pending 0/2 0 2x2 1m00s team-b"
    )
    pending = as_(served, "admin", "get", "workloads", "--state", "pending", "-o", "yaml")
    assert [w["key"] for w in yaml.safe_load(pending.out)] == ["team-b/Job/late"]
    queues = as_(served, "team-a", "get", "queues")
    assert queues.rows("team-a") == ["team-a - 1 8 13 5 0.31 0 4 - -"]
    assert queues.rows("team-b") == ["team-b - 1 8 - - 0.00 1 0 - -"]
    nodes = as_(served, "team-a", "get", "nodes")
    assert len(nodes.rows(" A100 ")) == 4
    one = as_(served, "team-a", "get", "node", "a100-0", "-o", "json")
    assert json.loads(one.out)["name"] == "a100-0"


def test_app_describe_shows_the_devices_the_node_reports(served: ServiceHarness) -> None:
    _busy(served)
    result = as_(served, "team-a", "describe", "workload", "train")
    assert result.code == 0, result.err
    assert result.rows("Pods:")[0] == "Pods: 2/2 running (gang of 2)"
    assert result.rows("Scheduled")  # the events
    nodes = {n.name: n for n in ApiClient("http://x", served.tokens["admin"],
                                          http=TestClient(served.app)).list_nodes()}  # fmt: skip
    for row in result.rows(" Running a100-"):
        _, _, node_name, indices = row.split()[:4]
        for index in indices.split(","):
            assert "team-a/train" in nodes[node_name].devices[int(index)].pods, row


def test_app_describe_and_explain_a_waiting_workload(served: ServiceHarness) -> None:
    _busy(served)
    described = as_(served, "team-b", "describe", "workload", "late")
    assert described.code == 0, described.err
    assert described.rows("Queue position") == ["Queue position: 1"]
    assert described.rows("started") == ["started - waiting for 1m00s"]
    explained = as_(served, "team-b", "explain", "team-b/late")
    assert explained.code == 0, explained.err
    assert explained.rows("Position") == ["Position: 1 (next to be tried)"]
    assert explained.rows("Waiting for") == ["Waiting for: quota"]
    assert "waiting for quota: queue team-b" in explained.out
    by_admin = as_(served, "admin", "explain", "late")  # found by name among all namespaces
    assert by_admin.code == 0, by_admin.err


def test_app_delete_frees_the_gpus(served: ServiceHarness) -> None:
    _busy(served)
    result = as_(served, "team-a", "delete", "workload", "one", "team-a/fill-0")
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [
        "workload/team-a/one (Pod) cancelled",
        "workload/team-a/fill-0 (Job) cancelled",
    ]
    served.advance(1)
    top = as_(served, "admin", "top", "nodes")
    assert top.out.startswith("4 nodes, 12/16 GPUs allocated (75%)")  # with team-b's late
    late = as_(served, "team-b", "get", "workload", "late")
    assert late.rows("late")[0].startswith("late Job team-b Running 2/2")


@pytest.mark.parametrize(
    ("args", "body"),
    [
        pytest.param([], None, id="all-gates"),
        pytest.param(["--gate", "a", "--gate", "b"], {"gates": ["a", "b"]}, id="named-gates"),
    ],
)
def test_ungate_sends_the_gates_named(
    fake: FakeServer, args: list[str], body: dict[str, list[str]] | None
) -> None:
    code, _, err = cli("ungate", "team-a/train-1", *args)
    assert (code, err) == (0, "")
    (sent,) = [r for r in fake.requests if r.method == "POST"]
    assert (json.loads(sent.content) if sent.content else None) == body


def test_app_ungate_suspend_and_resume_a_waiting_job(served: ServiceHarness) -> None:
    gated = job_doc("held", 1, gates=["example.com/a", "example.com/b"])
    assert as_(served, "team-a", "submit", "-f", "-", input=as_yaml(gated)).code == 0
    served.advance(1)
    assert as_(served, "team-a", "explain", "held").rows("Waiting for") == [
        "Waiting for: SchedulingGated"
    ]
    some = as_(served, "team-a", "ungate", "held", "--gate", "example.com/a")
    assert (some.code, some.out) == (0, "workload/team-a/held (Job) ungated\n")
    suspended = as_(served, "team-a", "suspend", "team-a/held")
    assert (suspended.code, suspended.err) == (0, "")
    assert as_(served, "team-a", "ungate", "held").code == 0
    served.advance(1)
    assert as_(served, "team-a", "explain", "held").rows("Waiting for") == [
        "Waiting for: Suspended"
    ]
    again = as_(served, "team-a", "ungate", "held")
    assert again.code == 1
    assert "has no scheduling gates (409 conflict)" in again.err
    assert as_(served, "team-b", "resume", "team-a/held").code == 1  # not found
    assert as_(served, "team-a", "resume", "held").out == "workload/team-a/held (Job) resumed\n"
    served.advance(1)
    assert (
        as_(served, "team-a", "get", "workload", "held")
        .rows("held")[0]
        .startswith("held Job team-a Running")
    )


@pytest.mark.parametrize(
    ("flags", "device_rows"), [([], 0), (["--gpus"], 16)], ids=["a-line-per-node", "gpus"]
)
def test_app_top_nodes_shows_a_line_per_node_and_with_gpus_every_device(
    served: ServiceHarness, flags: list[str], device_rows: int
) -> None:
    _busy(served)
    top = as_(served, "team-a", "top", "nodes", *flags)
    assert top.code == 0, top.err
    assert top.out.startswith("4 nodes, 13/16 GPUs allocated (81%)")
    assert len([r for r in top.out.splitlines() if r.startswith("a100-")]) == 4
    devices = top.rows("  gpu")
    assert len(devices) == device_rows
    if device_rows:
        assert sum("team-a/Job/train" in row for row in devices) == 4


def test_app_names_a_workload_by_kind_where_kinds_share_its_name(served: ServiceHarness) -> None:
    both = as_yaml(job_doc("sweep", 1, 1), jo.pytorch_job("sweep", 1))
    assert as_(served, "team-a", "submit", "-f", "-", input=both).code == 0
    ambiguous = as_(served, "team-a", "describe", "workload", "team-a/sweep")
    assert ambiguous.code == 1
    assert "workload team-a/sweep is ambiguous: it names a Job and a PyTorchJob" in ambiguous.err
    for args in (["job/sweep"], ["team-a/job/sweep"], ["sweep", "--kind", "Job"]):
        described = as_(served, "team-a", "describe", "workload", *args)
        assert described.code == 0, (args, described.err)
        assert described.rows("Kind:") == ["Kind: Job"], args
    assert as_(served, "team-a", "explain", "pytorchjob/sweep").code == 0
    deleted = as_(served, "team-a", "delete", "workload", "pytorchjob/sweep")
    assert deleted.out.splitlines() == ["workload/team-a/sweep (PyTorchJob) cancelled"]
    listed = as_(served, "team-a", "get", "workloads")
    assert [row.split()[:2] for row in listed.rows("sweep")] == [
        ["sweep", "Job"],
        ["sweep", "PyTorchJob"],
    ]


def test_app_whoami_and_login(served: ServiceHarness, env: Path) -> None:
    me = as_(served, "team-b", "whoami")
    assert me.rows("Tenant") == ["Tenant: team-b"]
    assert me.rows("Namespaces") == ["Namespaces: team-b"]
    login = runner.invoke(app, ["login", "--server", "http://cp:8080", "--token",
                                served.tokens["team-a"]])  # fmt: skip
    assert login.exit_code == 0, login.stderr
    assert "as team-a (tenant)" in login.stdout
    again = runner.invoke(app, ["whoami"])  # server and token from the config file
    assert lines_with(again.stdout, "Server") == ["Server: http://cp:8080"]


AUTH_CASES = [
    # id, who, arguments, exit code, stderr must hold
    ("no-token", "", ["get", "workloads"], 1,
     "authentication required: send Authorization: Bearer <token> (401 unauthorized) — no "
     "token given"),
    ("unknown-token", "gf_nope", ["top", "nodes"], 1,
     "another database, or another server's, is unknown here) (401 unauthorized) — the token "
     "from --token was refused"),
    ("other-tenant-describe", "team-b", ["describe", "workload", "team-a/train"], 1,
     "workload team-a/train not found (404 not_found)"),
    ("other-tenant-delete", "team-b", ["delete", "workload", "team-a/train"], 1,
     "workload team-a/train not found (404 not_found)"),
    ("other-tenant-bare-name", "team-b", ["explain", "train"], 1,
     "workload team-b/train not found (404 not_found)"),
    ("foreign-queue", "team-a", ["submit", "-f", "-"], 1,
     "tenant 'team-a' may not submit to queue 'team-b' (allowed: team-a) (403 forbidden)"),
    ("no-such-node", "team-a", ["get", "node", "h100-9"], 1, "(404 not_found)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("who", "args", "code", "expected"), [pytest.param(*c[1:], id=c[0]) for c in AUTH_CASES]
)
def test_app_refusals(
    served: ServiceHarness, who: str, args: list[str], code: int, expected: str
) -> None:
    _busy(served)
    foreign = as_yaml(pod_doc("x", 1, queue="team-b"))
    result = runner.invoke(app, [*args, "--token", served.tokens.get(who, who)], input=foreign)
    assert result.exit_code == code
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert expected in result.stderr
    assert len(result.stderr.splitlines()) == 1


BAD_BODY_CASES = [
    ("not-yaml", "kind: [\n", "not valid YAML"),
    ("bad-quantity",
     as_yaml({**pod_doc("q"), "spec": {"containers": [{"name": "a", "resources": {
         "limits": {"cpu": "lots"}}}]}}),
     "not a Kubernetes quantity: 'lots'"),
    ("too-large", "# " + "x" * (1 << 20) + "\nkind: Pod\n", "(413 too_large)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "expected"), [pytest.param(*c[1:], id=c[0]) for c in BAD_BODY_CASES]
)
def test_app_bad_manifests_are_exit_2(served: ServiceHarness, body: str, expected: str) -> None:
    result = as_(served, "team-a", "submit", "-f", "-", input=body)
    assert result.code == 2
    assert expected in result.err
    assert as_(served, "team-a", "get", "workloads", "-o", "json").out == "[]\n"
