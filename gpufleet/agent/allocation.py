"""Which devices the kubelet hands a container: the scheduler's choice, and nothing else.

The kubelet's device manager asks a plugin for a preferred allocation and then allocates, one
container at a time, without saying which pod it admits. As HAMi does, the pod being admitted
is taken to be the oldest pod bound to this node that still waits for this resource (by bind
order) and asks this many units for its next container; for GPUs and MIG instances, which only
one pod can hold, the offered IDs themselves name the pod. The answer is that pod's binding
(``gpufleet.dev/gpu-index``, ``gpu-milli-per-device``, ``mig-slices``): ``GetPreferredAllocation``
returns the chosen devices, ``Allocate`` checks that the kubelet's IDs are the chosen ones
(containers taking disjoint subsets in container order; init containers' devices may be
reused) and answers what the container needs to see them: ``NVIDIA_VISIBLE_DEVICES`` (or CDI
names ``nvidia.com/gpu=<uuid>``), ``GPUFLEET_GPU_MILLI``, and on an MPS node the limits the
MPS server honours (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``)
with the pipe and log directories mounted where the NVIDIA device plugin mounts them. IDs that
are not the chosen devices, or no pod waiting, raise :class:`AllocationMismatchError`: the caller
fails the call and raises an Event; nobody gets another pod's GPU.

A binding counts only when :class:`~gpufleet.agent.binding_trust.BindingTrust` honours it (the
pod is gpufleet's and the scheduler signed its devices): any other pod's plan holds no device,
and when such a pod is the oldest one waiting, the call is refused naming it
(``UntrustedGpuBinding``) rather than handing it a device chosen for a younger pod, since the
kubelet admits pods oldest first and does not say which pod it admits.

Pure and in memory: no grpc, no API calls (the bound pods come as a snapshot kept current by
a watch), so Allocate stays well under a millisecond. It does not list devices
(:mod:`gpufleet.agent.resources`) nor serve the kubelet (:mod:`gpufleet.agent.device_plugin`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.agent.binding_trust import NO_TRUST, UNTRUSTED_REASON, BindingTrust
from gpufleet.agent.bound_pods import BoundPod
from gpufleet.agent.events import AgentEvent
from gpufleet.agent.resources import ResourceKind, base_uuid, resource_kind
from gpufleet.devices.visibility import (
    GPU_MILLI_ENV,
    MPS_MEMORY_ENV,
    MPS_THREADS_ENV,
    VISIBLE_DEVICES_ENV,
    DeviceNotFoundError,
    gpu_uuids,
    mig_instance,
    mps_limits,
)
from gpufleet.io.kube.annotations import (
    GPU_INDEX_ANNOTATION,
    MIG_SLICES_ANNOTATION,
    placement_from_annotations,
)
from gpufleet.model.gpu import GPU_RESOURCE, MILLI_PER_GPU, NO_SHARING, GpuSharing
from gpufleet.model.inventory import NodeInventory

__all__ = [
    "GPU_MILLI_ENV",
    "MPS_MEMORY_ENV",
    "MPS_THREADS_ENV",
    "VISIBLE_DEVICES_ENV",
    "AllocationMismatchError",
    "AllocationSettings",
    "Allocator",
    "ContainerGrant",
    "Mount",
    "MpsSettings",
]
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
#: The CDI kind the NVIDIA container toolkit generates GPU (and MIG) devices under.
CDI_GPU_KIND = "nvidia.com/gpu"
MISMATCH_REASON = "GpuAllocationMismatchError"


@dataclass(frozen=True, slots=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class ContainerGrant:
    """What one container gets: environment, mounts and CDI device names."""

    envs: Mapping[str, str]
    mounts: tuple[Mount, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    #: The physical devices (GPU or MIG UUIDs) the container sees, in order.
    devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MpsSettings:
    """Where the MPS control daemon's pipe and log directories are. As the NVIDIA device
    plugin does: ``/mps/<resource>/pipe`` in the container, under the device-plugins
    directory on the host, and the daemon's ``/dev/shm``."""

    host_root: str = "/var/lib/kubelet/device-plugins"
    #: The resource whose MPS daemon serves the node (the NVIDIA plugin runs one per resource).
    daemon_resource: str = GPU_RESOURCE

    def grant(self) -> tuple[dict[str, str], tuple[Mount, ...]]:
        pipe = f"/mps/{self.daemon_resource}/pipe"
        log = f"/mps/{self.daemon_resource}/log"
        root = self.host_root.rstrip("/")
        return {MPS_PIPE_ENV: pipe, MPS_LOG_ENV: log}, (
            Mount(pipe, f"{root}{pipe}"),
            Mount(log, f"{root}{log}"),
            Mount("/dev/shm", f"{root}/mps/shm"),
        )


@dataclass(frozen=True, slots=True)
class AllocationSettings:
    sharing: GpuSharing = NO_SHARING
    #: Answer CDI device names instead of ``NVIDIA_VISIBLE_DEVICES`` (the agent's ``--cdi``).
    cdi: bool = False
    #: Set when the node runs CUDA MPS (``--mps``, or the device plugin's ``sharing.mps``).
    mps: MpsSettings | None = None
    #: Whose bindings count (the default honours none: the agent passes its key).
    trust: BindingTrust = NO_TRUST


class AllocationMismatchError(Exception):
    """The kubelet offered devices that are not the ones chosen for the pod it admits."""

    def __init__(
        self,
        resource: str,
        pod: BoundPod | None,
        chosen: Sequence[str],
        offered: Sequence[str],
        why: str,
        reason: str = MISMATCH_REASON,
    ) -> None:
        self.resource = resource
        self.reason = reason
        self.pod = pod
        self.chosen = tuple(chosen)
        self.offered = tuple(offered)
        offered_text = ", ".join(offered) or "nothing"
        if pod is None:
            message = (
                f"{resource}: no pod bound to this node waits for {len(offered)} of it "
                f"(the kubelet offers {offered_text}): {why}"
            )
        else:
            message = (
                f"{resource}: pod {pod.key} was bound to {', '.join(chosen) or 'no devices'}, "
                f"but the kubelet offers {offered_text}: {why}"
            )
        super().__init__(message)

    def event(self, node: str) -> AgentEvent:
        """The Event to raise: about the pod, or about the node when no pod matched."""
        if self.pod is None:
            return AgentEvent("Node", "", node, node, self.reason, str(self))
        return AgentEvent(
            "Pod", self.pod.namespace, self.pod.name, self.pod.uid, self.reason, str(self)
        )


@dataclass(frozen=True, slots=True)
class _Plan:
    """One pod's binding for one resource: what each of its containers may get."""

    #: Units per container asking the resource, init containers first, as the kubelet asks.
    demands: tuple[tuple[str, int, bool], ...]
    #: The devices chosen: GPU UUIDs, or MIG UUIDs for a MIG resource (empty: no binding).
    targets: tuple[str, ...]
    #: Milli-GPU the pod holds on each GPU (0 for MIG).
    milli: int
    #: Why ``targets`` is empty, when it is.
    problem: str = ""
    #: The Event's reason when the pod is refused for ``problem``.
    reason: str = MISMATCH_REASON


@dataclass(slots=True)
class _Progress:
    """How far the kubelet got allocating one pod's resource."""

    next_container: int = 0
    #: Targets given to app containers (they must be disjoint for exclusive devices).
    used: set[str] = field(default_factory=set)


class Allocator:
    """Answers the kubelet for every resource of the node; thread-safe."""

    def __init__(self, inventory: NodeInventory, settings: AllocationSettings) -> None:
        self._lock = threading.Lock()
        self._inventory = inventory
        self._settings = settings
        self._progress: dict[tuple[str, str], _Progress] = {}
        self._plans: dict[tuple[str, str], tuple[BoundPod, NodeInventory, _Plan]] = {}
        self._memory = {d.uuid: d.memory_mib for d in inventory.devices}

    @property
    def settings(self) -> AllocationSettings:
        return self._settings

    def set_inventory(self, inventory: NodeInventory) -> None:
        with self._lock:
            self._inventory = inventory
            self._memory = {d.uuid: d.memory_mib for d in inventory.devices}

    def mark_allocated(self, pods: Sequence[BoundPod], allocated: Mapping[str, set[str]]) -> None:
        """Pods the kubelet already allocated resources for (by ``namespace/name``, as
        PodResources lists them: after an agent restart, or before the bound pods were known)
        wait for them no more. A pod this agent is allocating itself is left as it is (its
        next container may still come)."""
        with self._lock:
            for pod in pods:
                for resource in allocated.get(pod.key, set()):
                    if (pod.uid, resource) in self._progress:
                        continue
                    plan = self._plan(pod, resource)
                    self._progress[(pod.uid, resource)] = _Progress(
                        len(plan.demands), set(plan.targets)
                    )

    def preferred(
        self,
        resource: str,
        pods: Sequence[BoundPod],
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
    ) -> tuple[str, ...]:
        """The IDs to prefer: the pending pod's chosen devices, else the kubelet's own order."""
        with self._lock:
            kind = resource_kind(resource, self._settings.sharing)
            for _pod, plan, progress in self._pending(resource, pods, size):
                if must_include and not all(
                    self._fits(kind, plan, progress, i) for i in must_include
                ):
                    continue
                picked = self._pick(kind, plan, progress, available, must_include, size)
                if picked is not None:
                    return picked
        rest = [i for i in available if i not in must_include]
        return (*must_include, *rest)[:size]

    def allocate(
        self, resource: str, pods: Sequence[BoundPod], offered: Sequence[str]
    ) -> ContainerGrant:
        """The grant for one container the kubelet gives ``offered``; records it."""
        return self.allocate_containers(resource, pods, [offered])[0]

    def allocate_containers(
        self, resource: str, pods: Sequence[BoundPod], requests: Sequence[Sequence[str]]
    ) -> list[ContainerGrant]:
        """Grants for the containers of one Allocate call, in order: all of them, or none
        recorded when one does not match."""
        with self._lock:
            saved = dict(self._progress)
            try:
                grants = [self._allocate_one(resource, pods, offered) for offered in requests]
            except AllocationMismatchError:
                self._progress = saved
                raise
            self._forget_gone(pods)
            return grants

    def _allocate_one(
        self, resource: str, pods: Sequence[BoundPod], offered: Sequence[str]
    ) -> ContainerGrant:
        kind = resource_kind(resource, self._settings.sharing)
        pending = self._pending(resource, pods, len(offered))
        if not pending:
            raise AllocationMismatchError(
                resource, None, (), offered, "refusing devices no pod was bound to"
            )
        oldest, oldest_plan, _ = pending[0]
        if oldest_plan.reason == UNTRUSTED_REASON:
            raise AllocationMismatchError(
                resource, oldest, (), offered, oldest_plan.problem, UNTRUSTED_REASON
            )
        match = next(
            (
                (pod, plan, progress)
                for pod, plan, progress in pending
                if plan.targets and all(self._fits(kind, plan, progress, i) for i in offered)
            ),
            None,
        )
        if match is None:
            pod, plan, _ = pending[0]
            why = plan.problem or "refusing devices the scheduler did not choose for it"
            raise AllocationMismatchError(resource, pod, plan.targets, offered, why)
        pod, plan, progress = match
        init = plan.demands[progress.next_container][2]
        devices = self._devices(kind, plan, offered)
        if not init and kind.exclusive:
            progress.used.update(devices)
        progress.next_container += 1
        self._progress[(pod.uid, resource)] = progress
        return self._grant(kind, plan, devices)

    # -- choosing the pod --------------------------------------------------------------------

    def _pending(
        self, resource: str, pods: Sequence[BoundPod], size: int
    ) -> list[tuple[BoundPod, _Plan, _Progress]]:
        """Pods still waiting for ``resource`` whose next container asks ``size`` units,
        oldest binding first."""
        found: list[tuple[BoundPod, _Plan, _Progress]] = []
        for pod in pods:
            if not any(resource in c.limits for c in pod.containers):
                continue
            plan = self._plan(pod, resource)
            progress = self._progress.get((pod.uid, resource)) or _Progress()
            if progress.next_container >= len(plan.demands):
                continue
            if plan.demands[progress.next_container][1] != size:
                continue
            found.append((pod, plan, _Progress(progress.next_container, set(progress.used))))
        found.sort(key=lambda item: (item[0].bind_order, item[0].seen))
        return found

    def _plan(self, pod: BoundPod, resource: str) -> _Plan:
        cached = self._plans.get((pod.uid, resource))
        if cached is not None and cached[0] is pod and cached[1] is self._inventory:
            return cached[2]
        plan = self._make_plan(pod, resource)
        self._plans[(pod.uid, resource)] = (pod, self._inventory, plan)
        return plan

    def _make_plan(self, pod: BoundPod, resource: str) -> _Plan:
        ordered = sorted(pod.containers, key=lambda c: not c.init)
        demands = tuple(
            (c.name, c.limits[resource], c.init) for c in ordered if c.limits.get(resource, 0) > 0
        )
        kind = resource_kind(resource, self._settings.sharing)
        untrusted = self._settings.trust.problem(pod)
        if untrusted:
            return _Plan(demands, (), 0, f"refusing its binding: {untrusted}", UNTRUSTED_REASON)
        binding = placement_from_annotations("", pod.annotations)
        if kind.mig_profile:
            return self._mig_plan(demands, binding.mig_slices if binding else (), kind)
        if binding is None or not binding.gpu_indices:
            return _Plan(demands, (), 0, f"it carries no {GPU_INDEX_ANNOTATION} binding")
        milli = binding.gpu_milli_per_device or MILLI_PER_GPU
        if milli == MILLI_PER_GPU and not kind.exclusive and not kind.token:
            milli = self._settings.sharing.replica_milli
        try:
            targets = gpu_uuids(self._inventory, binding.gpu_indices)
        except DeviceNotFoundError as error:
            return _Plan(demands, (), 0, f"it was bound to {error}")
        return _Plan(demands, targets, milli)

    def _mig_plan(
        self,
        demands: tuple[tuple[str, int, bool], ...],
        slices: tuple[tuple[int, int], ...],
        kind: ResourceKind,
    ) -> _Plan:
        targets: list[str] = []
        for gpu, slot in slices:
            instance = mig_instance(self._inventory, gpu, slot)
            if instance is None:
                return _Plan(
                    demands, (), 0, f"it was bound to MIG slot {gpu}:{slot}, which is absent"
                )
            if instance.profile == kind.mig_profile:
                targets.append(instance.uuid)
        if not targets:
            return _Plan(demands, (), 0, f"it carries no {MIG_SLICES_ANNOTATION} of that profile")
        return _Plan(demands, tuple(targets), 0)

    # -- checking and picking IDs ------------------------------------------------------------

    @staticmethod
    def _target(kind: ResourceKind, device_id: str) -> str:
        return device_id if kind.exclusive else base_uuid(device_id)

    def _fits(self, kind: ResourceKind, plan: _Plan, progress: _Progress, device_id: str) -> bool:
        if kind.token:
            return True
        target = self._target(kind, device_id)
        if target not in plan.targets:
            return False
        init = plan.demands[progress.next_container][2]
        return init or not kind.exclusive or target not in progress.used

    def _pick(
        self,
        kind: ResourceKind,
        plan: _Plan,
        progress: _Progress,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
    ) -> tuple[str, ...] | None:
        picked = list(must_include)
        covered = {self._target(kind, i) for i in picked}
        on_target: dict[str, list[str]] = {}
        for device_id in available:
            if device_id not in picked and self._fits(kind, plan, progress, device_id):
                on_target.setdefault(self._target(kind, device_id), []).append(device_id)
        targets = [t for t in dict.fromkeys(plan.targets) if on_target.get(t)]
        # One ID per chosen device first, in the scheduler's order; then, for replicas and
        # share slots, more on the chosen devices; then, for share slots, any slot at all.
        for target in targets:
            if len(picked) < size and target not in covered:
                picked.append(on_target[target].pop(0))
                covered.add(target)
        while not kind.exclusive and len(picked) < size and any(on_target.get(t) for t in targets):
            for target in targets:
                if len(picked) < size and on_target[target]:
                    picked.append(on_target[target].pop(0))
        if kind.token:
            picked.extend(i for i in available if i not in picked)
        return tuple(picked[:size]) if len(picked) >= size else None

    def _devices(self, kind: ResourceKind, plan: _Plan, offered: Sequence[str]) -> tuple[str, ...]:
        if kind.token:
            return plan.targets
        seen: dict[str, None] = {}
        for device_id in offered:
            seen.setdefault(self._target(kind, device_id), None)
        return tuple(seen)

    def _grant(self, kind: ResourceKind, plan: _Plan, devices: tuple[str, ...]) -> ContainerGrant:
        envs: dict[str, str] = {}
        mounts: tuple[Mount, ...] = ()
        cdi: tuple[str, ...] = ()
        if self._settings.cdi:
            cdi = tuple(f"{CDI_GPU_KIND}={uuid}" for uuid in devices)
        else:
            envs[VISIBLE_DEVICES_ENV] = ",".join(devices)
        if not kind.mig_profile:
            envs[GPU_MILLI_ENV] = str(plan.milli)
        mps = self._settings.mps
        if mps is not None and not kind.mig_profile and plan.milli < MILLI_PER_GPU:
            mps_envs, mounts = mps.grant()
            envs.update(mps_envs)
            envs.update(mps_limits(devices, plan.milli, self._memory))
        return ContainerGrant(envs, mounts, cdi, devices)

    def _forget_gone(self, pods: Sequence[BoundPod]) -> None:
        if len(self._progress) <= 2 * len(pods) + 64:
            return
        live = {p.uid for p in pods}
        for key in [k for k in self._progress if k[0] not in live]:
            del self._progress[key]
        for key in [k for k in self._plans if k[0] not in live]:
            del self._plans[key]
