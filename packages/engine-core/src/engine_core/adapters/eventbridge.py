"""EventBridge adapter for status-change events. Imports botocore errors only; the client is injected."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from ..errors import StorageError

SOURCE = "loom"
DETAIL_TYPE = "Loom Execution Status Change"


class EventBridgePublisher:
    """Puts one event per ended execution on the configured bus (``LOOM_EVENT_BUS_NAME``)."""

    enabled = True

    def __init__(self, client: Any, bus_name: str):
        self.client, self.bus_name = client, bus_name

    def publish(self, detail: dict[str, Any]) -> None:
        entry = {"Source": SOURCE, "DetailType": DETAIL_TYPE, "EventBusName": self.bus_name,
                 "Detail": json.dumps(detail, separators=(",", ":"), sort_keys=True)}
        try:
            resp = self.client.put_events(Entries=[entry])
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise StorageError(f"EventBridge PutEvents to {self.bus_name} failed: {err.get('Code')}: "
                               f"{err.get('Message')}") from exc
        if resp.get("FailedEntryCount"):
            failed = (resp.get("Entries") or [{}])[0]
            raise StorageError(f"EventBridge PutEvents to {self.bus_name} refused the event: "
                               f"{failed.get('ErrorCode')}: {failed.get('ErrorMessage')}")
