"""``batch_resize``: resize a batch of images, at most 10 at a time, then report on the batch.

The middle step is a map: ``map(resize_image, over="images", max_concurrency=10)`` runs
``resize_image`` once per element of ``ctx["images"]`` (100 by default), each as its own delivery
(on AWS, its own Lambda invocation), never more than 10 at once. Each branch reads its element as
``ctx.item``, gets its own retries and its own idempotency key (``{execution_id}:{step}:{branch}``),
and the step completes once, when every image is done, merging ``{"resize_images": [...]}`` in order.

Input (``BatchInput``): ``{"count": 100, "width": 640, "flaky_every": 0, "pause_s": 0}``. With
``flaky_every`` = n, every n-th image fails its first attempt (a transient error, retried);
``pause_s`` holds each resize that long (for the local stack's crash tests: a SIGKILL lands inside a
branch).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from pydantic import BaseModel, Field

from engine_core import RetryPolicy, StepContext, map, workflow

MAX_CONCURRENCY = 10


class BatchInput(BaseModel):
    count: int = Field(default=100, ge=0, le=1000, description="Images in the batch")
    width: int = Field(default=640, ge=16, le=8192, description="Target width in pixels")
    flaky_every: int = Field(default=0, ge=0, description="Every n-th image fails its first attempt (0: none)")
    pause_s: float = Field(default=0.0, ge=0, le=5, description="Seconds each resize holds (crash tests)")


class TransientStorageError(RuntimeError):
    """Stands in for a throttled object store: worth retrying."""


def list_images(ctx: StepContext) -> dict[str, Any]:
    return {"images": [f"uploads/img-{i:04d}.jpg" for i in range(ctx["count"])]}


def resize_image(ctx: StepContext) -> dict[str, Any]:
    source = ctx.item
    if ctx["flaky_every"] and ctx.branch % ctx["flaky_every"] == 0 and ctx.attempt == 1:
        raise TransientStorageError(f"throttled reading {source} (attempt {ctx.attempt})")
    if ctx["pause_s"]:
        time.sleep(ctx["pause_s"])
    # A real step would write the thumbnail under a key derived from ctx.idempotency_key, so a retry
    # (or a re-run after a crash) overwrites the same object instead of adding one.
    digest = hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:12]
    return {"source": source, "thumbnail": f"thumbs/{ctx['width']}/{digest}.jpg", "attempt": ctx.attempt}


def summarize(ctx: StepContext) -> dict[str, Any]:
    done = ctx["resize_images"]
    return {"resized": len(done), "retried": sum(1 for r in done if r["attempt"] > 1)}


@workflow("batch_resize")
class BatchResize:
    steps = [
        list_images,
        map(resize_image, over="images", max_concurrency=MAX_CONCURRENCY, name="resize_images"),
        summarize,
    ]
    input_model = BatchInput
    retry = RetryPolicy(max_attempts=3, base=1.0, max_delay=5.0)
    step_timeout_s = 10
