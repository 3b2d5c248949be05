"""Backoff arithmetic. Jitter is derived from the attempt's identity, so a replayed run is identical."""

from __future__ import annotations

import hashlib

from .model import RetryPolicy


def backoff_s(policy: RetryPolicy, attempt: int, seed: str = "") -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based) before the next one.

    Example:
        >>> backoff_s(RetryPolicy(base=2, max_delay=900, jitter=False), attempt=3)
        8.0
    """
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    # Cap the exponent first: multiplier ** 1000 overflows a float long before max_delay matters.
    exponent = min(attempt - 1, 64)
    try:
        delay = min(policy.max_delay, policy.base * policy.multiplier**exponent)
    except OverflowError:  # a multiplier large enough overflows even so: the ceiling it would pass
        delay = policy.max_delay
    if not policy.jitter:
        return delay
    # "Equal jitter": keep half the delay, spread the other half. Deterministic per (seed, attempt).
    digest = hashlib.sha256(f"{seed}:{attempt}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return delay / 2 + fraction * delay / 2


def has_attempts_left(policy: RetryPolicy, attempt: int) -> bool:
    return attempt < policy.max_attempts
