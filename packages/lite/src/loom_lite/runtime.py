"""``LiteRuntime``: the engine, the sweeper and the control plane's API on one SQLite file, in one process.

What the three Lambdas, SQS, EventBridge's schedule and the Function URL do on AWS, each in a loop here:

- the worker (``worker.Worker``) on the main thread: receive, ``Engine.process`` with the delivery's
  deadline, ack or release;
- the sweeper on a thread, every ``sweep_every_s``: the same ``Sweeper.sweep`` (due timers, lost
  messages, owed housekeeping), then the items whose TTL passed are deleted, as DynamoDB's TTL does;
- the API (``api.ApiServer``) on 127.0.0.1, recorded in the per-user state file for ``loom``;
- with ``LOOM_SCHEDULES``, EventBridge Scheduler's firings on a thread (``scheduler.Scheduler``).

Several processes may run on one file (more workers, or a second ``loom dev``): every store write is a
conditional transaction under the file's write lock, and the queue hands a message to one receiver at a
time. A process killed anywhere loses nothing committed; what it held is re-driven when its lease ends.
They must serve the same workflows (``peers``): one that serves others is refused at start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from engine_core import REGISTRY, Outcome, Registry, StorageError, SweepReport, SystemClock
from engine_core.adapters.bootstrap import Runtime
from engine_core.adapters.sqlite import SqliteStore
from engine_core.adapters.sqlite_queue import SqliteQueue
from engine_core.clock import Clock
from engine_core.engine import check_fits
from engine_core.live import Dropped, dropped, live_counts

from . import state
from .api import ApiServer
from .config import LiteConfig
from .peers import Peers
from .scheduler import Scheduler
from .worker import Worker

log = logging.getLogger("loom_lite")


class LiteRuntime:
    """Engine, sweeper and API on ``config.db``.

    Example:
        >>> runtime = LiteRuntime(LiteConfig(db=Path(".loom/loom.db")))
        >>> runtime.start()        # the API and the sweeper, on threads
        >>> runtime.run_worker()   # the worker, on this thread, until runtime.stop()
    """

    def __init__(self, config: LiteConfig, registry: Registry = REGISTRY, clock: Clock | None = None,
                 on_outcome: Callable[[Outcome], None] | None = None,
                 on_sweep: Callable[[SweepReport], None] | None = None):
        settings = config.settings
        check_fits(registry, settings)  # a step whose budget cannot fit a delivery stops here, naming both
        self.config, self.registry = config, registry
        self.store = SqliteStore(str(config.db), shards=settings.shards, synchronous=config.synchronous,
                                 busy_timeout_ms=config.busy_timeout_ms)
        self.peers = Peers(self.store.db, registry, renew_s=config.sweep_every_s)
        try:
            self.peers.join()  # a live process on the file that serves other workflows: refused, naming it
        except BaseException:
            self.store.close()
            raise
        self.clock = clock or SystemClock()
        self.queue = SqliteQueue(self.store.db, self.clock, max_receives=config.max_receives)
        self.runtime = Runtime(self.store, self.queue, self.clock, settings, registry, parts=("engine", "sweeper"))
        """What the control plane's routes take (the Lambda bootstrap's type)."""
        self.engine, self.sweeper = self.runtime.engine, self.runtime.sweeper
        self.stop_event = threading.Event()
        self.worker = Worker(self.engine, self.queue, config.delivery_s, config.visibility_s, config.poll_s,
                             self.stop_event, on_outcome)
        self.on_sweep = on_sweep
        self.scheduler = Scheduler(self.engine, config.schedules, self.clock, config.delivery_s) \
            if len(config.schedules) else None
        self.api: ApiServer | None = None
        self._threads: list[threading.Thread] = []
        self._recorded = False

    @property
    def url(self) -> str:
        if self.api is None:
            raise RuntimeError("the API is not serving: call start() first")
        return self.api.url

    def start(self, api: bool = True, sweeper: bool = True, worker_thread: bool = False,
              scheduler: bool = True) -> LiteRuntime:
        """Serve the API and run the sweeper (and the schedules' firings, if any) on threads; ``worker_thread``:
        the worker too (then a step's timeout is checked only when its body returns: SIGALRM reaches the main
        thread alone)."""
        if api:
            schedules = self.config.schedules if self.scheduler is None else self.scheduler.listed()
            self.api = ApiServer(self.runtime, self.config.host, self.config.port, schedules)
            self.api.start()
            if self.config.record:
                state.record(self.api.url, self.config.db)
                self._recorded = True
        loops = ([("loom-lite-sweeper", self._sweep_loop)] if sweeper else []) + (
            [("loom-lite-worker", self.worker.run)] if worker_thread else []) + (
            [("loom-lite-scheduler", self._schedule_loop)] if scheduler and self.scheduler is not None else [])
        for name, target in loops:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stranded(self) -> list[Dropped]:
        """The workflow versions live executions on this file run on that this process does not serve: each
        such execution fails at its next delivery (``engine_core.live``; reads the due index once)."""
        counts = live_counts(self.store, self.config.settings.shards, self.clock.now())
        return dropped(counts, {n: self.registry.versions(n) for n in self.registry.names()})

    def run_worker(self) -> None:
        """The worker loop on this thread, until ``stop()`` (or KeyboardInterrupt)."""
        self.worker.run()

    def sweep_once(self) -> SweepReport | None:
        try:
            report = self.sweeper.sweep()
            self.store.reap_expired(self.clock.now())
        except Exception:  # noqa: BLE001 - the next tick tries again, as the next schedule would
            log.exception("the sweep failed; the next one tries again")
            return None
        if self.on_sweep is not None:
            self.on_sweep(report)
        return report

    def _sweep_loop(self) -> None:
        while not self.stop_event.wait(self.config.sweep_every_s):
            self.sweep_once()
            try:
                self.peers.beat()
            except StorageError:  # the file is busy or failing: the sweep above says so; the next tick beats
                pass

    def _schedule_loop(self) -> None:
        assert self.scheduler is not None
        while not self.stop_event.wait(self.scheduler.wait_s()):
            self.scheduler.tick()

    def stop(self) -> None:
        """Stop the loops and the API, forget the state file's record, close the file. Safe to call twice."""
        self.stop_event.set()
        self.queue.sent.set()  # wakes a waiting worker
        if self.api is not None:
            self.api.stop()
            self.api = None
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()
        if self._recorded:
            state.forget()
            self._recorded = False
        try:
            self.peers.leave()
        except StorageError:
            pass  # its record stops counting when its process is gone
        self.store.close()

    def __enter__(self) -> LiteRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
