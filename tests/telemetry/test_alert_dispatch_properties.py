"""Invariants of the dispatcher over random alert histories (hypothesis): never a first
notification before group_wait, no identical notification within repeat_interval, every alert
that keeps firing is notified, every notified alert's resolution is sent exactly once."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.alerts import Alert, AlertState, LabelSet, label_set
from gpufleet.telemetry.alert_dispatch import (
    Dispatcher,
    Notification,
    Route,
    fingerprint,
    format_labels,
)

T0 = 1_700_000_000.0
STEP = 15.0
ROUNDS = 90
#: Rounds a resolved alert stays in the engine's list (Prometheus keeps it 15 minutes).
KEPT = 3
NAMES = [label_set({"alertname": name, "gpu": gpu}) for name in ("A", "B") for gpu in "012"]


@dataclass(frozen=True)
class History:
    route: Route
    #: Per alert label set, whether its condition holds in each round.
    on: dict[LabelSet, list[bool]]


@st.composite
def histories(draw: st.DrawFn) -> History:
    route = Route(
        "r",
        group_by=draw(st.sampled_from([("alertname",), (), None, ("gpu",)])),
        group_wait_s=draw(st.sampled_from([0.0, 15.0, 30.0, 50.0, 120.0])),
        group_interval_s=draw(st.sampled_from([15.0, 40.0, 90.0, 300.0])),
        repeat_interval_s=draw(st.sampled_from([60.0, 200.0, 600.0])),
        send_resolved=draw(st.booleans()),
    )
    chosen = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    on = {
        labels: draw(st.lists(st.booleans(), min_size=ROUNDS, max_size=ROUNDS).map(_runs))
        for labels in chosen
    }
    return History(route, on)


def _runs(flips: list[bool]) -> list[bool]:
    """Long runs rather than noise: a state holds until a flip (1 in 8 rounds on average)."""
    state, out = False, []
    for i, flip in enumerate(flips):
        if flip and i % 8 == 0:
            state = not state
        out.append(state)
    return out


def replay(history: History) -> tuple[list[Notification], list[list[Alert]]]:
    """The engine's alerts round by round (firing while on, resolved for KEPT rounds after)
    fed to a dispatcher; its notifications and the alerts of each round."""
    dispatcher = Dispatcher([history.route])
    sent: list[Notification] = []
    rounds: list[list[Alert]] = []
    state: dict[LabelSet, Alert] = {}
    for i in range(ROUNDS):
        now = T0 + i * STEP
        for labels, on in history.on.items():
            alert = state.get(labels)
            if on[i]:
                if alert is None or alert.state is AlertState.RESOLVED:
                    state[labels] = Alert("r", labels, AlertState.FIRING, 1.0, now, fired_at=now)
            elif alert is not None and alert.state is AlertState.FIRING:
                state[labels] = Alert(
                    "r", labels, AlertState.RESOLVED, 1.0, alert.active_at, alert.fired_at, now
                )
            elif (
                alert is not None
                and alert.resolved_at is not None
                and now - alert.resolved_at >= KEPT * STEP
            ):
                del state[labels]
        alerts = list(state.values())
        rounds.append(alerts)
        sent += dispatcher.round(alerts, now)
    return sent, rounds


def instances(n: Notification, status: str) -> set[tuple[str, str]]:
    return {(a["fingerprint"], a["startsAt"]) for a in n.payload["alerts"] if a["status"] == status}


@settings(max_examples=150, deadline=None)
@given(histories())
def test_dispatcher_invariants(history: History) -> None:
    route = history.route
    sent, rounds = replay(history)
    end = T0 + (ROUNDS - 1) * STEP
    starts: dict[str, float] = {}
    for alerts in rounds:
        for alert in alerts:
            key = route_key(route, alert.labels)
            assert alert.fired_at is not None
            starts[key] = min(starts.get(key, alert.fired_at), alert.fired_at)
    # Never a group's first notification before group_wait after its first alert fired.
    seen: set[str] = set()
    for n in sent:
        if n.group_key not in seen:
            seen.add(n.group_key)
            assert n.at >= starts[n.group_key] + route.group_wait_s
    # No identical notification of a group within repeat_interval.
    last: dict[str, Notification] = {}
    for n in sent:
        before = last.get(n.group_key)
        if before is not None and _same(before, n):
            assert n.at - before.at >= route.repeat_interval_s
        last[n.group_key] = n
    # Every alert that keeps firing long enough is known firing by the receiver: the group's
    # latest notification by then shows it firing (one notified firing before, whose
    # resolution was never sent, need not be notified again: Alertmanager dedups by labels).
    bound = route.group_wait_s + route.group_interval_s + STEP
    for labels, on in history.on.items():
        group = route_key(route, labels)
        fp = fingerprint(labels)
        for i in range(ROUNDS):
            fired = T0 + i * STEP
            if not on[i] or (i > 0 and on[i - 1]) or fired + bound > end:
                continue
            if all(on[j] for j in range(i, ROUNDS) if T0 + j * STEP <= fired + bound):
                view = [n for n in sent if n.group_key == group and n.at <= fired + bound]
                assert view
                assert fp in {f for f, _ in instances(view[-1], "firing")}
    # Each resolution is sent at most once, and, with send_resolved, once for an alert the
    # receiver saw firing that resolves for good.
    resolutions = [i for n in sent for i in instances(n, "resolved")]
    assert len(resolutions) == len(set(resolutions))
    if not route.send_resolved:
        assert resolutions == []
        return
    for labels, on in history.on.items():
        group = route_key(route, labels)
        fp = fingerprint(labels)
        for i in range(1, ROUNDS):
            gone = T0 + i * STEP
            if not (on[i - 1] and not any(on[i:])) or gone + bound > end:
                continue
            view = [n for n in sent if n.group_key == group and n.at < gone]
            if view and fp in {f for f, _ in instances(view[-1], "firing")}:
                after = [n for n in sent if n.group_key == group and n.at >= gone]
                assert sum(fp in {f for f, _ in instances(n, "resolved")} for n in after) == 1


def _same(a: Notification, b: Notification) -> bool:
    return all(instances(a, s) == instances(b, s) for s in ("firing", "resolved"))


def route_key(route: Route, labels: LabelSet) -> str:
    return f"{route.key}:{format_labels(route.group_labels(labels))}"
