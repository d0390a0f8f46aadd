"""Where gpufleet's alert notifications go: an Alertmanager configuration file, in its own terms,
read into the dispatcher's :class:`~gpufleet.telemetry.alert_dispatch.Route` s.

Owns the format (pydantic, ``extra="forbid"``), the subset of Alertmanager's ``alertmanager.yml``
that webhooks need::

    route:
      receiver: ops                  # required: the receiver of alerts no child route takes
      group_by: [alertname]          # default [alertname]; ['...'] groups by every label
      group_wait: 30s                # defaults as Alertmanager's: 30s, 5m, 4h
      group_interval: 5m
      repeat_interval: 4h
      routes:                        # optional, one level: the first that matches takes an
        - receiver: pager            # alert (and the next ones too with continue: true)
          matchers: ['severity="critical"']   # equality only; or match: {severity: critical}
          continue: false
          group_by: [alertname, Hostname]     # the timings and group_by default to the root's
    receivers:
      - name: ops
        webhook_configs:
          - url: http://chat-bridge:8080/alerts
            send_resolved: true      # default true
            max_alerts: 0            # default 0: all
      - name: pager
        webhook_configs: [{url: "https://pager.example/hook"}]

and :func:`webhook_routing`, the same for one URL (``--alert-webhook``). Errors name the file
and the field (``alerts.yml: route.routes[0].matchers[0]: ...``); the rest of Alertmanager's
configuration (other receiver kinds, inhibition, templates, regex matchers) is refused with a
message saying so, never ignored. It sends nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.manifests import describe, load_documents
from gpufleet.io.validation import validation_error
from gpufleet.model.alerts import LABEL_NAME, LabelSet, label_set
from gpufleet.telemetry.alert_dispatch import (
    DEFAULT_GROUP_BY,
    GROUP_INTERVAL_S,
    GROUP_WAIT_S,
    REPEAT_INTERVAL_S,
    Route,
    format_matchers,
)

#: Prometheus' durations (``1h30m``, ``1d``, ``2w``), as Alertmanager reads them.
_DURATION = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$"
)
_UNITS = (365 * 86_400, 7 * 86_400, 86_400, 3_600, 60, 1, 0.001)
_MATCHER = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")
_UNSUPPORTED_RECEIVERS = (
    "email_configs", "pagerduty_configs", "slack_configs", "opsgenie_configs",
    "victorops_configs", "pushover_configs", "wechat_configs", "telegram_configs",
    "sns_configs", "webex_configs", "discord_configs", "msteams_configs",
)  # fmt: skip


def parse_prometheus_duration(value: object) -> float:
    """Seconds, from a Prometheus duration (``30s``, ``5m``, ``4h``, ``1d``) or a number."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a duration such as 30s, 5m or 4h, got {describe(value)}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected a duration of 0 or more, got {value}")
        return float(value)
    found = _DURATION.match(value.strip())
    if not value.strip() or found is None:
        raise ValueError(f"expected a duration such as 30s, 5m, 4h or 1d, got {quoted(value)}")
    return float(sum(int(n) * unit for n, unit in zip(found.groups(), _UNITS, strict=True) if n))


def parse_matcher(text: str) -> tuple[str, str]:
    """An equality matcher ``name="value"`` (or ``name=value``)."""
    found = _MATCHER.match(text)
    if found is None:
        raise ValueError(f'expected a matcher such as severity="critical", got {quoted(text)}')
    name, op, value = found.groups()
    if op != "=":
        raise ValueError(f"only equality matchers (=) are supported, got {op} in {quoted(text)}")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return name, value


def _checked_matcher(text: str) -> str:
    parse_matcher(text)
    return text


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class WebhookConfig(_Strict):
    url: str
    send_resolved: bool = True
    max_alerts: int = Field(default=0, ge=0)

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"expected an http:// or https:// URL, got {quoted(url)}")
        return url


class ReceiverConfig(_Strict):
    name: str = Field(min_length=1)
    webhook_configs: list[WebhookConfig] = Field(default_factory=list)


class _Timings(_Strict):
    group_by: list[str] | None = None
    group_wait: float | None = None
    group_interval: float | None = None
    repeat_interval: float | None = None

    @field_validator("group_wait", "group_interval", "repeat_interval", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        return parse_prometheus_duration(value)

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, names: list[str]) -> list[str]:
        if "..." in names and len(names) > 1:
            raise ValueError("'...' groups by every label and stands alone")
        for name in names:
            if name != "..." and not LABEL_NAME.fullmatch(name):
                raise ValueError(f"{quoted(name)} is not a label name")
        return names


class ChildRouteConfig(_Timings):
    receiver: str | None = None
    matchers: list[Annotated[str, AfterValidator(_checked_matcher)]] = Field(default_factory=list)
    match: dict[str, str] = Field(default_factory=dict)
    continue_: bool = Field(default=False, alias="continue")


class RootRouteConfig(_Timings):
    receiver: str = Field(min_length=1)
    routes: list[ChildRouteConfig] = Field(default_factory=list)


class AlertRoutingConfig(_Strict):
    route: RootRouteConfig
    receivers: list[ReceiverConfig] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class AlertRouting:
    """The dispatcher's routes, in matching order (a child route, then its receiver's other
    webhooks; the root's last, as fallbacks), and where they were read from."""

    routes: tuple[Route, ...]
    source: str = ""


def webhook_routing(url: str, send_resolved: bool = True) -> AlertRouting:
    """One receiver, one webhook, Alertmanager's defaults (``--alert-webhook URL``)."""
    try:
        WebhookConfig(url=url)
    except ValidationError as error:
        reason = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise InputError("--alert-webhook", reason) from None
    route = Route("webhook", send_resolved=send_resolved, fallback=True, target=url)
    return AlertRouting((route,), "--alert-webhook")


def read_alert_routing(path: str | Path) -> AlertRouting:
    """The routes of an Alertmanager-style file (see the module docstring)."""
    source = str(path)
    documents = load_documents(path)
    if len(documents) != 1 or not isinstance(documents[0][2], Mapping):
        found = "nothing" if not documents else describe(documents[-1][2])
        raise InputError(source, f"expected one mapping with route and receivers, got {found}")
    return alert_routing_from_dict(documents[0][2], source)


def alert_routing_from_dict(data: Mapping[str, Any], source: str) -> AlertRouting:
    """The routes of a configuration already loaded (a mapping)."""
    for key in data:
        if key not in ("route", "receivers"):
            raise InputError(
                source,
                "gpufleet sends webhooks by route and receivers only; "
                f"{quoted(key)} is not supported (known: route, receivers)",
                field=str(key),
            )
    for index, receiver in enumerate(data.get("receivers") or []):
        if isinstance(receiver, Mapping):
            for kind in _UNSUPPORTED_RECEIVERS:
                if kind in receiver:
                    raise InputError(
                        source,
                        "gpufleet sends webhook_configs only (Alertmanager's webhook payload); "
                        f"forward {kind} through an Alertmanager (gpufleet can push to one)",
                        field=f"receivers[{index}].{kind}",
                    )
    try:
        parsed = AlertRoutingConfig.model_validate(data)
    except ValidationError as error:
        raise validation_error(error, data, source, None, AlertRoutingConfig) from None
    receivers: dict[str, ReceiverConfig] = {}
    for index, receiver in enumerate(parsed.receivers):
        if receiver.name in receivers:
            raise InputError(
                source, f"a second receiver named {quoted(receiver.name)}", None,
                f"receivers[{index}].name",
            )  # fmt: skip
        receivers[receiver.name] = receiver
    root = parsed.route
    _known(receivers, root.receiver, source, "route.receiver")
    routes: list[Route] = []
    for index, child in enumerate(root.routes):
        where = f"route.routes[{index}]"
        receiver = child.receiver or root.receiver
        _known(receivers, receiver, source, f"{where}.receiver")
        matchers = _matchers(child, source, where)
        if not matchers:
            raise InputError(source, "a child route needs matchers (or match)", None, where)
        key = "{}/" + format_matchers(matchers)
        try:
            routes += _expand(receivers[receiver], child, root, matchers, child.continue_, key)
        except ValueError as error:
            raise InputError(source, str(error), None, where) from None
    try:
        routes += _expand(receivers[root.receiver], root, root, (), False, "{}", fallback=True)
    except ValueError as error:
        raise InputError(source, str(error), None, "route") from None
    return AlertRouting(tuple(routes), source)


def _known(receivers: Mapping[str, ReceiverConfig], name: str, source: str, field: str) -> None:
    if name not in receivers:
        known = ", ".join(receivers)
        raise InputError(
            source, f"no receiver named {quoted(name)} (receivers: {known})", None, field
        )


def _matchers(child: ChildRouteConfig, source: str, where: str) -> LabelSet:
    pairs = dict(child.match)
    for index, text in enumerate(child.matchers):
        name, value = parse_matcher(text)
        if name in pairs and pairs[name] != value:
            raise InputError(
                source, f"label {name} is matched twice", None, f"{where}.matchers[{index}]"
            )
        pairs[name] = value
    return label_set(pairs)


def _expand(
    receiver: ReceiverConfig,
    timings: _Timings,
    root: _Timings,
    matchers: LabelSet,
    continue_: bool,
    key: str,
    fallback: bool = False,
) -> list[Route]:
    """One route per webhook of ``receiver`` (each but the last continues to the next; a
    receiver without webhooks takes the alerts and sends nothing: target ``""``)."""
    group_by = timings.group_by if timings.group_by is not None else root.group_by
    if group_by is None:
        group_by = list(DEFAULT_GROUP_BY)
    webhooks: list[WebhookConfig | None] = [*receiver.webhook_configs] or [None]
    routes = []
    for position, webhook in enumerate(webhooks):
        routes.append(
            Route(
                receiver=receiver.name,
                group_by=None if group_by == ["..."] else tuple(group_by),
                group_wait_s=_pick(timings.group_wait, root.group_wait, GROUP_WAIT_S),
                group_interval_s=_pick(
                    timings.group_interval, root.group_interval, GROUP_INTERVAL_S
                ),
                repeat_interval_s=_pick(
                    timings.repeat_interval, root.repeat_interval, REPEAT_INTERVAL_S
                ),
                send_resolved=webhook.send_resolved if webhook else True,
                matchers=matchers,
                continue_=continue_ if position == len(webhooks) - 1 else True,
                fallback=fallback,
                key=key,
                target=webhook.url if webhook else "",
                max_alerts=webhook.max_alerts if webhook else 0,
            )
        )
    return routes


def _pick(own: float | None, root: float | None, default: float) -> float:
    return own if own is not None else root if root is not None else default
