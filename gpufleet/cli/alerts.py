"""``gpufleet alerts``: the alerts of a running control plane, and the rules written for
Prometheus (``gpufleet alerts export``).

Owns the listing (rendered by :func:`gpufleet.cli.remote_render.alerts_table`) and the command
line of the rules: which rules (the built-in ones, the user's GPUAlertRule
files, both), refusing two rules of one name across them, and where the result goes. The
translation to PromQL is :mod:`gpufleet.io.fleet.prometheus_rules`; reading the files is
:mod:`gpufleet.io.fleet.alert_rules`. ``deploy/prometheus-rules.yaml`` is this command's output with
its defaults and ``--namespace gpufleet-system`` (a test keeps them equal).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpufleet.api.schemas import AlertStateName
from gpufleet.cli.output import console, fail
from gpufleet.cli.remote import OutputOption, ServerOption, TokenOption, connect, remote_errors
from gpufleet.cli.remote_render import Clock, Output, alerts_table, dump
from gpufleet.cli.tables import show
from gpufleet.io.errors import InputError, quoted

if TYPE_CHECKING:
    from gpufleet.model.alerts import AlertRule

app = typer.Typer(
    help="Alerts on the GPUs' metrics: list them (the default), or export the rules.",
    invoke_without_command=True,
)


@app.callback()
@remote_errors
def alerts(
    ctx: typer.Context,
    output: OutputOption = None,
    state: Annotated[
        AlertStateName | None,
        typer.Option("--state", help="only alerts in this state", case_sensitive=False),
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """List the alerts of a running control plane (pending, firing, recently resolved).
    Example: gpufleet alerts --state firing -o wide"""
    if ctx.invoked_subcommand is not None:
        return
    with connect(server, token) as client:
        found = client.list_alerts(state.value if state else None)
        if output in (Output.JSON, Output.YAML):
            assert output is not None
            sys.stdout.write(dump(found, output))
            return
        if found.error:
            console.print(f"warning: {found.error}", markup=False, style="yellow")
        if not found.alerts:
            console.print(f"No alerts ({found.rules} rules evaluated).", markup=False)
            return
        show(alerts_table(found.alerts, Clock.of(client.cluster()), wide=output is Output.WIDE))


class ExportFormat(StrEnum):
    #: A Kubernetes ``PrometheusRule`` (the Prometheus Operator's ``monitoring.coreos.com/v1``).
    PROMETHEUS_RULE = "prometheusrule"
    #: A plain Prometheus rule file (``groups:``), for ``rule_files`` and ``promtool``.
    RULES = "rules"


def collect_rules(paths: list[Path], builtin: bool) -> list[AlertRule]:
    """The built-in rules (when ``builtin``) then each path's, in order; a name given twice is
    an InputError naming the file of the second."""
    # The rule readers for export only: ``alerts list`` asks the server and starts faster.
    from gpufleet.io.fleet.alert_rules import KIND, builtin_alert_rules, read_alert_rules

    rules = builtin_alert_rules() if builtin else []
    seen = {rule.name: "the built-in rules" for rule in rules}
    for path in paths:
        for rule in read_alert_rules(path):
            if rule.name in seen:
                hint = " (pass --no-builtin to replace them)" if builtin else ""
                raise InputError(
                    str(path),
                    f"a second {KIND} named {quoted(rule.name)}; the first is in "
                    f"{seen[rule.name]}{hint}",
                )
            seen[rule.name] = str(path)
            rules.append(rule)
    return rules


def render(rules: list[AlertRule], export_format: ExportFormat, namespace: str | None) -> str:
    """The YAML ``gpufleet alerts export`` writes."""
    from gpufleet.io.fleet.prometheus_rules import DEFAULT_NAME, prometheus_rule, rule_file, to_yaml

    if export_format is ExportFormat.RULES:
        return to_yaml(rule_file(rules))
    return to_yaml(prometheus_rule(rules, DEFAULT_NAME, namespace))


@app.command("export")
def export(
    rules: Annotated[
        list[Path] | None,
        typer.Option(
            "--rules",
            help="A GPUAlertRule file, or a directory of them (*.yaml); repeatable.",
        ),
    ] = None,
    builtin: Annotated[
        bool, typer.Option("--builtin/--no-builtin", help="Include gpufleet's built-in rules.")
    ] = True,
    export_format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="prometheusrule: a Kubernetes PrometheusRule (Prometheus Operator); "
            "rules: a plain Prometheus rule file.",
        ),
    ] = ExportFormat.PROMETHEUS_RULE,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="metadata.namespace of the PrometheusRule."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Write the alert rules (built-in and yours) as a PrometheusRule or a Prometheus rule
    file, with the PromQL that gives the verdicts gpufleet's own engine gives."""
    try:
        chosen = collect_rules(list(rules or []), builtin)
    except InputError as error:
        raise fail(escape(str(error))) from None
    if not chosen:
        raise fail("no rules to export: pass --rules FILE or leave --builtin on")
    if namespace is not None and export_format is ExportFormat.RULES:
        raise fail("--namespace applies to --format prometheusrule only")
    text = render(chosen, export_format, namespace)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text)
    except OSError as error:
        raise fail(f"{output}: cannot write: {error.strerror}") from None
