"""kubectl's habits that a trial missed (issue 33 item 6), each through the real API in-process:
``apply -f`` of Queues and PriorityClasses, ``get priorityclasses``, a second ``delete`` that
says ``deleted`` (the server deletes a finished workload; the first delete cancelled it), ``top
nodes`` one line per node (the per-GPU rows with ``--gpus``: tests/cli/test_remote.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.cli.remote import use_http
from gpufleet.testing.service import (
    ServiceHarness,
    as_yaml,
    make_harness,
    pod_doc,
    priority_class_doc,
    queue_doc,
)

runner = CliRunner()


@pytest.fixture
def served(env: Path, tmp_path: Path) -> Iterator[ServiceHarness]:
    """The real app over 4 nodes x 4 A100, queues team-a and team-b, and two priority
    classes; the commands reach it in-process."""
    classes = [priority_class_doc("high", 1000), priority_class_doc("low", 10)]
    harness = make_harness(tmp_path, priority_classes=classes)
    client = TestClient(harness.app)
    with use_http(lambda _: client):
        yield harness
    client.close()
    harness.close()


def gpufleet(harness: ServiceHarness, who: str, *args: str, input: str | None = None) -> str:
    result = runner.invoke(app, [*args, "--token", harness.tokens[who]], input=input)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_get_priorityclasses_lists_them_as_kubectl(served: ServiceHarness) -> None:
    rows = [line.split() for line in gpufleet(served, "team-a", "get", "pc").splitlines()]
    assert rows[0] == ["NAME", "VALUE", "PREEMPTION", "GLOBAL-DEFAULT"]
    assert ["high", "1000", "PreemptLowerPriority", "false"] in rows
    assert ["low", "10", "PreemptLowerPriority", "false"] in rows


@pytest.mark.parametrize(
    ("args", "names"),
    [
        pytest.param(["priorityclasses", "high"], ["high"], id="one-by-name"),
        pytest.param(["priorityclass", "-o", "json"], ["high", "low"], id="json"),
    ],
)
def test_get_priorityclasses_shows_one_or_the_apis_objects(
    served: ServiceHarness, args: list[str], names: list[str]
) -> None:
    out = gpufleet(served, "admin", "get", *args)
    for name in ("high", "low"):
        assert (name in out) is (name in names)


def test_get_an_unknown_priorityclass_is_not_found(served: ServiceHarness) -> None:
    result = runner.invoke(app, ["get", "pc", "nope", "--token", served.tokens["admin"]])
    assert result.exit_code == 1
    assert "priority class 'nope' not found" in result.stderr


def test_a_second_delete_says_deleted_and_a_third_finds_nothing(served: ServiceHarness) -> None:
    gpufleet(served, "team-a", "submit", "-f", "-", input=as_yaml(pod_doc("one", 1)))
    served.advance(1)
    delete = ("delete", "workload", "team-a/one")
    assert gpufleet(served, "team-a", *delete).strip() == "workload/team-a/one (Pod) cancelled"
    served.advance(1)
    assert gpufleet(served, "team-a", *delete).strip() == "workload/team-a/one (Pod) deleted"
    third = runner.invoke(app, [*delete, "--token", served.tokens["team-a"]])
    assert third.exit_code == 1
    assert "not found" in third.stderr


def test_apply_creates_then_configures_queues_and_priority_classes(
    served: ServiceHarness, tmp_path: Path
) -> None:
    objects = [queue_doc("team-c", 4), priority_class_doc("urgent", 5000)]
    path = tmp_path / "policy.yaml"
    path.write_text(as_yaml(*objects))
    first = gpufleet(served, "admin", "apply", "-f", str(path))
    assert first.splitlines() == ["queue/team-c created", "priorityclass/urgent created"]
    again = gpufleet(served, "admin", "apply", "-f", str(path))
    assert again.splitlines() == ["queue/team-c configured", "priorityclass/urgent configured"]
    assert "team-c" in gpufleet(served, "admin", "get", "queues")
    assert "urgent 5000" in " ".join(gpufleet(served, "admin", "get", "pc").split())


def test_apply_reads_stdin_and_a_list(served: ServiceHarness) -> None:
    listed = {"apiVersion": "v1", "kind": "List", "items": [queue_doc("team-d", 2)]}
    out = gpufleet(served, "admin", "apply", "-f", "-", input=as_yaml(listed))
    assert out.strip() == "queue/team-d created"


@pytest.mark.parametrize(
    ("who", "document", "code", "message"),
    [
        pytest.param("team-a", queue_doc("mine", 1), 1, "403", id="a-tenant-is-refused"),
        pytest.param(
            "admin", pod_doc("x", 1), 2, "apply takes Queue and PriorityClass objects, got Pod",
            id="a-workload-is-submitted-not-applied",
        ),
    ],
)  # fmt: skip
def test_apply_refuses(
    served: ServiceHarness, who: str, document: dict[str, Any], code: int, message: str
) -> None:
    args = ["apply", "-f", "-", "--token", served.tokens[who]]
    result = runner.invoke(app, args, input=as_yaml(document))
    assert result.exit_code == code
    assert message in result.stderr
    assert "mine" not in gpufleet(served, "admin", "get", "queues")


def test_submit_n_puts_the_objects_that_name_none_in_that_namespace(
    served: ServiceHarness,
) -> None:
    listed = {"apiVersion": "v1", "kind": "List", "items": [pod_doc("x", 1)]}
    out = gpufleet(served, "admin", "submit", "-n", "team-b", "-f", "-", input=as_yaml(listed))
    assert out.startswith("workload/team-b/x accepted: Pod")
    assert "x Pod" in " ".join(gpufleet(served, "admin", "get", "wl", "-n", "team-b").split())


@pytest.mark.parametrize(
    ("namespace", "code", "message"),
    [
        pytest.param("team-b", 2, "namespace 'team-a' is not the one given with -n ('team-b')",
                     id="another-namespace"),
        pytest.param("Team_B", 2, "namespace 'Team_B'", id="not-a-namespace-name"),
    ],
)  # fmt: skip
def test_submit_n_refuses_an_object_of_another_namespace(
    served: ServiceHarness, namespace: str, code: int, message: str
) -> None:
    args = ["submit", "-n", namespace, "-f", "-", "--token", served.tokens["admin"]]
    document = as_yaml(pod_doc("y", 1, namespace="team-a"))
    result = runner.invoke(app, args, input=document)
    assert (result.exit_code, result.stdout) == (code, "")
    assert message in result.stderr
