"""SQS adapter for the StepQueue port. Imports botocore (the client is injected); not re-exported from ``engine_core``."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from ..errors import StorageError
from ..model import StepMessage


class SqsQueue:
    """Sends step messages (identifiers only) to the step queue and failure notices to the DLQ."""

    def __init__(self, client: Any, queue_url: str, dlq_url: str | None = None):
        self.client, self.queue_url, self.dlq_url = client, queue_url, dlq_url

    def send(self, message: StepMessage, delay_s: int = 0) -> None:
        if not 0 <= delay_s <= 900:
            raise ValueError(f"SQS DelaySeconds must be 0-900, got {delay_s}; longer waits belong to the sweeper")
        self._send(self.queue_url, message.model_dump_json(exclude_none=True), delay_s)

    def release(self, receipt_handle: str) -> None:
        """Make a received message visible again at once (ChangeMessageVisibility to 0): a record the worker
        could not start returns to the queue in a second, not after the visibility timeout."""
        try:
            self.client.change_message_visibility(QueueUrl=self.queue_url, ReceiptHandle=receipt_handle,
                                                  VisibilityTimeout=0)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise StorageError(f"SQS ChangeMessageVisibility on {self.queue_url} failed: {err.get('Code')}: "
                               f"{err.get('Message')}") from exc

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        if not self.dlq_url:
            raise StorageError("no dead-letter queue URL configured (LOOM_DLQ_URL) for a failure notice")
        self._send(self.dlq_url, json.dumps(body, separators=(",", ":")), 0)

    def _send(self, url: str, body: str, delay_s: int) -> None:
        try:
            self.client.send_message(QueueUrl=url, MessageBody=body, DelaySeconds=delay_s)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise StorageError(f"SQS SendMessage to {url} failed: {err.get('Code')}: {err.get('Message')}") from exc
