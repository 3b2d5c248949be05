"""Count AWS calls on the wire with botocore's ``before-call`` / ``after-call`` events, and price each
DynamoDB call in capacity units from the items it actually touched.

Every instrumented client reports each API call (one ``before-call`` per call; SDK retries would show
as ``RetryAttempts`` in the response metadata, also recorded). For DynamoDB writes the recorder reads
each target item just before and just after the call through a *side* client that is not
instrumented, so the sizes are those of the stored items, and applies ``capacity``'s rules. moto's own
``ConsumedCapacity`` (requested with ``ReturnConsumedCapacity=TOTAL``) is kept beside it, for
comparison only: it is not faithful.

The caller labels calls with a phase (``control``, ``worker``, ``esm``, ``finalize``, ...) through
:meth:`WireRecorder.phase`; synthetic rows (Lambda invocations the bench's poller makes) go through
:meth:`WireRecorder.note`.
"""

from __future__ import annotations

import contextvars
import functools
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from . import capacity

_PHASE: contextvars.ContextVar[str] = contextvars.ContextVar("bench_phase", default="unlabelled")
_TAG: contextvars.ContextVar[str] = contextvars.ContextVar("bench_tag", default="")

DYNAMODB_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}


@dataclass
class ItemTouch:
    """One item a DynamoDB call touched, with its stored size before and after (bytes)."""

    key: str
    size_before: int
    size_after: int
    wcu: float = 0.0
    gsi_wcu: float = 0.0


@dataclass
class Call:
    service: str
    op: str
    phase: str
    tag: str = ""
    request_bytes: int = 0
    error: str | None = None
    retry_attempts: int = 0
    wcu: float = 0.0
    rcu: float = 0.0
    gsi_wcu: float = 0.0
    moto_units: float | None = None
    items: list[ItemTouch] = field(default_factory=list)
    sqs_payload_bytes: int = 0
    sqs_messages: int = 0
    sqs_billed: int = 0
    synthetic: bool = False

    @property
    def api(self) -> str:
        return f"{self.service}:{self.op}"


class WireRecorder:
    """Attach to boto3 clients; collect :class:`Call` rows."""

    def __init__(self, table_keys: tuple[str, str] = ("PK", "SK"),
                 gsi_keys: dict[str, tuple[str, str | None]] | None = None):
        self.calls: list[Call] = []
        self.table_keys = table_keys
        self.gsi_keys = gsi_keys if gsi_keys is not None else {"GSI1": ("GSI1PK", "GSI1SK"), "GSI2": ("GSI2PK", "GSI2SK")}
        self.gsi_projected: dict[str, tuple[str, ...]] = {"GSI2": ("workflow", "list_status")}
        self._side: dict[int, Any] = {}
        self.enabled = True

    # -- wiring -------------------------------------------------------------------------------
    def attach(self, client: Any, side_client: Any | None = None) -> Any:
        """Instrument ``client``. DynamoDB clients need an uninstrumented ``side_client`` on the same
        endpoint to read item sizes."""
        service = client.meta.service_model.service_id.hyphenize()
        if service == "dynamodb":
            if side_client is None:
                raise ValueError("a DynamoDB client needs a side client to size items")
            self._side[id(client)] = side_client
        client.meta.events.register(f"before-call.{service}", functools.partial(self._before, client),
                                    unique_id=f"bench-before-{id(client)}")
        client.meta.events.register(f"after-call.{service}", functools.partial(self._after, client),
                                    unique_id=f"bench-after-{id(client)}")
        return client

    @contextmanager
    def phase(self, name: str, tag: str = "") -> Iterator[None]:
        token, tag_token = _PHASE.set(name), _TAG.set(tag)
        try:
            yield
        finally:
            _PHASE.reset(token)
            _TAG.reset(tag_token)

    def note(self, service: str, op: str, count: int = 1) -> None:
        """Record calls the bench makes on AWS's behalf (e.g. the poller invoking the worker)."""
        if not self.enabled:
            return
        for _ in range(count):
            self.calls.append(Call(service, op, _PHASE.get(), _TAG.get(), synthetic=True))

    @contextmanager
    def paused(self) -> Iterator[None]:
        previous, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = previous

    # -- hooks --------------------------------------------------------------------------------
    def _before(self, client: Any, model: Any, params: dict, context: dict, **_: Any) -> None:
        if not self.enabled:
            return
        body = params.get("body") or b""
        if isinstance(body, str):
            body = body.encode("utf-8")
        try:
            request = json.loads(body) if body else {}
        except ValueError:
            request = {}
        service = model.service_model.service_id.hyphenize()
        call = Call(service, model.name, _PHASE.get(), _TAG.get(), request_bytes=len(body))
        context["bench_call"] = call
        context["bench_request"] = request
        context["bench_client"] = client
        if service == "dynamodb":
            context["bench_before"] = self._read_targets(context, model.name, request)
        if service == "sqs":
            self._sqs_request(call, model.name, request)

    def _after(self, client: Any, http_response: Any, parsed: dict, model: Any, context: dict, **_: Any) -> None:
        call: Call | None = context.get("bench_call")
        if call is None:
            return
        error = (parsed or {}).get("Error") or {}
        call.error = error.get("Code") if getattr(http_response, "status_code", 200) >= 300 else None
        call.retry_attempts = int(((parsed or {}).get("ResponseMetadata") or {}).get("RetryAttempts", 0))
        if call.service == "dynamodb":
            call.moto_units = _moto_units(parsed)
            self._price_dynamodb(call, context, parsed or {})
        elif call.service == "sqs" and call.op == "ReceiveMessage":
            messages = (parsed or {}).get("Messages") or []
            call.sqs_messages = len(messages)
            call.sqs_payload_bytes = sum(len(m.get("Body", "").encode("utf-8")) for m in messages)
            call.sqs_billed = capacity.sqs_billed_requests(call.sqs_payload_bytes)
        self.calls.append(call)

    # -- SQS ----------------------------------------------------------------------------------
    @staticmethod
    def _sqs_request(call: Call, op: str, request: dict) -> None:
        if op == "SendMessage":
            payload = len(request.get("MessageBody", "").encode("utf-8")) + _attributes_size(request)
            call.sqs_payload_bytes, call.sqs_messages = payload, 1
            call.sqs_billed = capacity.sqs_billed_requests(payload)
        elif op == "SendMessageBatch":
            entries = request.get("Entries", [])
            payload = sum(len(e.get("MessageBody", "").encode("utf-8")) + _attributes_size(e) for e in entries)
            call.sqs_payload_bytes, call.sqs_messages = payload, len(entries)
            call.sqs_billed = capacity.sqs_billed_requests(payload)
        elif op == "DeleteMessageBatch":
            call.sqs_messages, call.sqs_billed = len(request.get("Entries", [])), 1
        else:
            call.sqs_billed = 1

    # -- DynamoDB -----------------------------------------------------------------------------
    def _side_for(self, context: dict) -> Any:
        client = context.get("bench_client")
        return self._side[id(client)]

    def _targets(self, op: str, request: dict) -> list[tuple[str, dict, bool]]:
        """(table, key, transactional) for every item a write touches."""
        pk, sk = self.table_keys
        if op in ("UpdateItem", "DeleteItem"):
            return [(request["TableName"], request["Key"], False)]
        if op == "PutItem":
            item = request["Item"]
            return [(request["TableName"], {pk: item[pk], sk: item[sk]}, False)]
        if op == "TransactWriteItems":
            out = []
            for action in request.get("TransactItems", []):
                ((kind, body),) = action.items()
                key = body["Key"] if "Key" in body else {pk: body["Item"][pk], sk: body["Item"][sk]}
                out.append((body["TableName"], key, True))
            return out
        if op == "BatchWriteItem":
            out = []
            for table, requests in request.get("RequestItems", {}).items():
                for r in requests:
                    if "PutRequest" in r:
                        item = r["PutRequest"]["Item"]
                        out.append((table, {pk: item[pk], sk: item[sk]}, False))
                    else:
                        out.append((table, r["DeleteRequest"]["Key"], False))
            return out
        return []

    def _read_targets(self, context: dict, op: str, request: dict) -> list[dict | None]:
        side = self._side_for(context)
        return [side.get_item(TableName=t, Key=k, ConsistentRead=True).get("Item")
                for t, k, _ in self._targets(op, request)]

    def _price_dynamodb(self, call: Call, context: dict, parsed: dict) -> None:
        request, op = context["bench_request"], call.op
        side = self._side_for(context)
        if op in DYNAMODB_WRITES or op in ("TransactWriteItems", "BatchWriteItem"):
            targets = self._targets(op, request)
            befores = context.get("bench_before") or [None] * len(targets)
            failed = call.error is not None
            for (table, key, transactional), before in zip(targets, befores):
                after = before if failed else side.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
                touch = ItemTouch(_key_text(key), capacity.item_size(before), capacity.item_size(after))
                if failed:
                    # A refused write still consumes, sized on the existing item (at least 1 unit);
                    # a cancelled transaction still pays for both phases.
                    touch.wcu = capacity.write_units(touch.size_before, 0, transactional)
                else:
                    touch.wcu = capacity.write_units(touch.size_before, touch.size_after, transactional)
                    for name, (hash_attr, range_attr) in self.gsi_keys.items():
                        projected = self.gsi_projected.get(name, ())
                        touch.gsi_wcu += capacity.index_entry_writes(
                            capacity.index_entry(before, hash_attr, range_attr, projected),
                            capacity.index_entry(after, hash_attr, range_attr, projected))
                call.items.append(touch)
            call.wcu = sum(t.wcu for t in call.items)
            call.gsi_wcu = sum(t.gsi_wcu for t in call.items)
        elif op == "GetItem":
            item = parsed.get("Item")
            if request.get("ProjectionExpression"):
                item = side.get_item(TableName=request["TableName"], Key=request["Key"], ConsistentRead=True).get("Item")
            size = capacity.item_size(item)
            call.items.append(ItemTouch(_key_text(request["Key"]), size, size))
            call.rcu = capacity.read_units(size, consistent=bool(request.get("ConsistentRead")))
        elif op in ("Query", "Scan"):
            examined = self._examined(side, op, request, parsed)
            call.items.extend(ItemTouch("examined", s, s) for s in examined)
            call.rcu = capacity.read_units(sum(examined), consistent=bool(request.get("ConsistentRead")))

    @staticmethod
    def _examined(side: Any, op: str, request: dict, parsed: dict) -> list[int]:
        """Sizes of the items a Query/Scan read (full items, not the projection it returned)."""
        if not request.get("ProjectionExpression") and not request.get("FilterExpression"):
            return [capacity.item_size(i) for i in parsed.get("Items", [])]
        again = {k: v for k, v in request.items()
                 if k not in ("ProjectionExpression", "FilterExpression", "Select", "ReturnConsumedCapacity")}
        names = again.get("ExpressionAttributeNames")
        if names:
            used = " ".join(str(again.get(k, "")) for k in ("KeyConditionExpression",))
            again["ExpressionAttributeNames"] = {k: v for k, v in names.items() if k in used}
            if not again["ExpressionAttributeNames"]:
                del again["ExpressionAttributeNames"]
        resp = getattr(side, "query" if op == "Query" else "scan")(**again)
        return [capacity.item_size(i) for i in resp.get("Items", [])]

    # -- summaries ----------------------------------------------------------------------------
    def clear(self) -> None:
        self.calls.clear()

    def snapshot(self) -> list[Call]:
        return list(self.calls)


def _key_text(key: dict) -> str:
    return "/".join(next(iter(v.values())) for v in key.values())


def _attributes_size(request: dict) -> int:
    total = 0
    for name, attr in (request.get("MessageAttributes") or {}).items():
        total += len(name.encode()) + len(attr.get("DataType", "").encode())
        total += len((attr.get("StringValue") or "").encode()) + len(attr.get("BinaryValue") or b"")
    return total


def _moto_units(parsed: dict | None) -> float | None:
    consumed = (parsed or {}).get("ConsumedCapacity")
    if consumed is None:
        return None
    if isinstance(consumed, dict):
        consumed = [consumed]
    return float(sum(c.get("CapacityUnits", 0) for c in consumed))


@dataclass
class Totals:
    """Sums over a set of calls."""

    requests: Counter = field(default_factory=Counter)
    """API calls by ``service:Op``."""
    wcu: float = 0.0
    rcu: float = 0.0
    gsi_wcu: float = 0.0
    moto_units: float = 0.0
    moto_missing: int = 0
    sqs_billed: float = 0.0
    sqs_payload_bytes: int = 0
    sqs_messages_sent: int = 0
    errors: Counter = field(default_factory=Counter)

    @property
    def aws_requests(self) -> int:
        """Billable DynamoDB + SQS API requests (Lambda invocations counted apart)."""
        return sum(n for api, n in self.requests.items() if not api.startswith("lambda:"))

    @property
    def invocations(self) -> int:
        return sum(n for api, n in self.requests.items() if api.startswith("lambda:"))

    @property
    def write_units(self) -> float:
        return self.wcu + self.gsi_wcu

    def scaled(self, factor: float) -> dict[str, Any]:
        return {
            "requests": {k: v * factor for k, v in sorted(self.requests.items())},
            "aws_requests": self.aws_requests * factor,
            "invocations": self.invocations * factor,
            "wcu_table": self.wcu * factor, "wcu_gsi": self.gsi_wcu * factor,
            "write_units": self.write_units * factor, "rcu": self.rcu * factor,
            "moto_units": self.moto_units * factor, "moto_missing": self.moto_missing * factor,
            "sqs_billed": self.sqs_billed * factor,
        }


def totals(calls: list[Call], phases: set[str] | None = None) -> Totals:
    t = Totals()
    for c in calls:
        if phases is not None and c.phase not in phases:
            continue
        t.requests[c.api] += 1
        t.wcu += c.wcu
        t.rcu += c.rcu
        t.gsi_wcu += c.gsi_wcu
        if c.service == "dynamodb":
            if c.moto_units is None:
                t.moto_missing += 1
            else:
                t.moto_units += c.moto_units
        t.sqs_billed += c.sqs_billed
        if c.op in ("SendMessage", "SendMessageBatch"):
            t.sqs_payload_bytes += c.sqs_payload_bytes
            t.sqs_messages_sent += c.sqs_messages
        if c.error:
            t.errors[f"{c.api} {c.error}"] += 1
    return t

