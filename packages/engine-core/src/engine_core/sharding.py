"""Which due-index shard an execution lives in. Stable across processes, unlike Python's salted hash()."""

from __future__ import annotations

import hashlib


def shard_of(execution_id: str, shards: int) -> int:
    if shards < 1:
        raise ValueError("shard count must be >= 1")
    digest = hashlib.sha256(execution_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards
