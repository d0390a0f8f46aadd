"""What a submission to ``gpufleet serve --local`` carries beyond its workloads: their processes.

Owns :class:`LocalSubmissions`, the local plane's :class:`~gpufleet.service.live_plane.
SubmissionReader`: each accepted workload's manifest (a Pod, or the pod template of a Job,
Deployment, StatefulSet or ReplicaSet) is read into a
:class:`~gpufleet.model.processes.ProcessSpec` (:func:`~gpufleet.io.kube.process_specs.
process_spec_from_object`) in the tenant's root (``<state>/tenants/<tenant>/``), as the
tenant's local user (:class:`~gpufleet.service.local_users.TenantUsers`), with its Job's
rules (the shorter time limit, the backoff limits, completions, a job array's first task) and
checked against the machine, before anything is stored: a command that does not exist, a
working directory outside the tenant's root or GPU needs larger than the machine are a 422
with nothing stored or started. The processes are stored with the workload, in the
submission's transaction, and given to the machine's world.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from gpufleet.backends.local.machine import LocalMachine, SubmitRefusedError
from gpufleet.io.errors import InputError
from gpufleet.io.kube.job_rules import ARRAY_ANNOTATION, parse_array
from gpufleet.io.kube.pods import REPLICATED_KINDS
from gpufleet.io.kube.process_specs import PROCESS_KINDS, process_spec_from_object
from gpufleet.io.manifests import Manifest
from gpufleet.model.processes import ProcessSpec
from gpufleet.service.auth import Principal
from gpufleet.service.local_users import TenantUsers, login_env
from gpufleet.service.local_world import LiveLocalMachine
from gpufleet.service.store import Store
from gpufleet.service.submissions import SOURCE, Submitted

#: The server's environment variables a manifest's process starts with (before its own env).
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


class LocalSubmissions:
    """See the module docstring."""

    def __init__(
        self, store: Store, machine: LocalMachine, world: LiveLocalMachine, users: TenantUsers
    ) -> None:
        self.store = store
        self.machine = machine
        self.world = world
        self.users = users
        self._prepared: dict[str, dict[str, ProcessSpec]] = {}

    def prepare(
        self,
        principal: Principal,
        manifests: Sequence[Manifest],
        accepted: Sequence[Submitted],
        dry_run: bool,
    ) -> None:
        """Each accepted workload's processes, read from its manifest in the tenant's root as
        the tenant's user and checked against the machine (InputError: nothing is kept)."""
        uid, gid = self.users.identity(principal.tenant)
        try:
            root = self.machine.tenant_root(principal.tenant, uid, gid)
        except SubmitRefusedError as error:
            raise InputError(SOURCE, str(error), field="tenant") from None
        base_env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        base_env["HOME"] = str(root)
        base_env.update(login_env(uid))  # the run's user, which is the server's when uid is None
        by_name = {
            (
                str(m.get("kind")),
                str((m.get("metadata") or {}).get("namespace") or principal.default_namespace()),
                str((m.get("metadata") or {}).get("name")),
            ): m
            for m in manifests
        }
        self._prepared = {}
        for item in accepted:
            workload = item.timed.workload
            manifest = by_name.get((item.kind, workload.namespace, workload.name))
            if manifest is None and item.kind in REPLICATED_KINDS:
                # Each replica is a workload of its own, named <object>-<ordinal>.
                owner, _, ordinal = workload.name.rpartition("-")
                if ordinal.isdigit():
                    manifest = by_name.get((item.kind, workload.namespace, owner))
            if item.kind not in PROCESS_KINDS or manifest is None:
                raise InputError(
                    SOURCE,
                    f"expected one of {', '.join(PROCESS_KINDS)}: the local machine runs a "
                    f"pod's command, and reads no process from a {item.kind}",
                    manifest.location if manifest is not None else None,
                    "kind",
                )
            # As the workload was read: in the caller's namespace when it names none.
            metadata = {**(manifest.get("metadata") or {}), "namespace": workload.namespace}
            spec = process_spec_from_object(
                {**manifest, "metadata": metadata}, SOURCE, root, base_env, manifest.location,
                uid, gid,
            )  # fmt: skip
            limits = [j.active_deadline for j in item.timed.jobs if j.active_deadline is not None]
            if spec.deadline_s is not None:
                limits.append(spec.deadline_s)
            backoffs = [j.backoff_limit for j in item.timed.jobs if j.backoff_limit is not None]
            completions = [j.completions for j in item.timed.jobs if j.completions]
            per_index = [j.backoff_limit_per_index for j in item.timed.jobs]
            most_failed = [j.max_failed_indexes for j in item.timed.jobs]
            indexed = any(j.indexed for j in item.timed.jobs)
            spec = dataclasses.replace(
                spec,
                deadline_s=min(limits) if limits else None,
                backoff_limit=min(backoffs) if backoffs else None,
                completions=max(completions) if completions else None,
                indexed=indexed,
                backoff_limit_per_index=_least(per_index),
                max_failed_indexes=_least(most_failed),
                array_first=_array_first(manifest, indexed, completions),
            )
            env = {
                **spec.env,
                "GPUFLEET_WORKLOAD": workload.key,
                "GPUFLEET_TENANT": principal.tenant,
            }
            specs = {
                pod.key: spec.with_env({**env, "GPUFLEET_POD": pod.key}) for pod in workload.pods
            }
            try:
                self.machine.check(workload, specs)
            except SubmitRefusedError as error:
                raise InputError(SOURCE, str(error), manifest.location, "resources") from None
            self._prepared[workload.key] = specs

    def keep(self, accepted: Sequence[Submitted]) -> None:
        """Store the processes read, in the submission's transaction, and hand them to the
        machine's world."""
        for item in accepted:
            key = item.timed.workload.key
            specs = self._prepared.pop(key)
            self.store.set_processes(key, specs)
            self.world.give_processes(key, specs)


def _array_first(manifest: Manifest, indexed: bool, completions: list[int]) -> int | None:
    """A job array's first task id (``gpufleet run --array``'s annotation; None: none),
    checked against its Job: an Indexed Job of as many completions as the array has tasks."""
    metadata = manifest.get("metadata") or {}
    text = (metadata.get("annotations") or {}).get(ARRAY_ANNOTATION)
    if text is None:
        return None
    where = f"metadata.annotations.{ARRAY_ANNOTATION}"
    try:
        first, count, _ = parse_array(str(text))
    except ValueError as error:
        raise InputError(SOURCE, str(error), manifest.location, where) from None
    if manifest.get("kind") != "Job" or completions != [count] or not indexed:
        raise InputError(
            SOURCE,
            f"a job array of {count} tasks is an Indexed Job of {count} completions",
            manifest.location,
            where,
        )
    return first


def _least(limits: list[int | None]) -> int | None:
    """The smallest of the limits given (None: none is)."""
    given = [limit for limit in limits if limit is not None]
    return min(given) if given else None
