"""A real Alertmanager for tests.

Owns :class:`AlertmanagerProcess`: Debian's ``prometheus-alertmanager`` started on a free
loopback port (no cluster gossip), with a config of the test's: one route to one webhook
receiver (a :class:`~gpufleet.testing.webhook_receiver.WebhookReceiver`'s URL), its grouping and
timers; its data and log in the test's directory; stopped after. Tests skip when
:func:`alertmanager_binary` finds none. Starting and stopping are
:mod:`gpufleet.testing.prometheus`' (polling with a deadline, never a sleep).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from gpufleet.testing.prometheus import go_duration, start_on_free_port, stop_process

#: Debian's package's name for it, then upstream's.
ALERTMANAGER_NAMES = ("prometheus-alertmanager", "alertmanager")
#: Where Debian's package installs it; ``PATH`` is looked at first.
DEBIAN_ALERTMANAGER = Path("/usr/bin/prometheus-alertmanager")


def alertmanager_binary() -> str | None:
    """The Alertmanager server to run, or None where there is none."""
    for name in ALERTMANAGER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return str(DEBIAN_ALERTMANAGER) if DEBIAN_ALERTMANAGER.exists() else None


class AlertmanagerProcess:
    """Alertmanager on ``127.0.0.1:<port>`` routing every alert to the webhook
    ``webhook_url`` (receiver ``receiver``), grouped by ``group_by``, a new group first sent
    after ``group_wait_s``, changes every ``group_interval_s``, repeats every
    ``repeat_interval_s``; resolutions sent when ``send_resolved``. Its data and log are under
    ``directory``. :meth:`start` returns once it is ready; :meth:`stop` (or ``with``) ends it."""

    def __init__(
        self,
        directory: Path,
        webhook_url: str,
        *,
        receiver: str = "hook",
        group_by: Sequence[str] = ("alertname",),
        group_wait_s: float = 1.0,
        group_interval_s: float = 1.0,
        repeat_interval_s: float = 3600.0,
        send_resolved: bool = True,
        binary: str | None = None,
    ) -> None:
        self.directory = directory
        self.webhook_url = webhook_url
        self.receiver = receiver
        self.group_by = tuple(group_by)
        self.group_wait_s = group_wait_s
        self.group_interval_s = group_interval_s
        self.repeat_interval_s = repeat_interval_s
        self.send_resolved = send_resolved
        self.binary = binary or alertmanager_binary()
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def target(self) -> str:
        """``host:port``, as Prometheus' ``alerting.alertmanagers`` names it."""
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "alertmanager.log"

    def config(self) -> dict[str, Any]:
        """The alertmanager.yml it runs with."""
        return {
            "route": {
                "receiver": self.receiver,
                "group_by": list(self.group_by),
                "group_wait": go_duration(self.group_wait_s),
                "group_interval": go_duration(self.group_interval_s),
                "repeat_interval": go_duration(self.repeat_interval_s),
            },
            "receivers": [
                {
                    "name": self.receiver,
                    "webhook_configs": [
                        {"url": self.webhook_url, "send_resolved": self.send_resolved}
                    ],
                }
            ],
        }

    def start(self, timeout_s: float = 20.0) -> AlertmanagerProcess:
        if self.binary is None:
            raise FileNotFoundError(
                "no alertmanager binary (Debian: apt-get install prometheus-alertmanager)"
            )
        binary = self.binary
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "alertmanager.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))

        def command(port: int) -> list[str]:
            return [
                binary,
                f"--config.file={config}",
                f"--storage.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",  # no gossip: a single instance, loopback only
            ]

        self._process, self.port = start_on_free_port(
            "alertmanager", command, self.log, "/-/ready", timeout_s
        )
        return self

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts it holds now (``GET /api/v2/alerts``)."""
        answer = httpx.get(f"{self.url}/api/v2/alerts", timeout=5.0)
        answer.raise_for_status()
        found: list[dict[str, Any]] = answer.json()
        return found

    def stop(self) -> None:
        stop_process(self._process)
        self._process = None

    def __enter__(self) -> AlertmanagerProcess:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
