"""An SQS event source mapping, played locally: poll, batch, invoke, delete what succeeded.

What it does is what Lambda's pollers do for a standard queue:

- receive up to ``BatchSize`` messages (gathering for up to ``MaximumBatchingWindowInSeconds``), with
  the queue's own visibility timeout (no override: an in-flight message reappears when it runs out);
- invoke the function with a real-shaped event (``Records`` with ``messageId``, ``receiptHandle``,
  ``body``, ``attributes`` incl. ``ApproximateReceiveCount``, ``md5OfBody``, ``eventSourceARN``, ...);
- on success delete the batch, except the records named in ``batchItemFailures`` (only when the
  mapping has ``FunctionResponseTypes = ["ReportBatchItemFailures"]``; otherwise the list is ignored);
  an invalid failure list fails the whole batch, as Lambda does;
- on a function error, timeout or crash delete nothing: the records come back after the visibility
  timeout, and SQS moves a record to the DLQ once it was received ``maxReceiveCount`` times (moto
  does that on the next receive);
- run up to the mapping's maximum concurrency of batches at once;
- keep each invocation's payload within Lambda's 6 MB request limit: records that would not fit are
  made visible again at once and go into a later batch.

Before each invocation the worker's log names the messages it holds (``BATCH RequestId: ... holds``:
message id, execution, step, version, branch, receive count), so the messages of an invocation that
dies (a SIGKILL, a timeout) can be told from its log; the runtime's own log repeats them when the
invocation dies, and ``invocations.jsonl`` keeps them as JSON (:mod:`loom_local.invocations`).
"""

from __future__ import annotations

import math
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .functions import Function, InvokeResult
from .invocations import held_message
from .limits import LAMBDA_REQUEST_MAX_BYTES, payload_bytes

Observer = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class MappingConfig:
    uuid: str
    queue_url: str
    queue_arn: str
    region: str
    batch_size: int = 10
    batching_window_s: float = 0.0
    report_batch_item_failures: bool = False
    max_concurrency: int = 2
    enabled_in_emulator: bool = False


def to_record(message: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """An SQS ReceiveMessage result as a Lambda event record."""
    attributes = dict(message.get("Attributes") or {})
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": attributes,
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": value.get("StringListValues", []),
                "binaryListValues": value.get("BinaryListValues", []),
                "dataType": value.get("DataType"),
            }
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody"),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if message.get("MD5OfMessageAttributes"):
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def failed_ids(result: InvokeResult, batch_ids: list[str], report_batch_item_failures: bool) -> tuple[set[str], str]:
    """Which records of a batch go back to the queue, and why (for the log)."""
    everything = set(batch_ids)
    if not result.ok:
        return everything, f"invocation {result.describe()}"
    if not report_batch_item_failures:
        return set(), "success (batchItemFailures ignored: the mapping does not set ReportBatchItemFailures)"
    payload = result.payload
    if payload is None or (isinstance(payload, dict) and not payload.get("batchItemFailures")):
        return set(), "success"
    failures = payload.get("batchItemFailures") if isinstance(payload, dict) else None
    if not isinstance(failures, list):
        return everything, "invalid partial batch response (batchItemFailures is not a list): whole batch failed"
    named = set()
    for item in failures:
        ident = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(ident, str) or not ident or ident not in everything:
            return everything, f"invalid itemIdentifier {ident!r} in batchItemFailures: whole batch failed"
        named.add(ident)
    return named, f"{len(named)} of {len(batch_ids)} records reported failed"


def describe_record(record: dict[str, Any]) -> str:
    """One held message for the log: its id, what it carries (execution, step, version, branch) and how many
    times SQS has handed it out."""
    held = held_message(record)
    received = f"receive count {held['receive_count']}"
    if held["execution_id"] is None:
        return f"{held['message_id']} (not a step message, {received})"
    what = f"execution {held['execution_id']} step {held['step']} v{held['version']}"
    if held["branch"] is not None:
        what += f" branch {held['branch']}"
    return f"{held['message_id']} {what}, {received}"


def fit_payload(records: list[dict[str, Any]], limit: int = LAMBDA_REQUEST_MAX_BYTES) -> int:
    """How many of ``records``, from the first, fit one invocation's event (at least one)."""
    envelope = payload_bytes({"Records": []})
    size, n = envelope, 0
    for r in records:
        size += payload_bytes(r) + (1 if n else 0)  # the comma between records
        if size > limit and n:
            break
        n += 1
    return n


class QueuePoller:
    """Polls one queue for one function with ``config.max_concurrency`` concurrent pollers.

    Each poller long-polls ``wait_s`` (5 s; Lambda's pollers wait 20 s): a receive returns as soon as a message
    arrives, so a longer wait costs no latency, and an idle queue costs the emulator one receive per poller
    every ``wait_s`` instead of every second."""

    def __init__(self, config: MappingConfig, function: Function, sqs_factory: Callable[[], Any],
                 observer: Observer | None = None, wait_s: int = 5):
        self.config, self.function, self.sqs_factory = config, function, sqs_factory
        self.observer, self.wait_s = observer, wait_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.batches = 0
        self.deleted = 0
        self.returned = 0

    def _notify(self, kind: str, **details: Any) -> None:
        if self.observer is not None:
            try:
                self.observer(kind, {"function": self.function.spec.name, **details})
            except Exception:  # noqa: BLE001
                pass

    def start(self) -> None:
        for n in range(self.config.max_concurrency):
            t = threading.Thread(target=self._run, name=f"esm-{self.function.spec.name}-{n}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _receive(self, sqs) -> list[dict[str, Any]]:
        cfg = self.config
        messages: list[dict[str, Any]] = []
        window_end = time.monotonic() + cfg.batching_window_s
        while not self._stop.is_set():
            want = min(10, cfg.batch_size - len(messages))
            # A long poll returns as soon as a message arrives; once some are in hand, it waits only for what is
            # left of the batching window.
            wait = self.wait_s if not messages else max(0, min(self.wait_s, math.ceil(window_end - time.monotonic())))
            resp = sqs.receive_message(
                QueueUrl=cfg.queue_url, MaxNumberOfMessages=want, WaitTimeSeconds=wait,
                MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"],
            )
            messages.extend(resp.get("Messages", []))
            if len(messages) >= cfg.batch_size or time.monotonic() >= window_end:
                break
            if not messages and cfg.batching_window_s <= 0:
                break
        return messages

    def _release(self, sqs, records: list[dict[str, Any]]) -> None:
        """Make records visible again now: they did not fit this invocation (Lambda's 6 MB request limit)."""
        for start in range(0, len(records), 10):
            chunk = records[start:start + 10]
            try:
                sqs.change_message_visibility_batch(QueueUrl=self.config.queue_url, Entries=[
                    {"Id": str(i), "ReceiptHandle": r["receiptHandle"], "VisibilityTimeout": 0}
                    for i, r in enumerate(chunk)])
            except Exception as exc:  # noqa: BLE001 - they come back after the visibility timeout instead
                self._notify("release_failed", error=str(exc))
        self._notify("batch_split", released=[r["messageId"] for r in records])

    def _run(self) -> None:
        sqs = self.sqs_factory()
        while not self._stop.is_set():
            try:
                messages = self._receive(sqs)
            except Exception as exc:  # noqa: BLE001 - the emulator restarting, a network blip: keep polling
                if self._stop.is_set():
                    return
                self._notify("poll_error", error=str(exc))
                time.sleep(1.0)
                continue
            if not messages or self._stop.is_set():
                continue  # stopping: undeleted messages simply come back after their visibility timeout
            try:
                self.poll_once(sqs, messages)
            except Exception as exc:  # noqa: BLE001 - the function was shut down under us, or the emulator went away
                if self._stop.is_set():
                    return
                self._notify("poll_error", error=str(exc))
                time.sleep(1.0)

    def poll_once(self, sqs, messages: list[dict[str, Any]]) -> InvokeResult:
        cfg = self.config
        records = [to_record(m, cfg.queue_arn, cfg.region) for m in messages]
        fits = fit_payload(records)
        if fits < len(records):
            self._release(sqs, records[fits:])
            records = records[:fits]
        ids = [r["messageId"] for r in records]
        request_id = str(uuid.uuid4())
        held = "; ".join(describe_record(r) for r in records)
        self.function.logs.write(self.function.spec.name, None,
                                 f"BATCH RequestId: {request_id} holds {len(records)} messages: {held}")
        receives = {r["messageId"]: int(r["attributes"].get("ApproximateReceiveCount", "1")) for r in records}
        if self.function.invocations is not None:
            self.function.invocations.write("held", request_id=request_id, function=self.function.spec.name,
                                            messages=[held_message(r) for r in records])
        self.batches += 1
        self._notify("batch", size=len(records), receive_counts=receives,
                     records=[{"message_id": r["messageId"], "receive_count": receives[r["messageId"]],
                               "body": r["body"]} for r in records])
        result = self.function.invoke({"Records": records}, request_id=request_id)
        if result.status in ("timeout", "crashed"):
            print(f"[loom-local] worker invocation {request_id} {result.describe()}; the messages it held return after "
                  f"the visibility timeout: {held}", file=sys.stderr, flush=True)
        failed, why = failed_ids(result, ids, cfg.report_batch_item_failures)
        done = [r for r in records if r["messageId"] not in failed]
        for start in range(0, len(done), 10):
            chunk = done[start:start + 10]
            try:
                resp = sqs.delete_message_batch(QueueUrl=cfg.queue_url, Entries=[
                    {"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(chunk)])
                self.deleted += len(resp.get("Successful", []))
                for f in resp.get("Failed", []):
                    self._notify("delete_failed", error=f)
            except Exception as exc:  # noqa: BLE001 - an undeleted record is redelivered: at-least-once
                self._notify("delete_failed", error=str(exc))
        self.returned += len(failed)
        self._notify("batch_done", request_id=request_id, size=len(records), deleted=len(done), returned=len(failed), why=why,
                     status=result.status, pid=result.pid, payload=result.payload, message_ids=ids)
        return result
