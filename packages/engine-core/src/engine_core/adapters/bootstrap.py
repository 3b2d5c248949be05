"""Build the engine a Lambda needs from its environment. Imports botocore; handlers call it at module scope.

Environment (set by the Terraform function module):
    LOOM_STORE                        the state store (``adapters.STORES``): ``dynamodb`` (default), ``memory``
    LOOM_TABLE_NAME                   required by the ``dynamodb`` store
    LOOM_QUEUE_URL                    required
    LOOM_DLQ_URL                      the worker's failure notices
    LOOM_EVENT_BUS_NAME               status-change events (empty: none)
    LOOM_SHARDS, LOOM_LEASE_S, LOOM_RETENTION_DAYS, LOOM_MAX_STEPS, LOOM_MAX_TOTAL_ATTEMPTS,
    LOOM_SWEEP_MAX_ITEMS              see EngineSettings
AWS endpoints follow boto3's own configuration (AWS_ENDPOINT_URL for a local emulator); the clients come from
``clients``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING

from botocore.config import Config

from ..clock import Clock, SystemClock
from ..ports import EventPublisher, Metrics, StateStore, StepQueue
from ..registry import REGISTRY, Registry
from ..settings import EngineSettings, require_env
from . import build_store, clients
from .eventbridge import EventBridgePublisher
from .sqs import SqsQueue

if TYPE_CHECKING:
    from ..engine import Engine
    from ..sweeper import Sweeper

log = logging.getLogger("engine_core")


def client_config(settings: EngineSettings) -> Config:
    """Every boto3 client explicitly: the standard retry mode (with its retry quota) and connect and
    read timeouts well under the function's own (the control plane's and the sweeper's, not only the
    worker's), so a hung connection fails a call, not the invocation."""
    own_s = settings.invocation_timeout_s or settings.function_timeout_s
    read_s = 10.0 if own_s is None else max(2.0, min(10.0, own_s / 6))
    return Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=read_s,
                  tcp_keepalive=True)


PARTS = ("engine", "sweeper")
"""What a runtime builds on first use, and a handler may ask for at init (``parts``)."""


class Runtime:
    """One function's engine and sweeper over one store and queue, each built on first use: the sweeper's
    Lambda never imports the engine's step path, and the worker's never builds a sweeper. ``parts`` builds
    some now (what a function uses belongs in its init, not in its first invocation)."""

    def __init__(self, store: StateStore, queue: StepQueue, clock: Clock, settings: EngineSettings,
                 registry: Registry, metrics: Metrics | None = None, events: EventPublisher | None = None,
                 parts: Iterable[str] = ()):
        self.store, self.queue, self.clock, self.settings, self.registry = store, queue, clock, settings, registry
        self.metrics, self.events = metrics, events
        for part in parts:
            if part not in PARTS:
                raise ValueError(f"parts={tuple(parts)!r}: {part!r} is not a part of a runtime; name any of {PARTS}")
            getattr(self, part)

    @classmethod
    def around(cls, engine: Engine, sweeper: Sweeper, registry: Registry | None = None) -> Runtime:
        """A runtime over an engine and a sweeper built elsewhere (a test's runner); ``registry`` is what
        the routes read (default: the engine's)."""
        life = engine.life
        runtime = cls(life.store, life.queue, life.clock, engine.settings, registry or engine.registry, engine.metrics,
                      life.events)
        runtime.__dict__.update(engine=engine, sweeper=sweeper)  # what the cached properties would build
        return runtime

    @cached_property
    def engine(self) -> Engine:
        from ..engine import Engine

        return Engine(self.store, self.queue, self.registry, self.clock, self.settings, self.metrics, self.events)

    @cached_property
    def sweeper(self) -> Sweeper:
        from ..sweeper import Sweeper

        return Sweeper(self.store, self.queue, self.clock, self.settings, self.registry, self.metrics,
                       events=self.events)

    def release(self, receipt_handle: str) -> None:
        """Return a received step message to the queue now; a failure only leaves it for the visibility
        timeout (the record is reported failed either way, and the due index covers a lost one)."""
        try:
            self.queue.release(receipt_handle)
        except Exception:  # noqa: BLE001 - best effort: the record's redelivery does not depend on it
            log.warning("could not release the record for redelivery now; it returns after the visibility timeout",
                        exc_info=True)


def from_environment(env: Mapping[str, str] | None = None, metrics: Metrics | None = None,
                     registry: Registry = REGISTRY, load_workflows: bool = True,
                     parts: Iterable[str] = ("engine",)) -> Runtime:
    env = os.environ if env is None else env
    settings = EngineSettings.from_env(env)
    if load_workflows:
        registry.load_entry_points()
    config = client_config(settings)
    store = build_store(env, settings, config)
    queue = SqsQueue(clients.client("sqs", config), require_env("LOOM_QUEUE_URL", env),
                     env.get("LOOM_DLQ_URL") or None)
    clock = SystemClock()
    bus = env.get("LOOM_EVENT_BUS_NAME") or ""
    events = EventBridgePublisher(clients.client("events", config), bus) if bus else None
    return Runtime(store, queue, clock, settings, registry, metrics, events, parts)
