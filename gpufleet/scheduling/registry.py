"""The registry: what each plugin name of a profile means, per extension point.

A :class:`Registry` maps names to factories, one table per extension point of
:mod:`.framework`: a factory takes what the plugin may read (the core's
:class:`~.state.CoreState` for the cycle's plugins, the node table for filters and scorers)
and the profile's arguments, and returns the plugin. :meth:`Registry.default` holds the
built-ins; whoever builds cores may register more (a new admission check is a file with its
class and factory, one ``register`` call, and a line of profile: ``calendar-window`` is one;
what it needs from the world, a timer or its own wake-up it says by optional hooks,
:mod:`.framework`). :meth:`Registry.check` looks
every name of a profile up before anything is built: an unknown name is an error that lists
the names known at that point.

What it does not do: choose plugins (a :class:`~.profile.Profile` does) or run them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from gpufleet.scheduling.framework import (
    AdmissionCheck,
    FilterPlugin,
    Permit,
    PostFilter,
    QueueSort,
    ScorePlugin,
)
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.plugins.budget import BudgetCheck
from gpufleet.scheduling.plugins.calendar_window import CalendarWindow, calendar_window
from gpufleet.scheduling.plugins.capacity_type import CapacityTypeScore
from gpufleet.scheduling.plugins.fair_share import FairShare
from gpufleet.scheduling.plugins.gang_ready import GangReadyTimeout
from gpufleet.scheduling.policies import POLICY_FACTORIES, PolicyFactory
from gpufleet.scheduling.policies.bestfit import BestFitScore
from gpufleet.scheduling.policies.clustering import GpuClusteringScore
from gpufleet.scheduling.policies.dotprod import DotProductScore
from gpufleet.scheduling.policies.packing import GpuPackingScore
from gpufleet.scheduling.preemption.preemptor import ClassicalPreemption
from gpufleet.scheduling.profile import Args, PluginSpec, Profile, arguments
from gpufleet.scheduling.state import CoreState

Context = TypeVar("Context")
Plugin = TypeVar("Plugin")


class UnknownPluginError(ValueError):
    """A profile names a plugin no registry entry has."""

    def __init__(self, profile: str, point: str, name: str, known: list[str]) -> None:
        choices = ", ".join(known) if known else "none are registered"
        super().__init__(f"profile {profile!r}: unknown {point} {name!r}; known: {choices}")
        self.point = point
        self.name = name
        self.known = known


class _Names(Protocol):
    point: str

    def __contains__(self, name: str) -> bool: ...

    def names(self) -> list[str]: ...


class Plugins(Generic[Context, Plugin]):
    """The factories of one extension point, by name."""

    def __init__(self, point: str) -> None:
        self.point = point
        self._factories: dict[str, Callable[[Context, Args], Plugin]] = {}

    def register(self, name: str, factory: Callable[[Context, Args], Plugin]) -> None:
        if name in self._factories:
            raise ValueError(f"{self.point} {name!r} is registered already")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def __contains__(self, name: str) -> bool:
        return name in self._factories

    def build(self, spec: PluginSpec, context: Context, profile: str) -> Plugin:
        factory = self._factories.get(spec.name)
        if factory is None:
            raise UnknownPluginError(profile, self.point, spec.name, self.names())
        return factory(context, spec.args)


def _fair_share(state: CoreState, args: Args) -> QueueSort:
    arguments(args, FairShare.name, {})
    return FairShare(state)


def _budget(state: CoreState, args: Args) -> AdmissionCheck:
    arguments(args, BudgetCheck.name, {})
    return BudgetCheck(state)


def _classical_preemption(state: CoreState, args: Args) -> PostFilter:
    arguments(args, ClassicalPreemption.name, {})
    return ClassicalPreemption(state)


def _gang_ready_timeout(state: CoreState, args: Args) -> Permit:
    given = arguments(args, GangReadyTimeout.name, {"timeout": float})
    timeout = given.get("timeout", state.config.gang_ready_timeout)
    assert isinstance(timeout, int | float)
    return GangReadyTimeout(state, float(timeout))


def _scorer(make: Callable[[], ScorePlugin]) -> Callable[[NodeTable, Args], ScorePlugin]:
    def factory(table: NodeTable, args: Args) -> ScorePlugin:
        scorer = make()
        arguments(args, scorer.name, {})
        return scorer

    return factory


class Registry:
    """See the module docstring."""

    def __init__(self) -> None:
        self.queue_sorts: Plugins[CoreState, QueueSort] = Plugins("queue sort")
        self.admission_checks: Plugins[CoreState, AdmissionCheck] = Plugins("admission check")
        self.post_filters: Plugins[CoreState, PostFilter] = Plugins("post-filter")
        self.permits: Plugins[CoreState, Permit] = Plugins("permit")
        #: Filters added after the built-in ones (which are compiled into each pod shape's
        #: demand and always run), and scorers added to a placement policy's own.
        self.filters: Plugins[NodeTable, FilterPlugin] = Plugins("filter")
        self.scores: Plugins[NodeTable, ScorePlugin] = Plugins("score")
        #: Placement policies by name (``--policy``).
        self.policies: dict[str, PolicyFactory] = {}

    @classmethod
    def default(cls) -> Registry:
        """A registry of the built-in plugins (a new one each time: registering into it
        changes no other)."""
        registry = cls()
        registry.queue_sorts.register(FairShare.name, _fair_share)
        registry.admission_checks.register(BudgetCheck.name, _budget)
        registry.admission_checks.register(CalendarWindow.name, calendar_window)
        registry.post_filters.register(ClassicalPreemption.name, _classical_preemption)
        registry.permits.register(GangReadyTimeout.name, _gang_ready_timeout)
        registry.scores.register(CapacityTypeScore.name, _scorer(CapacityTypeScore))
        registry.scores.register("bestfit", _scorer(BestFitScore))
        registry.scores.register("dotprod", _scorer(DotProductScore))
        registry.scores.register("gpu-clustering", _scorer(GpuClusteringScore))
        registry.scores.register("gpu-packing", _scorer(GpuPackingScore))
        registry.policies.update(POLICY_FACTORIES)
        return registry

    def check(self, profile: Profile) -> None:
        """Raise :class:`UnknownPluginError` for the first name ``profile`` gives that this
        registry does not know."""
        points: list[tuple[_Names, PluginSpec]] = [
            (self.queue_sorts, profile.queue_sort),
            *((self.admission_checks, spec) for spec in profile.admission_checks),
            *((self.filters, spec) for spec in profile.filters),
            *((self.scores, spec) for spec in profile.scores),
            (self.post_filters, profile.post_filter),
            (self.permits, profile.permit),
        ]
        for plugins, spec in points:
            if spec.name not in plugins:
                raise UnknownPluginError(profile.name, plugins.point, spec.name, plugins.names())
