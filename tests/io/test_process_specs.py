"""Reading a workload's process from its Pod manifest, and who may run its command."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.io.errors import InputError
from gpufleet.io.kube.process_specs import cannot_run, expand, process_spec_from_object
from gpufleet.model.jobs import RestartPolicy
from gpufleet.model.processes import ProcessSpec

BASE_ENV = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "LANG": "C.UTF-8"}


def pod(container: dict[str, Any], kind: str = "Pod") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container]}
    if kind != "Pod":
        spec = {"template": {"spec": spec}}
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": "train"}, "spec": spec}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "tenant" / "work").mkdir(parents=True)
    (tmp_path / "tenant" / "notes.txt").write_text("not a program\n")
    return tmp_path / "tenant"


def test_command_args_env_and_working_dir(root: Path) -> None:
    spec = process_spec_from_object(
        pod(
            {
                "command": ["python", "-c"],
                "args": ["print('$(GREETING)')", "$$HOME"],
                "env": [{"name": "GREETING", "value": "hi $(LANG)"}, {"name": "EMPTY"}],
                "workingDir": "work",
                "name": "trainer",
            }
        ),
        "train.yaml",
        root,
        BASE_ENV,
    )
    assert spec.argv == ("python", "-c", "print('hi C.UTF-8')", "$HOME")
    assert spec.container == "trainer"
    assert ProcessSpec.from_json(spec.to_json()) == spec
    stored_before_names = {k: v for k, v in spec.to_json().items() if k != "container"}
    assert ProcessSpec.from_json(stored_before_names).container == ""
    assert os.access(spec.executable, os.X_OK)
    assert os.path.basename(spec.executable).startswith("python")
    assert spec.env == {**BASE_ENV, "GREETING": "hi C.UTF-8", "EMPTY": ""}
    assert spec.working_dir == str((root / "work").resolve())
    assert (spec.uid, spec.gid, spec.log_path) == (None, None, None)


def test_a_jobs_pods_run_its_templates_process_in_the_tenant_root(root: Path) -> None:
    spec = process_spec_from_object(
        pod({"command": [sys.executable, "train.py"]}, kind="Job"), "job.yaml", root, BASE_ENV
    )
    assert spec.argv == (sys.executable, "train.py")
    assert spec.working_dir == str(root.resolve())


def test_a_command_relative_to_the_working_dir(root: Path) -> None:
    script = root / "work" / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    spec = process_spec_from_object(
        pod({"command": ["./run.sh"], "workingDir": "work"}), "p.yaml", root, BASE_ENV
    )
    assert spec.executable == str(script.resolve())


def test_path_comes_from_the_containers_env_first(root: Path) -> None:
    (root / "bin").mkdir()
    tool = root / "bin" / "mytool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    spec = process_spec_from_object(
        pod({"command": ["mytool"], "env": [{"name": "PATH", "value": str(root / "bin")}]}),
        "p.yaml",
        root,
        BASE_ENV,
    )
    assert spec.executable == str(tool)


@pytest.mark.parametrize(
    ("container", "field", "words"),
    [
        pytest.param(
            {"command": ["no-such-command-xyz"]},
            "spec.containers[0].command[0]",
            "not found on PATH",
            id="not-on-path",
        ),
        pytest.param(
            {"command": ["/no/such/file"]},
            "spec.containers[0].command[0]",
            "does not exist",
            id="absolute-missing",
        ),
        pytest.param(
            {"command": ["./notes.txt"]},
            "spec.containers[0].command[0]",
            "is not executable",
            id="not-executable",
        ),
        pytest.param(
            {"args": ["train.py"]},
            "spec.containers[0].command",
            "no image entrypoint",
            id="args-without-command",
        ),
        pytest.param(
            {"command": ["python"], "workingDir": "/etc"},
            "spec.containers[0].workingDir",
            "inside the tenant's root",
            id="cwd-outside",
        ),
        pytest.param(
            {"command": ["python"], "workingDir": "../../"},
            "spec.containers[0].workingDir",
            "inside the tenant's root",
            id="cwd-escapes-by-dots",
        ),
        pytest.param(
            {"command": ["python"], "env": [{"name": "X", "valueFrom": {"secretKeyRef": {}}}]},
            "spec.containers[0].env[0].valueFrom",
            "give X's value",
            id="value-from",
        ),
        pytest.param(
            {"command": ["python"], "env": [{"value": "1"}]},
            "spec.containers[0].env[0].name",
            "required",
            id="env-without-name",
        ),
        pytest.param(
            {"command": "python"},
            "spec.containers[0].command",
            "expected a list",
            id="command-not-a-list",
        ),
    ],
)
def test_bad_input_names_the_file_object_and_field(
    root: Path, container: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InputError) as caught:
        process_spec_from_object(pod(container), "train.yaml", root, BASE_ENV)
    assert caught.value.source == "train.yaml"
    assert caught.value.location == "Pod default/train"
    assert caught.value.field == field
    assert words in caught.value.reason


def test_a_symlink_out_of_the_root_is_outside(root: Path) -> None:
    (root / "escape").symlink_to("/etc")
    with pytest.raises(InputError, match="inside the tenant's root"):
        process_spec_from_object(
            pod({"command": ["python"], "workingDir": "escape"}), "p.yaml", root, BASE_ENV
        )


def test_no_containers_and_unsupported_kinds() -> None:
    with pytest.raises(InputError, match=r"spec\.containers: required"):
        process_spec_from_object(
            {"kind": "Pod", "metadata": {"name": "x"}, "spec": {}}, "p.yaml", Path("/"), BASE_ENV
        )
    with pytest.raises(InputError, match="expected one of Pod, Job"):
        process_spec_from_object(
            {"kind": "Service", "metadata": {"name": "x"}}, "p.yaml", Path("/"), BASE_ENV
        )


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        pytest.param("$(A)-$(B)", "1-$(B)", id="undefined-stays"),
        pytest.param("$$(A)", "$(A)", id="escaped"),
        pytest.param("$A $(A)", "$A 1", id="shell-form-untouched"),
    ],
)
def test_expand(text: str, expanded: str) -> None:
    assert expand(text, {"A": "1"}) == expanded


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A directory every user can reach (pytest's own tmp_path is its owner's alone)."""
    made = Path(tempfile.mkdtemp(prefix="gpufleet-specs-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


OTHER_UID = 65534


@pytest.mark.parametrize(
    ("directory_mode", "file_mode", "content", "why"),
    [
        pytest.param(0o755, 0o755, b"#!/bin/sh\n", None, id="open"),
        pytest.param(0o700, 0o755, b"#!/bin/sh\n", "is not searchable", id="closed-directory"),
        pytest.param(0o755, 0o744, b"#!/bin/sh\n", "cannot execute", id="owner-only-x"),
        pytest.param(0o755, 0o711, b"#!/bin/sh\n", "cannot read the script", id="script-no-r"),
        pytest.param(0o755, 0o711, b"\x7fELF", None, id="binary-x-only"),
        pytest.param(0o750, 0o750, b"#!/bin/sh\n", "is not searchable", id="group-not-its"),
    ],
)
def test_cannot_run_reads_the_permission_bits_for_the_user(
    open_root: Path, directory_mode: int, file_mode: int, content: bytes, why: str | None
) -> None:
    directory = open_root / "bin"
    directory.mkdir()
    program = directory / "prog"
    program.write_bytes(content)
    program.chmod(file_mode)
    directory.chmod(directory_mode)
    found = cannot_run(str(program), OTHER_UID, OTHER_UID)
    assert (found is None) == (why is None), found
    if why is not None:
        assert why in str(found)
        assert f"uid {OTHER_UID}" in str(found)


def test_the_group_bits_count_for_the_primary_group(open_root: Path) -> None:
    program = open_root / "prog"
    program.write_bytes(b"\x7fELF")
    program.chmod(0o710)
    group = program.stat().st_gid
    assert cannot_run(str(program), OTHER_UID, group) is None
    assert cannot_run(str(program), OTHER_UID, group + 1) is not None


def test_the_path_lookup_skips_what_the_user_cannot_run(open_root: Path) -> None:
    closed, opened = open_root / "closed", open_root / "open"
    for directory, mode in ((closed, 0o700), (opened, 0o755)):
        directory.mkdir()
        (directory / "prog").write_bytes(b"\x7fELF")
        (directory / "prog").chmod(0o755)
        directory.chmod(mode)
    env = {"PATH": f"{closed}:{opened}"}
    made = process_spec_from_object(
        pod({"command": ["prog"]}), "p.yaml", open_root, env, uid=OTHER_UID, gid=OTHER_UID
    )
    assert made.executable == str(opened / "prog")
    # Said as for a missing program: what is in a directory closed to it is not its to know.
    with pytest.raises(InputError, match=r"'prog' not found on PATH as uid 65534") as caught:
        process_spec_from_object(
            pod({"command": ["prog"]}),
            "p.yaml",
            open_root,
            {"PATH": str(closed)},
            uid=OTHER_UID,
            gid=OTHER_UID,
        )
    assert caught.value.field == "spec.containers[0].command[0]"
    # The server's own user (no uid) is not checked: the server can run it.
    assert process_spec_from_object(
        pod({"command": ["prog"]}), "p.yaml", open_root, {"PATH": str(closed)}
    ).executable == str(closed / "prog")


@pytest.mark.parametrize(
    ("kind", "given", "expected"),
    [
        pytest.param("Pod", None, None, id="pod-none-given-none"),
        pytest.param("Pod", "Always", RestartPolicy.ALWAYS, id="pod-always"),
        pytest.param("Pod", "OnFailure", RestartPolicy.ON_FAILURE, id="pod-on-failure"),
        pytest.param("Pod", "Never", RestartPolicy.NEVER, id="pod-never"),
        pytest.param("Deployment", None, RestartPolicy.ALWAYS, id="deployment-default"),
        pytest.param("StatefulSet", "Always", RestartPolicy.ALWAYS, id="statefulset-always"),
        pytest.param("ReplicaSet", None, RestartPolicy.ALWAYS, id="replicaset-default"),
        pytest.param("Job", "OnFailure", None, id="job-its-backoff-limit-instead"),
    ],
)
def test_the_restart_policy_of_each_kind(
    root: Path, kind: str, given: str | None, expected: RestartPolicy | None
) -> None:
    document = pod({"command": [sys.executable]}, kind=kind)
    pod_spec = document["spec"] if kind == "Pod" else document["spec"]["template"]["spec"]
    if given is not None:
        pod_spec["restartPolicy"] = given
    spec = process_spec_from_object(document, "w.yaml", root, BASE_ENV)
    assert spec.restart_policy is expected
    assert ProcessSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("kind", "given", "field", "message"),
    [
        pytest.param("Pod", "Sometimes", "spec.restartPolicy", "got 'Sometimes'", id="pod-bad"),
        pytest.param(
            "Deployment", "Never", "spec.template.spec.restartPolicy",
            "expected 'Always', got 'Never'", id="deployment-never",
        ),
    ],
)  # fmt: skip
def test_a_bad_restart_policy_is_refused(
    root: Path, kind: str, given: str, field: str, message: str
) -> None:
    document = pod({"command": [sys.executable]}, kind=kind)
    pod_spec = document["spec"] if kind == "Pod" else document["spec"]["template"]["spec"]
    pod_spec["restartPolicy"] = given
    with pytest.raises(InputError, match=message) as raised:
        process_spec_from_object(document, "w.yaml", root, BASE_ENV)
    assert raised.value.field == field


#: Ways a tenant's manifest may name a path in another tenant's private directory (``{other}``:
#: that directory; ``{name}``: a file in it, there or not; the tenant's root is the cwd).
PROBES = [
    pytest.param({"command": ["{other}/{name}"]}, {}, "command[0]", id="absolute-command"),
    pytest.param({"command": ["../other/{name}"]}, {}, "command[0]", id="relative-command"),
    pytest.param({"command": ["{name}"]}, {"PATH": "{other}"}, "command[0]", id="on-path"),
    pytest.param({"command": ["link/{name}"]}, {}, "command[0]", id="through-a-link"),
    pytest.param(
        {"command": ["/bin/true"], "workingDir": "{other}/{name}"}, {}, "workingDir",
        id="working-dir",
    ),
    pytest.param(
        {"command": ["/bin/true"], "workingDir": "link/{name}"}, {}, "workingDir",
        id="working-dir-through-a-link",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("container", "env", "field"), PROBES)
def test_another_tenants_files_read_as_missing(
    open_root: Path, container: dict[str, object], env: dict[str, str], field: str
) -> None:
    """Issue 30: a 422 told whether a file exists in another tenant's private directory (the
    server looked as root). The error for a file there is the error for one that is not."""
    mine, other = open_root / "mine", open_root / "other"
    mine.mkdir(mode=0o700)
    other.mkdir(mode=0o700)
    os.chown(mine, OTHER_UID, OTHER_UID)
    (other / "secret.sh").write_bytes(b"#!/bin/sh\n")
    (other / "secret.sh").chmod(0o755)
    (other / "data").mkdir()
    (mine / "link").symlink_to(other)
    errors = {}
    for name in ("secret.sh", "data", "missing"):
        given = json.loads(
            json.dumps(container).replace("{other}", str(other)).replace("{name}", name)
        )
        base = {k: v.replace("{other}", str(other)) for k, v in env.items()}
        with pytest.raises(InputError) as caught:
            process_spec_from_object(
                pod(given), "p.yaml", mine, {"PATH": "/usr/bin:/bin", **base}, None,
                OTHER_UID, OTHER_UID,
            )  # fmt: skip
        assert caught.value.field is not None
        assert caught.value.field.endswith(field)
        errors[name] = str(caught.value).replace(name, "NAME")
    assert errors["secret.sh"] == errors["missing"] == errors["data"], errors


@pytest.mark.parametrize(
    ("resources", "cpu_milli", "memory_bytes"),
    [
        ({}, None, None),
        ({"requests": {"cpu": "1", "memory": "1Gi"}}, None, None),
        ({"limits": {"cpu": "500m", "memory": "100Mi"}}, 500, 100 * 1024 * 1024),
        ({"limits": {"cpu": 2}}, 2000, None),
        ({"limits": {"memory": "1G", "nvidia.com/gpu": 1}}, None, 10**9),
    ],
    ids=["none", "requests-only-are-not-limits", "both", "cpu-only", "memory-and-a-gpu"],
)
def test_the_containers_cpu_and_memory_limits_are_the_runs(
    root: Path, resources: dict[str, Any], cpu_milli: int | None, memory_bytes: int | None
) -> None:
    container = {"command": ["python", "-c", "pass"], "resources": resources}
    spec = process_spec_from_object(pod(container), "train.yaml", root, BASE_ENV)
    assert (spec.cpu_limit_milli, spec.memory_limit_bytes) == (cpu_milli, memory_bytes)
    assert ProcessSpec.from_json(spec.to_json()) == spec


def test_an_indexed_jobs_limits_per_index_and_array_keep_through_json() -> None:
    spec = ProcessSpec(
        ("true",), "/bin/true", indexed=True, completions=10, backoff_limit_per_index=1,
        max_failed_indexes=2, array_first=1,
    )  # fmt: skip
    assert ProcessSpec.from_json(spec.to_json()) == spec
    stored_before = {
        k: v
        for k, v in spec.to_json().items()
        if k not in ("backoff_limit_per_index", "max_failed_indexes", "array_first")
    }
    assert ProcessSpec.from_json(stored_before).backoff_limit_per_index is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({"backoff_limit_per_index": 1}, "requires an Indexed Job", id="per-index"),
        pytest.param(
            {"indexed": True, "max_failed_indexes": 1}, "requires a backoff limit per index",
            id="max-failed-without-per-index",
        ),
        pytest.param({"array_first": 0}, "a job array is an Indexed Job", id="array"),
        pytest.param(
            {"indexed": True, "backoff_limit_per_index": -1}, "must be >= 0", id="negative",
        ),
    ],
)  # fmt: skip
def test_limits_per_index_need_an_indexed_job(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProcessSpec(("true",), "/bin/true", **fields)


@pytest.mark.parametrize(
    ("fields", "tty"),
    [
        pytest.param({"stdin": True, "tty": True}, True, id="stdin-and-tty"),
        pytest.param({"stdin": True}, False, id="stdin-alone"),
        pytest.param({}, False, id="neither"),
    ],
)
def test_a_container_with_stdin_and_tty_runs_on_a_terminal(
    root: Path, fields: dict[str, Any], tty: bool
) -> None:
    container = {"command": ["python", "-c", "pass"], **fields}
    spec = process_spec_from_object(pod(container), "train.yaml", root, BASE_ENV)
    assert spec.tty is tty
    assert ProcessSpec.from_json(spec.to_json()) == spec


def test_a_tty_without_stdin_is_refused_as_kubernetes_refuses_it(root: Path) -> None:
    container = {"command": ["python", "-c", "pass"], "tty": True}
    with pytest.raises(InputError, match="tty: true needs stdin: true"):
        process_spec_from_object(pod(container), "train.yaml", root, BASE_ENV)
