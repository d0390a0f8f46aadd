"""Devices for all of a pod's unallocated claims on one node, all at once or none.

Owns :func:`allocate`, a pure function: given one node's devices (:class:`NodeDevices`), the
device classes and a pod's claims (:class:`ClaimToAllocate`), it returns an
:class:`Allocation`: which device each request gets (:class:`DeviceChoice`), or none and why
(a reason an explanation can print). The rules, as ``resource.k8s.io/v1`` defines them:

* a request gets devices of its class that satisfy the class's and its own CEL selectors and
  tolerate each of their ``NoSchedule`` and ``NoExecute`` taints; ``ExactCount`` takes
  ``count`` of them, ``All`` every such device of the node (none taken or tainted, and at
  least one);
* ``firstAvailable``: the sub-requests are tried in order, a later one only when no choice
  with the earlier can satisfy the claims: of two choices, the one whose first request with
  different sub-requests has the earlier one wins (the result names ``request/sub-request``).
  kube-scheduler takes the first choice its search meets instead, which can give a later
  sub-request to a second request when another device for the first would have let it have
  its first;
* ``matchAttribute``: the devices of the requests it names (all of its claim's when it names
  none) have the attribute, all with one value;
* a device is used once across the claims, and not at all when taken already, unless it allows
  multiple allocations or the request has admin access (which may use a device in use);
  partitionable devices consume shared counters, which must not be exceeded;
* among the choices satisfying all this, a :class:`~gpufleet.scheduling.dra.choice_policy.
  ChoicePolicy` chooses (by default the one leaving the most usable capacity), not first fit.

The search is depth-first over the requests in order with the candidate devices in id order,
looking at up to ``max_choices`` complete choices (the best of those: past that, a better one
may go unseen) and ``max_steps`` steps (an unsatisfiable
mix of constraints over many devices would otherwise take exponential time): past that it says
so. A CEL selector that fails on a device fails the allocation on this node, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from gpufleet.model.device_cel import CelError, selector_matches
from gpufleet.model.dra import (
    AllocationMode,
    AttributeValue,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceId,
    DeviceTaintEffect,
    ExactRequest,
    MatchAttribute,
)
from gpufleet.scheduling.dra.choice_policy import DEFAULT_POLICY, ChoicePolicy
from gpufleet.scheduling.dra.inventory import (
    CounterKey,
    Counters,
    NodeDevices,
    consumption,
    fits,
)

#: Complete choices compared before the best so far is taken.
MAX_CHOICES = 256
#: Devices tried, in all, before the search gives up.
MAX_STEPS = 100_000
_BLOCKING = (DeviceTaintEffect.NO_SCHEDULE, DeviceTaintEffect.NO_EXECUTE)


@dataclass(frozen=True, slots=True)
class ClaimToAllocate:
    """One unallocated claim of the pod: ``key`` names it in results and reasons."""

    key: str
    spec: ClaimSpec


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """A device for a request of a claim (``request/sub-request`` for ``firstAvailable``)."""

    claim: str
    request: str
    device: DeviceId
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class Allocation:
    """The devices chosen for every claim, or none and why (``reason``)."""

    choices: tuple[DeviceChoice, ...] = ()
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    def for_claim(self, claim: str) -> tuple[DeviceChoice, ...]:
        return tuple(choice for choice in self.choices if choice.claim == claim)


@dataclass(frozen=True, slots=True)
class _Alternative:
    """One way to satisfy a request: a sub-request, its candidates, and why some are out."""

    name: str
    request: ExactRequest
    candidates: tuple[Device, ...]
    #: For ``All``: the devices it must have, every one (empty for ExactCount).
    required: tuple[Device, ...] = ()
    shortfall: str | None = None  # why it cannot be satisfied whatever else is chosen


@dataclass(slots=True)
class _Slot:
    """A request of a claim to fill: its alternatives and the constraints it takes part in."""

    claim: str
    request: str
    alternatives: list[_Alternative]
    constraints: list[int] = field(default_factory=list)


class _SearchLimitError(Exception):
    """The search tried ``max_steps`` devices."""


def allocate(
    node: NodeDevices,
    claims: Sequence[ClaimToAllocate],
    classes: Mapping[str, DeviceClass],
    policy: ChoicePolicy = DEFAULT_POLICY,
    max_choices: int = MAX_CHOICES,
    max_steps: int = MAX_STEPS,
) -> Allocation:
    """Devices of ``node`` for every request of ``claims`` (module docstring), or a reason."""
    try:
        slots, constraints = _slots(node, claims, classes)
    except CelError as error:
        return Allocation(reason=str(error))
    for slot in slots:
        if all(alternative.shortfall for alternative in slot.alternatives):
            reasons = "; ".join(str(a.shortfall) for a in slot.alternatives)
            return Allocation(reason=f"claim {slot.claim}: {reasons}")
    search = _Search(node, slots, constraints, policy, max_choices, max_steps)
    try:
        search.run()
    except _SearchLimitError:
        if search.best is None:
            return Allocation(
                reason=f"gave up after trying {max_steps} devices: no choice found for "
                f"{_names(claims)}"
            )
    if search.best is None:
        partitionable = any(
            device.consumes_counters
            for slot in slots
            for alternative in slot.alternatives
            for device in alternative.candidates
        )
        return Allocation(reason=_why_none(claims, constraints, partitionable))
    return Allocation(tuple(search.best))


# ------------------------------------------------------------------------------- the slots
def _slots(
    node: NodeDevices, claims: Sequence[ClaimToAllocate], classes: Mapping[str, DeviceClass]
) -> tuple[list[_Slot], list[tuple[str, MatchAttribute]]]:
    slots: list[_Slot] = []
    constraints: list[tuple[str, MatchAttribute]] = []
    for claim in claims:
        first = len(constraints)
        constraints.extend((claim.key, c) for c in claim.spec.constraints)
        for request in claim.spec.requests:
            alternatives = [
                _alternative(node, claim.key, name, exact, classes)
                for name, exact in request.alternatives
            ]
            slot = _Slot(claim.key, request.name, alternatives)
            for index in range(first, len(constraints)):
                names = constraints[index][1].requests
                if not names or request.name in names or any(a.name in names for a in alternatives):
                    slot.constraints.append(index)
            slots.append(slot)
    return slots, constraints


def _alternative(
    node: NodeDevices,
    claim: str,
    name: str,
    request: ExactRequest,
    classes: Mapping[str, DeviceClass],
) -> _Alternative:
    device_class = classes.get(request.device_class)
    wanted = (
        "all devices" if request.mode is AllocationMode.ALL else _devices(request.count)
    ) + f" of class {request.device_class}"
    if device_class is None:
        return _Alternative(
            name, request, (), shortfall=f"request {name}: device class "
            f"{request.device_class} does not exist"
        )  # fmt: skip
    selectors = [
        *(
            (s.expression, f"DeviceClass {device_class.name} {s.field}")
            for s in device_class.selectors
        ),
        *((s.expression, s.field) for s in request.selectors),
    ]
    matching: list[Device] = []
    for device in node.devices:
        if _selected(device, selectors, claim, name):
            matching.append(device)
    tainted = [d for d in matching if not _tolerated(d, request)]
    in_use = [
        d for d in matching
        if d.id in node.taken and not d.shareable and not request.admin_access
    ]  # fmt: skip
    out = {d.id for d in (*tainted, *in_use)}
    candidates = tuple(d for d in matching if d.id not in out)
    counts = f"{len(matching)} match"
    if in_use:
        counts += f", {len(in_use)} of them allocated already"
    if tainted:
        counts += f", {len(tainted)} tainted"
    if request.mode is AllocationMode.ALL:
        if not matching or out:
            why = f"request {name}: {wanted} wanted, {counts}"
            return _Alternative(name, request, (), shortfall=why)
        return _Alternative(name, request, candidates, required=candidates)
    if len(candidates) < request.count:
        why = f"request {name}: {wanted} wanted, {counts}"
        return _Alternative(name, request, candidates, shortfall=why)
    return _Alternative(name, request, candidates)


def _selected(device: Device, selectors: list[tuple[str, str]], claim: str, request: str) -> bool:
    for expression, where in selectors:
        try:
            if not selector_matches(expression, device):
                return False
        except CelError as error:
            raise CelError(
                f"claim {claim}: request {request}: selector {where or expression}: {error}"
            ) from None
    return True


def _tolerated(device: Device, request: ExactRequest) -> bool:
    return all(
        any(toleration.tolerates(taint) for toleration in request.tolerations)
        for taint in device.taints
        if taint.effect in _BLOCKING
    )


# ------------------------------------------------------------------------------ the search
@dataclass(frozen=True, slots=True)
class _Taken:
    """A device taken for a slot, and what taking it fixed (to give back on the way up)."""

    choice: DeviceChoice
    used: Mapping[CounterKey, Mapping[str, Fraction]]
    fixed: tuple[int, ...]


class _Search:
    """Depth-first over the slots, keeping the best complete choice by the policy."""

    def __init__(
        self,
        node: NodeDevices,
        slots: list[_Slot],
        constraints: list[tuple[str, MatchAttribute]],
        policy: ChoicePolicy,
        max_choices: int,
        max_steps: int,
    ) -> None:
        self.slots = slots
        self.constraints = constraints
        self.score = policy.scorer(node)
        self.max_choices = max_choices
        self.steps_left = max_steps
        self.uses: dict[DeviceId, int] = {}
        self.left: dict[CounterKey, dict[str, Fraction]] = {
            key: dict(counters) for key, counters in node.counters_left.items()
        }
        self.values: list[AttributeValue | None] = [None] * len(constraints)
        self.chosen: list[DeviceChoice] = []
        self.best: list[DeviceChoice] | None = None
        self.best_score: tuple[tuple[int, ...], tuple[float, ...]] | None = None
        self.seen = 0
        self.consumed: dict[DeviceId, Mapping[CounterKey, Counters]] = {}
        #: The alternative taken at each slot filled so far (its firstAvailable rank).
        self.ranks: list[int] = []

    def run(self) -> None:
        self._fill(0)

    @property
    def _enough(self) -> bool:
        return self.seen >= self.max_choices

    def _fill(self, index: int) -> bool:
        """Fill the slots from ``index`` on; True when some complete choice was found."""
        if index == len(self.slots):
            self._complete()
            return True
        slot = self.slots[index]
        for rank, alternative in enumerate(slot.alternatives):
            if alternative.shortfall is not None:
                continue
            self.ranks.append(rank)
            if alternative.required:
                found = self._take_all(index, slot, alternative)
            else:
                found = self._choose(index, slot, alternative, 0, alternative.request.count)
            self.ranks.pop()
            if found or self._enough:  # firstAvailable: later ones only when this cannot be
                return found
        return False

    def _choose(
        self, index: int, slot: _Slot, alternative: _Alternative, start: int, count: int
    ) -> bool:
        """``count`` more of the alternative's candidates from ``start`` on, then the rest."""
        if count == 0:
            return self._fill(index + 1)
        found = False
        candidates = alternative.candidates
        for position in range(start, len(candidates) - count + 1):
            taken = self._pick(slot, alternative, candidates[position])
            if taken is None:
                continue
            found = self._choose(index, slot, alternative, position + 1, count - 1) or found
            self._give_back(taken)
            if self._enough:
                break
        return found

    def _take_all(self, index: int, slot: _Slot, alternative: _Alternative) -> bool:
        picked: list[_Taken] = []
        for device in alternative.required:
            taken = self._pick(slot, alternative, device)
            if taken is None:
                break
            picked.append(taken)
        found = len(picked) == len(alternative.required) and self._fill(index + 1)
        for taken in reversed(picked):
            self._give_back(taken)
        return found

    def _pick(self, slot: _Slot, alternative: _Alternative, device: Device) -> _Taken | None:
        """Take ``device`` for the slot when it can be taken now; None (nothing changed) when
        not."""
        self.steps_left -= 1
        if self.steps_left < 0:
            raise _SearchLimitError
        admin = alternative.request.admin_access
        if not device.shareable and not admin and self.uses.get(device.id, 0):
            return None
        used = {} if admin else self._consumption(device)
        if used and not fits(used, self.left):
            return None
        fixed: list[int] = []
        for index in slot.constraints:
            constraint = self.constraints[index][1]
            names = constraint.requests
            if names and slot.request not in names and alternative.name not in names:
                continue
            value = device.attribute(constraint.attribute)
            current = self.values[index]
            if value is None or (current is not None and not _same(current, value)):
                for undo in fixed:
                    self.values[undo] = None
                return None
            if current is None:
                self.values[index] = value
                fixed.append(index)
        choice = DeviceChoice(slot.claim, alternative.name, device.id, admin)
        self.uses[device.id] = self.uses.get(device.id, 0) + 1
        for key, counters in used.items():
            for name, amount in counters.items():
                self.left[key][name] -= amount
        self.chosen.append(choice)
        return _Taken(choice, used, tuple(fixed))

    def _consumption(self, device: Device) -> Mapping[CounterKey, Counters]:
        """:func:`consumption`, by device id (hashing a device hashes its counters' fractions)."""
        found = self.consumed.get(device.id)
        if found is None:
            found = self.consumed[device.id] = consumption(device)
        return found

    def _give_back(self, taken: _Taken) -> None:
        popped = self.chosen.pop()
        assert popped is taken.choice, "devices are given back in the order taken, reversed"
        self.uses[taken.choice.device] -= 1
        for key, counters in taken.used.items():
            for name, amount in counters.items():
                self.left[key][name] += amount
        for index in taken.fixed:
            self.values[index] = None

    def _complete(self) -> None:
        self.seen += 1
        chosen_ids = [choice.device for choice in self.chosen]
        # Earlier firstAvailable sub-requests first (slot by slot), then the policy's score.
        preference = tuple(-rank for rank in self.ranks)
        score = (preference, self.score(chosen_ids, self.left))
        if self.best_score is None or score > self.best_score:
            self.best_score = score
            self.best = list(self.chosen)


def _same(left: AttributeValue, right: AttributeValue) -> bool:
    """Equal values of one type (``1`` and ``True`` are not the same attribute value)."""
    return type(left) is type(right) and left == right


def _devices(count: int) -> str:
    return f"{count} device" if count == 1 else f"{count} devices"


def _names(claims: Sequence[ClaimToAllocate]) -> str:
    return ", ".join(claim.key for claim in claims)


def _why_none(
    claims: Sequence[ClaimToAllocate],
    constraints: list[tuple[str, MatchAttribute]],
    partitionable: bool,
) -> str:
    what = ["each device used once"]
    if constraints:
        matched = sorted({c.attribute for _, c in constraints})
        what.insert(0, f"matchAttribute {', '.join(matched)}")
    if partitionable:
        what.append("shared counters")
    return (
        f"no choice of devices satisfies claim{'s' if len(claims) > 1 else ''} "
        f"{_names(claims)} together ({'; '.join(what)})"
    )
