"""Alert notifications as Alertmanager sends them: routing, grouping, timing and the webhook
payload, round by round, with ``now`` passed in.

Owns :class:`Route` (a receiver and how its notifications are grouped and timed),
:class:`Dispatcher` (fed each round with the rule engine's alerts, it returns the
:class:`Notification` s due at ``now``), the payload (Alertmanager's webhook ``Message``,
version 4), an alert's fingerprint, and :func:`postable_alerts` (alerts as Prometheus posts
them to Alertmanager's ``/api/v2/alerts``). It sends nothing and reads no clock: the service's
``alert_webhooks`` posts the payloads, ``io.alert_routing`` reads the routes from a file. Times
sent out are the plane's through a :data:`WallTime` (seconds since the epoch: the simulated
cluster's clock counts from 0). A dispatcher's groups and what it sent are kept across a
restart as data (:meth:`Dispatcher.snapshot`, :meth:`Dispatcher.restore`).

The semantics are Alertmanager's (``dispatch/dispatch.go``, ``dispatch`` aggregation groups,
``notify.DedupStage``):

* only firing alerts (and their resolution) are notified; ``startsAt`` is when the alert fired;
* an alert goes to the first route, in order, whose equality matchers it has, and on to later
  ones while the matched route says ``continue_``; a ``fallback`` route takes only alerts no
  other route took (Alertmanager's root);
* per route, alerts with equal ``group_by`` labels form a group (``group_by=None``: every
  label, Alertmanager's ``...``); a new group is first flushed ``group_wait`` after it was made
  (at once if one of its alerts fired more than ``group_wait`` ago and it never flushed), then
  every ``group_interval``;
* a flush notifies when the group's firing alerts are not all in the last notification, when
  all alerts of a group that was notified firing are resolved, when ``send_resolved`` and a
  resolved alert is new to the receiver, or when ``repeat_interval`` has passed since the last
  notification (at or after it: rounds are discrete, Alertmanager's timers are not); resolved
  alerts leave the group after the flush, so each resolution is sent at most once;
* an alert that fired and resolved between two flushes of a group never notified is not sent.

Rounds come at least as often as the shortest interval (the plane evaluates every 15 s), and a
timer due between rounds fires in the next round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cmp_to_key
from typing import Any
from urllib.parse import quote

from gpufleet.model.alert_annotations import render_annotations
from gpufleet.model.alerts import Alert, AlertRule, AlertState, LabelSet, label_set

#: Alertmanager's defaults (its ``route``): 30 s, 5 min, 4 h.
GROUP_WAIT_S = 30.0
GROUP_INTERVAL_S = 300.0
REPEAT_INTERVAL_S = 14_400.0
DEFAULT_GROUP_BY = ("alertname",)
#: The webhook payload's version (Alertmanager's ``webhook.Message``).
WEBHOOK_VERSION = "4"
#: Go's zero time, as Alertmanager writes the ``endsAt`` of a firing alert.
ZERO_TIME = "0001-01-01T00:00:00Z"
#: Prometheus re-sends active alerts every minute and sets ``endsAt`` 4 resends ahead.
RESEND_DELAY_S = 60.0

#: Annotations of an alert (``summary``, ``description``).
Annotate = Callable[[Alert], Mapping[str, str]]
#: The plane's time -> seconds since the epoch (the identity where the plane's clock is the
#: wall's; the simulated cluster's: ``service/wall_time``): what everything sent out carries.
WallTime = Callable[[float], float]
#: The version of :meth:`Dispatcher.snapshot`'s form.
SNAPSHOT_VERSION = 1


def same_time(seconds: float) -> float:
    """The plane's time is already seconds since the epoch."""
    return seconds


@dataclass(frozen=True, slots=True)
class Route:
    """Where alerts go and how they are grouped and timed. ``target`` names the destination
    (a webhook URL) for whoever sends; ``key`` is Alertmanager's route key (``{}`` for the
    root, ``{}/{severity="critical"}`` for a child), the first part of a group key."""

    receiver: str
    group_by: tuple[str, ...] | None = DEFAULT_GROUP_BY
    group_wait_s: float = GROUP_WAIT_S
    group_interval_s: float = GROUP_INTERVAL_S
    repeat_interval_s: float = REPEAT_INTERVAL_S
    send_resolved: bool = True
    matchers: LabelSet = ()
    continue_: bool = False
    fallback: bool = False
    key: str = "{}"
    target: str = ""
    #: The most alerts a payload carries (0: all); the rest are counted in truncatedAlerts.
    max_alerts: int = 0

    def __post_init__(self) -> None:
        if not self.receiver:
            raise ValueError("a route needs a receiver")
        if self.group_wait_s < 0:
            raise ValueError(f"group_wait must be 0 or more, got {self.group_wait_s}")
        for what, seconds in (
            ("group_interval", self.group_interval_s),
            ("repeat_interval", self.repeat_interval_s),
        ):
            if not seconds > 0:
                raise ValueError(f"{what} must be longer than 0, got {seconds}")
        if self.max_alerts < 0:
            raise ValueError(f"max_alerts must be 0 or more, got {self.max_alerts}")

    def matches(self, labels: LabelSet) -> bool:
        have = dict(labels)
        return all(have.get(name) == value for name, value in self.matchers)

    def group_labels(self, labels: LabelSet) -> LabelSet:
        if self.group_by is None:
            return labels
        return tuple((name, value) for name, value in labels if name in self.group_by)


@dataclass(frozen=True, slots=True)
class Notification:
    """One webhook payload due: for ``route`` (its ``target``), at ``at``."""

    route: Route
    group_key: str
    at: float
    payload: dict[str, Any]


@dataclass(slots=True)
class _Held:
    alert: Alert
    annotations: Mapping[str, str]
    starts_at: float
    ends_at: float | None = None  # None while firing


@dataclass(slots=True)
class _Group:
    labels: LabelSet
    next_flush: float
    flushed: bool = False
    alerts: dict[LabelSet, _Held] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Sent:
    at: float
    firing: frozenset[LabelSet]
    resolved: frozenset[LabelSet]


class Dispatcher:
    """The notifications of ``routes`` (in matching order), one round at a time."""

    def __init__(
        self,
        routes: Sequence[Route],
        *,
        annotate: Annotate | None = None,
        external_url: str = "",
        wall: WallTime = same_time,
    ) -> None:
        if not routes:
            raise ValueError("a dispatcher needs at least one route")
        self.routes = tuple(routes)
        self.external_url = external_url.rstrip("/")
        self.wall = wall
        self._annotate = annotate or rule_annotations(())
        self._groups: dict[tuple[int, LabelSet], _Group] = {}
        self._log: dict[tuple[int, LabelSet], _Sent] = {}
        self._last: float | None = None

    def routes_for(self, labels: LabelSet) -> list[int]:
        """The indexes of the routes an alert with ``labels`` goes to."""
        return routes_for(self.routes, labels)

    def round(self, alerts: Iterable[Alert], now: float) -> list[Notification]:
        """Take the alerts of a round (the rule engine's ``alerts()``: pending ones are left
        out) and return the notifications due at ``now``, by route and group."""
        if self._last is not None and now < self._last:
            raise ValueError(f"rounds go forward in time: {now} is before {self._last}")
        self._last = now
        firing = {a.labels: a for a in alerts if a.state is AlertState.FIRING}
        resolved_at = {
            a.labels: a.resolved_at
            for a in alerts
            if a.state is AlertState.RESOLVED and a.resolved_at is not None
        }
        for alert in firing.values():
            self._insert(alert, now)
        for group in self._groups.values():
            for labels, held in group.alerts.items():
                if held.ends_at is None and labels not in firing:
                    # Resolved by the engine, or gone from it (Alertmanager: expired).
                    held.ends_at = resolved_at.get(labels, now)
        due: list[Notification] = []
        for key in sorted(self._groups):
            group = self._groups[key]
            if group.next_flush <= now:
                sent = self._flush(key, group, now)
                if sent is not None:
                    due.append(sent)
            if not group.alerts:
                del self._groups[key]
                logged = self._log.get(key)
                if logged is not None and not logged.firing:
                    del self._log[key]
        return due

    def groups(self) -> int:
        return len(self._groups)

    def snapshot(self) -> dict[str, Any]:
        """What this dispatcher holds and has sent, as JSON-able data, for a restarted server
        to go on from (:meth:`restore`): each group's alerts, timers and last notification,
        under its route's receiver and key."""
        groups = []
        for (index, labels), group in sorted(self._groups.items()):
            sent = self._log.get((index, labels))
            groups.append(
                {
                    "route": _route_id(self.routes[index]),
                    "labels": [list(pair) for pair in labels],
                    "next_flush": group.next_flush,
                    "flushed": group.flushed,
                    "alerts": [_held_data(held) for held in group.alerts.values()],
                    "sent": None if sent is None else _sent_data(sent),
                }
            )
        logged = [
            {"route": _route_id(self.routes[index]), "labels": [list(p) for p in labels],
             "sent": _sent_data(sent)}
            for (index, labels), sent in sorted(self._log.items())
            if (index, labels) not in self._groups
        ]  # fmt: skip
        return {"version": SNAPSHOT_VERSION, "last": self._last, "groups": groups, "log": logged}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Go on from a :meth:`snapshot` (of a server that stopped): groups and notifications
        of routes this dispatcher has too (same receiver and key) come back, so an alert still
        firing is not notified again as new and one that resolved meanwhile is notified
        resolved. Called before the first round; a snapshot of another version is ignored."""
        if data.get("version") != SNAPSHOT_VERSION:
            return
        by_id = {(r.receiver, r.key): index for index, r in enumerate(self.routes)}
        for entry in data["groups"]:
            index = by_id.get(_route_id_of(entry["route"]))
            if index is None:
                continue
            labels = _labels_of(entry["labels"])
            group = _Group(labels, float(entry["next_flush"]), bool(entry["flushed"]))
            for held in entry["alerts"]:
                restored = _held_of(held)
                group.alerts[restored.alert.labels] = restored
            self._groups[(index, labels)] = group
            if entry["sent"] is not None:
                self._log[(index, labels)] = _sent_of(entry["sent"])
        for entry in data["log"]:
            index = by_id.get(_route_id_of(entry["route"]))
            if index is not None:
                self._log[(index, _labels_of(entry["labels"]))] = _sent_of(entry["sent"])
        last = data.get("last")
        self._last = None if last is None else float(last)

    @property
    def last(self) -> float | None:
        """The time of the latest round (None before the first)."""
        return self._last

    def _insert(self, alert: Alert, now: float) -> None:
        assert alert.fired_at is not None
        annotations = self._annotate(alert)
        for index in self.routes_for(alert.labels):
            route = self.routes[index]
            key = (index, route.group_labels(alert.labels))
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group(key[1], now + route.group_wait_s)
            held = group.alerts.get(alert.labels)
            if held is None or held.ends_at is not None or held.starts_at != alert.fired_at:
                group.alerts[alert.labels] = _Held(alert, annotations, alert.fired_at)
            else:
                held.alert, held.annotations = alert, annotations
            if not group.flushed and alert.fired_at + route.group_wait_s < now:
                group.next_flush = min(group.next_flush, now)

    def _flush(self, key: tuple[int, LabelSet], group: _Group, now: float) -> Notification | None:
        route = self.routes[key[0]]
        group.next_flush = now + route.group_interval_s
        group.flushed = True
        held = sorted(group.alerts.values(), key=cmp_to_key(_alert_order))
        firing = frozenset(h.alert.labels for h in held if h.ends_at is None)
        resolved = frozenset(h.alert.labels for h in held if h.ends_at is not None)
        notification = None
        if _needs_update(self._log.get(key), firing, resolved, route, now):
            self._log[key] = _Sent(now, firing, resolved)
            sent = held if route.send_resolved else [h for h in held if h.ends_at is None]
            if sent:
                group_key = f"{route.key}:{format_labels(group.labels)}"
                payload = self._payload(route, group_key, group.labels, sent)
                notification = Notification(route, group_key, now, payload)
        for labels in resolved:
            del group.alerts[labels]
        return notification

    def _payload(
        self, route: Route, group_key: str, labels: LabelSet, held: Sequence[_Held]
    ) -> dict[str, Any]:
        truncated = 0
        if route.max_alerts and len(held) > route.max_alerts:
            truncated = len(held) - route.max_alerts
            held = held[: route.max_alerts]
        alerts = [
            {
                "status": "firing" if h.ends_at is None else "resolved",
                "labels": dict(h.alert.labels),
                "annotations": dict(h.annotations),
                "startsAt": rfc3339(self.wall(h.starts_at)),
                "endsAt": ZERO_TIME if h.ends_at is None else rfc3339(self.wall(h.ends_at)),
                "generatorURL": generator_url(self.external_url, h.alert.rule),
                "fingerprint": fingerprint(h.alert.labels),
            }
            for h in held
        ]
        return {
            "receiver": route.receiver,
            "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
            "alerts": alerts,
            "groupLabels": dict(labels),
            "commonLabels": _common([dict(h.alert.labels) for h in held]),
            "commonAnnotations": _common([dict(h.annotations) for h in held]),
            "externalURL": self.external_url,
            "version": WEBHOOK_VERSION,
            "groupKey": group_key,
            "truncatedAlerts": truncated,
        }


def routes_for(routes: Sequence[Route], labels: LabelSet) -> list[int]:
    """The indexes of the ``routes`` an alert with ``labels`` goes to (Alertmanager's
    matching: the first that matches, the next ones while it says ``continue``, else the
    fallbacks)."""
    chosen: list[int] = []
    for index, route in enumerate(routes):
        if route.fallback or not route.matches(labels):
            continue
        chosen.append(index)
        if not route.continue_:
            return chosen
    if not chosen:
        chosen = [i for i, route in enumerate(routes) if route.fallback]
    return chosen


def _route_id(route: Route) -> list[str]:
    return [route.receiver, route.key]


def _route_id_of(data: Sequence[str]) -> tuple[str, str]:
    receiver, key = data
    return receiver, key


def _labels_of(data: Iterable[Sequence[str]]) -> LabelSet:
    return tuple((str(name), str(value)) for name, value in data)


def alert_data(alert: Alert) -> dict[str, Any]:
    """An alert as JSON-able data (:func:`alert_of` reads it back)."""
    return {
        "rule": alert.rule,
        "labels": [list(pair) for pair in alert.labels],
        "state": alert.state.value,
        "value": alert.value,
        "active_at": alert.active_at,
        "fired_at": alert.fired_at,
        "resolved_at": alert.resolved_at,
    }


def alert_of(data: Mapping[str, Any]) -> Alert:
    """An alert from its JSON-able form (:func:`alert_data`, kept by ``service/alert_state``
    too)."""

    def time_of(key: str) -> float | None:
        value = data.get(key)
        return None if value is None else float(value)

    return Alert(
        str(data["rule"]),
        _labels_of(data["labels"]),
        AlertState(data["state"]),
        float(data["value"]),
        float(data["active_at"]),
        time_of("fired_at"),
        time_of("resolved_at"),
    )


def _held_data(held: _Held) -> dict[str, Any]:
    return {
        "alert": alert_data(held.alert),
        "annotations": dict(held.annotations),
        "starts_at": held.starts_at,
        "ends_at": held.ends_at,
    }


def _held_of(data: Mapping[str, Any]) -> _Held:
    ends = data.get("ends_at")
    return _Held(
        alert_of(data["alert"]),
        {str(k): str(v) for k, v in data["annotations"].items()},
        float(data["starts_at"]),
        None if ends is None else float(ends),
    )


def _sent_data(sent: _Sent) -> dict[str, Any]:
    return {
        "at": sent.at,
        "firing": sorted([list(p) for p in labels] for labels in sent.firing),
        "resolved": sorted([list(p) for p in labels] for labels in sent.resolved),
    }


def _sent_of(data: Mapping[str, Any]) -> _Sent:
    return _Sent(
        float(data["at"]),
        frozenset(_labels_of(labels) for labels in data["firing"]),
        frozenset(_labels_of(labels) for labels in data["resolved"]),
    )


def _needs_update(
    last: _Sent | None,
    firing: frozenset[LabelSet],
    resolved: frozenset[LabelSet],
    route: Route,
    now: float,
) -> bool:
    """Alertmanager's ``DedupStage.needsUpdate``."""
    if last is None:
        return bool(firing)
    if not firing <= last.firing:
        return True
    if not firing:
        return bool(last.firing)
    if route.send_resolved and not resolved <= last.resolved:
        return True
    return now - last.at >= route.repeat_interval_s


def _common(maps: Sequence[Mapping[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    common = dict(maps[0])
    for other in maps[1:]:
        common = {k: v for k, v in common.items() if other.get(k) == v}
    return common


def _alert_order(a: _Held, b: _Held) -> int:
    """Alertmanager's ``AlertSlice`` order: by ``job``, then ``instance`` (alerts lacking one
    last), then label sets (fewer labels first, then by the sorted names' values)."""
    la, lb = dict(a.alert.labels), dict(b.alert.labels)
    for name in ("job", "instance"):
        if name not in la and name not in lb:
            continue
        if name not in la:
            return 1
        if name not in lb:
            return -1
        if la[name] != lb[name]:
            return -1 if la[name] < lb[name] else 1
    if len(la) != len(lb):
        return -1 if len(la) < len(lb) else 1
    for name in sorted(la.keys() | lb.keys()):
        if name not in la:
            return -1
        if name not in lb:
            return 1
        if la[name] != lb[name]:
            return -1 if la[name] < lb[name] else 1
    return 0


# -- the wire format ----------------------------------------------------------------------------

_FNV_OFFSET = 14_695_981_039_346_656_037
_FNV_PRIME = 1_099_511_628_211
_MASK = (1 << 64) - 1


def fingerprint(labels: LabelSet | Mapping[str, str]) -> str:
    """Prometheus' fingerprint of a label set (FNV-1a 64 over the sorted names and values,
    each followed by byte 255), in 16 hex digits, as Alertmanager's payload carries it."""
    pairs = label_set(labels) if isinstance(labels, Mapping) else tuple(sorted(labels))
    digest = _FNV_OFFSET
    for name, value in pairs:
        for part in (name, value):
            for byte in part.encode():
                digest = ((digest ^ byte) * _FNV_PRIME) & _MASK
            digest = ((digest ^ 0xFF) * _FNV_PRIME) & _MASK
    return f"{digest:016x}"


def format_labels(labels: LabelSet) -> str:
    """A label set as Prometheus writes one: ``{alertname="X", severity="warning"}``."""
    return "{" + ", ".join(f"{name}={_go_quote(value)}" for name, value in labels) + "}"


def format_matchers(matchers: LabelSet) -> str:
    """Equality matchers as Alertmanager writes a route's: ``{severity="critical"}``."""
    return "{" + ",".join(f"{name}={_go_quote(value)}" for name, value in matchers) + "}"


def _go_quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped.replace(chr(9), chr(92) + "t")}"'


def rfc3339(seconds: float) -> str:
    """Seconds since the epoch as Go writes a UTC time in JSON (fraction without trailing
    zeros, none when whole)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return text + "Z"


def generator_url(external_url: str, rule: str) -> str:
    """Where an alert comes from: the rule in gpufleet's API (empty without a URL)."""
    if not external_url:
        return ""
    return f"{external_url.rstrip('/')}/api/v1/alerts?rule={quote(rule)}"


def rule_annotations(rules: Iterable[AlertRule]) -> Annotate:
    """Annotations of an alert from its rule: ``summary`` (where, and the rule's summary) and
    ``description`` (the rule, the value compared, the threshold), as Prometheus renders the
    exported rule's templates (both are :mod:`gpufleet.model.alert_annotations`'). An alert
    of a rule not in ``rules`` gets a summary naming where it is and the rule."""
    by_name = {rule.name: rule for rule in rules}

    def annotate(alert: Alert) -> dict[str, str]:
        rule = by_name.get(alert.rule)
        labels = dict(alert.labels)
        if rule is not None:
            return render_annotations(rule, labels, alert.value)
        if "pod" in labels and "gpu" not in labels:
            where = f"pod {labels.get('namespace', '')}/{labels['pod']}"
        elif "gpu" in labels:
            where = f"GPU {labels['gpu']} ({labels.get('modelName', '')}) on "
            where += labels.get("Hostname", "")
            if labels.get("pod"):
                where += f", held by pod {labels.get('namespace', '')}/{labels['pod']}"
        else:
            where = ", ".join(f"{k}={v}" for k, v in alert.labels) or "fleet"
        return {"summary": f"{where}: alert {alert.rule}", "description": ""}

    return annotate


def postable_alerts(
    alerts: Iterable[Alert],
    now: float,
    *,
    annotate: Annotate,
    external_url: str = "",
    resend_delay_s: float = RESEND_DELAY_S,
    wall: WallTime = same_time,
) -> list[dict[str, Any]]:
    """Firing and resolved alerts as Prometheus posts them to Alertmanager (``/api/v2/alerts``:
    labels, annotations, startsAt = when it fired, endsAt = when it resolved, or 4 resend
    delays ahead while firing, so that Alertmanager resolves it if the sender goes away).
    Times are the plane's ``now`` and the alerts', through ``wall``; the resend delays are
    seconds of the wall (Alertmanager's clock)."""
    posted: list[dict[str, Any]] = []
    for alert in alerts:
        if alert.fired_at is None or alert.state not in (AlertState.FIRING, AlertState.RESOLVED):
            continue
        if alert.resolved_at is not None:
            ends = wall(alert.resolved_at)
        else:
            ends = wall(now) + 4 * resend_delay_s
        posted.append(
            {
                "labels": dict(alert.labels),
                "annotations": dict(annotate(alert)),
                "startsAt": rfc3339(wall(alert.fired_at)),
                "endsAt": rfc3339(ends),
                "generatorURL": generator_url(external_url, alert.rule),
            }
        )
    return posted
