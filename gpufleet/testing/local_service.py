"""Builders for tests of ``serve --local``: a plane over a local machine, its app, tokens.

:class:`LocalHarness` holds a :class:`~gpufleet.service.local_plane.LocalControlPlane` over a
:class:`~gpufleet.backends.local.machine.LocalMachine` (fake GPUs; processes real), the FastAPI
app over it, and tokens for an admin and the tenant ``research`` (queue ``research`` of 8
GPUs; priority classes ``low`` and ``high``). Tests drive the loop themselves
(:meth:`LocalHarness.run_until`: a turn, then a wait on the machine's FIFO, never a fixed
sleep); :meth:`LocalHarness.restart` drops the plane as a killed server would (the processes
run on) and opens a new one on the same database and state directory.

Given a ``devices`` factory (a :class:`~gpufleet.devices.source.DeviceSource`, such as the
node agent's over the fake NVML), the plane observes the GPUs: a test moves the plane's clock
with :class:`MovableClock` (``clock``: the machine's wall clock plus an offset the test adds
to) and calls ``plane.observing.round()`` itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.backends.local.machine import LocalMachine, WallClock
from gpufleet.backends.local.node import machine_node
from gpufleet.backends.local.restarts import CrashBackoff
from gpufleet.devices.source import DeviceSource
from gpufleet.model.inventory import NodeInventory
from gpufleet.scheduling.admission import AdmissionConfig
from gpufleet.service.local_plane import LocalControlPlane
from gpufleet.service.local_users import TenantUsers
from gpufleet.service.observatory import STEP_S
from gpufleet.service.plane_book import PRIORITY_CLASS, QUEUE, ServeOptions, create_token
from gpufleet.service.store import Store
from gpufleet.testing.service import priority_class_doc, queue_doc

TENANT = "research"


class MovableClock(WallClock):
    """The wall clock (seconds since the epoch) plus an offset a test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class LocalHarness:
    """See the module docstring."""

    inventory: NodeInventory
    root: Path
    tokens: dict[str, str] = field(default_factory=dict)
    #: Opens the GPUs the plane observes (None: it reads no samples).
    devices: Callable[[], DeviceSource] | None = None
    #: The machine's clock, when a test moves it (None: the wall clock).
    clock: MovableClock | None = None
    observe_step_s: float = STEP_S
    #: The back-off before a restart in place: short, so that tests need not wait 10 s.
    crash_backoff: CrashBackoff = field(default_factory=lambda: CrashBackoff(0.05, 0.2, 60.0))
    #: Who each tenant's processes run as (None: the server's user, root allowed).
    users: TenantUsers | None = None
    plane: LocalControlPlane = field(init=False)
    machine: LocalMachine = field(init=False)
    store: Store = field(init=False)
    app: FastAPI = field(init=False)

    @classmethod
    def start(
        cls,
        inventory: NodeInventory,
        root: Path,
        devices: Callable[[], DeviceSource] | None = None,
        clock: MovableClock | None = None,
        observe_step_s: float = STEP_S,
        users: TenantUsers | None = None,
    ) -> LocalHarness:
        store = Store(root / "plane.db")
        store.put_object(QUEUE, TENANT, queue_doc(TENANT, 8, namespaces=[TENANT]))
        for name, value in (("low", 0), ("high", 1000)):
            store.put_object(PRIORITY_CLASS, name, priority_class_doc(name, value))
        tokens = {
            "admin": create_token(store, "admin", "admin"),
            TENANT: create_token(store, TENANT, "tenant"),
        }
        store.close()
        harness = cls(inventory, root, tokens, devices, clock, observe_step_s, users=users)
        harness.open()
        return harness

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def open(self) -> None:
        """(Re)open the plane on the database and state directory, as a server starting."""
        self.store = Store(self.root / "plane.db")
        node = machine_node(self.inventory, "box", 64_000, 262_144)
        self.machine = LocalMachine(
            self.inventory, self.state_dir, node=node, grace_s=5.0, allow_root=True,
            crash_backoff=self.crash_backoff,
        )  # fmt: skip
        if self.clock is not None:
            self.machine.clock = self.clock
        options = ServeOptions(admission=AdmissionConfig(min_runtime=0.0))
        self.plane = LocalControlPlane(
            self.store,
            self.machine,
            options,
            self.users or TenantUsers(allow_root=True),
            devices=None if self.devices is None else self.devices(),
            observe_step_s=self.observe_step_s,
        )
        self.app = create_app(self.plane)

    def restart(self, while_down: Callable[[], None] | None = None, *, clean: bool = False) -> None:
        """Drop the plane as a killed server would (its processes run on) and open again;
        ``clean``: stop it as a server stopping does first (its series saved); ``while_down``
        is called in between (what happens while no server runs)."""
        if clean:
            self.plane.stop()
        else:
            self.machine.close()
            if self.plane.devices is not None:
                self.plane.devices.close()
        self.store.close()
        if while_down is not None:
            while_down()
        self.open()

    def client(self, who: str = TENANT) -> TestClient:
        client = TestClient(self.app)
        client.headers["Authorization"] = f"Bearer {self.tokens[who]}"
        return client

    def submit(self, *documents: dict[str, Any], who: str = TENANT) -> Any:
        """POST the documents; the response's JSON (and its status in ``"status"``)."""
        response = self.client(who).post(
            "/api/v1/workloads",
            content=yaml.safe_dump_all(list(documents)),
            headers={"Content-Type": "application/yaml"},
        )
        body = response.json()
        body["status"] = response.status_code
        return body

    def workload(self, name: str, namespace: str = TENANT) -> Any:
        return self.client("admin").get(f"/api/v1/workloads/{namespace}/{name}").json()

    def log(self, name: str, namespace: str = TENANT, **params: Any) -> Any:
        url = f"/api/v1/workloads/{namespace}/{name}/logs"
        return self.client("admin").get(url, params=params).json()

    def run_until(self, condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
        """Scheduling turns (each followed by a wait for a process to end, at most 50 ms)
        until ``condition`` holds."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s} s waiting for {condition}")
            self.plane.turn()
            self.machine.wait(self.machine.clock.now() + 0.05)

    def state_is(self, name: str, *states: str) -> Callable[[], bool]:
        def check() -> bool:
            return str(self.workload(name).get("state")) in states

        check.__name__ = f"{name} in {states}"
        return check

    @contextmanager
    def serving(self) -> Iterator[None]:
        """The plane's loop in its thread, as ``serve`` runs it (for clients that wait on
        it, such as ``gpufleet run --follow``); its threads stopped after (an observatory
        thread left running would save into the store a test closes: a crash in SQLite), the
        machine left open."""
        self.plane.start()
        try:
            yield
        finally:
            self.plane.stop_threads()

    def shut_down(self) -> None:
        """Stop what still runs (no grace), forget what waits (or a turn would start it),
        and wait for the runs to end: a test leaves nothing."""
        machine = self.machine
        machine.grace_s = 0.0
        machine.cancel([*machine.state.bound, *machine.waiting])
        self.run_until(lambda: not machine.supervisor.running)
        machine.close()
        if self.plane.devices is not None:
            self.plane.devices.close()
        self.store.close()
