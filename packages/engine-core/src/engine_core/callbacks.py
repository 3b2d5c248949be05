"""Callback tokens: an opaque, unguessable, single-use handle on one ``wait_for_event`` step.

A step hands ``ctx.callback_token("approved")`` to an outside system, which completes the wait with
``POST /callbacks/{token}`` and no other credentials. The token names the execution and the wait
step and carries an HMAC under the execution's own random secret (kept beside its input, never
shown), so it cannot be forged or guessed; it is used once because completing it sends the event
with the id ``callback:<step>``, which the store accepts once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid

_MAC_BYTES = 16


class InvalidCallbackTokenError(ValueError):
    """Not a token Loom issued (malformed, or its signature does not match)."""


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def _mac(secret: str, execution_id: str, step_index: int) -> bytes:
    msg = f"loom-callback\n{execution_id}\n{step_index}".encode()
    return hmac.new(secret.encode(), msg, hashlib.sha256).digest()[:_MAC_BYTES]


def issue(secret: str, execution_id: str, step_index: int) -> str:
    raw = uuid.UUID(execution_id).bytes + step_index.to_bytes(2, "big") + _mac(secret, execution_id, step_index)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse(token: str) -> tuple[str, int]:
    """The (execution_id, step_index) a token claims to be for; verify it with :func:`verify`."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except Exception:
        raise InvalidCallbackTokenError("malformed callback token") from None
    if len(raw) != 16 + 2 + _MAC_BYTES:
        raise InvalidCallbackTokenError("malformed callback token")
    return str(uuid.UUID(bytes=raw[:16])), int.from_bytes(raw[16:18], "big")


def verify(token: str, secret: str | None) -> tuple[str, int]:
    execution_id, step_index = parse(token)
    if not secret or not hmac.compare_digest(issue(secret, execution_id, step_index), token.rstrip("=")):
        raise InvalidCallbackTokenError("callback token signature does not match")
    return execution_id, step_index


CALLBACK_PREFIX = "callback:"
"""Event ids reserved for callbacks: the events route refuses them, so no one but a token holder can burn
a token, and an event under one completes only the wait it names."""


def event_id(step_index: int) -> str:
    """The event id a callback sends under: one per wait step, so a token completes its wait once."""
    return f"{CALLBACK_PREFIX}{step_index}"


def is_reserved(event_id: str) -> bool:
    return event_id.startswith(CALLBACK_PREFIX)


def is_for_step(event_id: str, step_index: int) -> bool:
    """May the wait at ``step_index`` consume an event with this id? Any plain event; a callback's only
    when it was issued for that step."""
    return not is_reserved(event_id) or event_id == f"{CALLBACK_PREFIX}{step_index}"
