"""The rendezvous ports of this machine's live gangs: :class:`PortBook`.

A gang of several pods meets on one loopback TCP port (torchrun's ``MASTER_PORT``), which the
kernel picks (:func:`~.devices_env.free_port`: bind port 0, read it, close). Nothing holds the
port between that draw and the gang's rank 0 listening on it, and the kernel hands out the
same ephemeral ports again (2,000 draws on a Linux box gave 121 repeats), so two live gangs
could be told the same port and one fail to meet. The book remembers the port each live gang
holds (from its start until the gang ends, or gives its places back), and draws again while
the kernel's choice is one of them. A restarted server gives the book the ports its running
gangs keep with their runs (:meth:`PortBook.hold`).

It starts nothing and decides nothing but which port a gang gets.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.backends.local.devices_env import free_port

#: How many draws a gang's port may take before the book gives up (an ``OSError``): with the
#: kernel's ~28,000 ephemeral ports and a few gangs held, one or two draws are the rule.
MAX_DRAWS = 64


class PortBook:
    """Which gang (by workload key) holds which rendezvous port (see the module docstring)."""

    def __init__(self, probe: Callable[[], int] = free_port) -> None:
        self._probe = probe
        self._port_of: dict[str, int] = {}

    def draw(self, holder: str) -> int:
        """A port no other live gang holds, held by ``holder`` from now on (its port before,
        if any, is given back once the new one is drawn, so the two differ). Raises
        :class:`OSError` when :data:`MAX_DRAWS` draws all gave held ports."""
        held = set(self._port_of.values())
        for _ in range(MAX_DRAWS):
            port = self._probe()
            if port not in held:
                self._port_of[holder] = port
                return port
        raise OSError(f"no free rendezvous port for {holder} after {MAX_DRAWS} draws")

    def hold(self, holder: str, port: int) -> None:
        """``holder`` holds ``port`` (a running gang found again at a restart)."""
        self._port_of[holder] = port

    def release(self, holder: str) -> None:
        """``holder`` (a gang) has ended: its port may be drawn again."""
        self._port_of.pop(holder, None)

    def port_of(self, holder: str) -> int | None:
        """The port ``holder`` holds (None: none)."""
        return self._port_of.get(holder)

    @property
    def held(self) -> frozenset[int]:
        """Every port a live gang holds."""
        return frozenset(self._port_of.values())


__all__ = ["MAX_DRAWS", "PortBook"]
