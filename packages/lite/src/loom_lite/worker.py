"""The worker loop: what Lambda's SQS event source mapping and the worker handler do, in one loop.

Receive one message (hidden for the visibility timeout), give ``Engine.process`` the delivery's deadline
(``LiteConfig.delivery_s``, as a Lambda invocation's timeout), then acknowledge it, or release it for an
invocation with room for its step, or leave it for its visibility timeout when processing raised (the
engine asks for redelivery by raising). A message that is not a step message is left too: after
``max_receives`` receives the queue moves it to the dead letters, as SQS's redrive policy does.

It runs on the main thread: a step's timeout is a SIGALRM there (``engine_core._runner``), as in Lambda.
There a delivery still running past its deadline ends the process, as Lambda ends an invocation at its
timeout (``faulthandler``'s watchdog, which needs no Python: it fires inside a C call that holds the
interpreter, where the step's SIGALRM cannot). Otherwise a body stuck in C code (or one that swallows
its timeout) would run on after its claim's lease, while another process on the file runs the step again.
"""

from __future__ import annotations

import datetime as dt
import faulthandler
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from pydantic import ValidationError

from engine_core import Engine, InsufficientTimeError, Outcome, StepMessage
from engine_core.errors import StorageError
from engine_core.adapters.sqlite_queue import Received, SqliteQueue

log = logging.getLogger("loom_lite")
STORE_RETRY_S = 1.0
"""How long the worker waits before it reads the queue again after the store failed it."""


class Worker:
    def __init__(self, engine: Engine, queue: SqliteQueue, delivery_s: float, visibility_s: float, poll_s: float,
                 stop: threading.Event, on_outcome: Callable[[Outcome], None] | None = None):
        self.engine, self.queue = engine, queue
        self.delivery_s, self.visibility_s, self.poll_s, self.stop = delivery_s, visibility_s, poll_s, stop
        self.on_outcome = on_outcome
        self.counts: Counter = Counter()

    def run(self) -> None:
        """Until ``stop`` is set: handle what is visible, else wait for a send of this process, the next
        delayed message, or the poll interval (another process's sends), whichever comes first."""
        while not self.stop.is_set():
            self.queue.sent.clear()
            try:
                if self.once():
                    continue
                upcoming = self.queue.next_visible_in()
            except StorageError as exc:
                # The file is busy past its timeout (a backup, a sqlite3 shell in a transaction) or failing: what
                # was received and not acked comes back after its visibility timeout; try again shortly.
                self.counts["store_unavailable"] += 1
                log.warning("the store is unavailable (%s); the worker tries again in %g s", exc, STORE_RETRY_S)
                self.stop.wait(STORE_RETRY_S)
                continue
            self.queue.sent.wait(self.poll_s if upcoming is None else min(upcoming, self.poll_s))

    def once(self) -> bool:
        """Receive and handle one message; False when none was visible."""
        batch = self.queue.receive(1, visibility_timeout_s=self.visibility_s)
        for received in batch:
            self.handle(received)
        return bool(batch)

    def handle(self, received: Received) -> Outcome | None:
        try:
            message = StepMessage.model_validate_json(received.body)
        except ValidationError as exc:
            self.counts["malformed"] += 1
            log.error("message %s is not a step message (%d problems); after %d receives it moves to the dead "
                      "letters", received.message_id, exc.error_count(), self.queue.max_receives)
            return None
        sent_at = None if received.sent_at is None else dt.datetime.fromtimestamp(received.sent_at, tz=dt.timezone.utc)
        self.engine.backlog.observe(message, sent_at)
        deadline = time.monotonic() + self.delivery_s
        # Before the claim's lease (the deadline plus the margin) runs out: no other process may take the step
        # over while this body could still run.
        watchdog = threading.current_thread() is threading.main_thread()
        if watchdog:
            faulthandler.dump_traceback_later(self.delivery_s + self.engine.settings.time_margin_ms / 2000, exit=True)
        try:
            outcome = self.engine.process(message, remaining_ms=lambda: int((deadline - time.monotonic()) * 1000))
        except InsufficientTimeError as exc:
            # Nothing was written: back on the queue at once (a fresh delivery has its whole deadline).
            self.counts["released"] += 1
            log.warning("too little time left for the step (%d ms, %d needed); released", exc.remaining_ms, exc.needed_ms)
            self.queue.release(received.receipt)
            return None
        except Exception:
            self.counts["errors"] += 1
            log.exception("processing %s failed; the message returns after its visibility timeout (%g s)",
                          message.execution_id, self.visibility_s)
            return None
        finally:
            if watchdog:
                faulthandler.cancel_dump_traceback_later()
        self.queue.ack(received.receipt)
        self.counts[outcome.kind] += 1
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome
