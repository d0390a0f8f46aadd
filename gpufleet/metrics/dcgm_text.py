"""dcgm-exporter's format written straight to text: the node agent's ``/metrics``.

Owns :func:`render`, the Prometheus text exposition (version 0.0.4) of one reading, with the
same families, order, help texts, labels and values as :class:`~gpufleet.metrics.dcgm.
DcgmCollector` gives through prometheus-client (a test parses both and compares them). Why not
prometheus-client here: its exposition escapes and checks every label of every sample, and a
node of 8 GPUs with 64 pods attributed is ~600 samples of ~10 labels, about 9 ms a scrape on
these machines against the 20 ms p99 budget of the whole scrape; here each series' label text
is made once and shared by its nine families (about 1 ms), and the agent does not import the
library at all (memory counts on every GPU node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpufleet.metrics import families as f
from gpufleet.metrics.dcgm_series import FIELDS, series_of, xid_labels
from gpufleet.telemetry.source import NodeTelemetry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value))


def _header(lines: list[str], name: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {_help(help_text)}")
    lines.append(f"# TYPE {name} gauge")


def render(nodes: Sequence[NodeTelemetry]) -> str:
    """The exposition text of one reading of ``nodes``."""
    series = [(node, one) for node in nodes for one in series_of(node)]
    texts = [[_labels(labels) for labels in one.per_pod] for _, one in series]
    lines: list[str] = []
    for family, value, on_mig in FIELDS:
        name = family.name
        _header(lines, name, family.help)
        for (_, one), label_texts in zip(series, texts, strict=True):
            if one.sample.mig_profile and not on_mig:
                continue
            number = _number(value(one.sample))
            lines.extend(f"{name}{text} {number}" for text in label_texts)
    xid = f.DCGM_XID_ERRORS.name
    _header(lines, xid, f.DCGM_XID_ERRORS.help)
    for _, one in series:
        if one.sample.mig_profile:
            continue
        code = one.sample.xid
        extra = xid_labels(code)
        number = _number(code)
        lines.extend(f"{xid}{_labels({**labels, **extra})} {number}" for labels in one.per_pod)
    allocated = f.GPU_ALLOCATED.name
    _header(lines, allocated, f.GPU_ALLOCATED.help)
    for node, one in series:
        fraction = node.allocated.get(one.sample.uuid, 0.0)
        lines.append(f"{allocated}{_labels(one.device)} {_number(fraction)}")
    lines.append("")
    return "\n".join(lines)
