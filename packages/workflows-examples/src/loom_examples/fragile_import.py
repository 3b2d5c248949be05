"""``fragile_import``: a nightly import that waits for its export window, then fails until someone fixes the feed.

Input (``ImportInput``, validated at start): ``{"feed": str}`` (1-64 characters from A-Z a-z 0-9 _ . -,
not starting with a dot: it names the fix's file).

Steps: ``fetch_manifest``, a two-hour sleep (``wait_for_export_window``), ``import_rows``,
``publish_summary``. ``import_rows`` raises :class:`PermanentStepError` (no retries: the execution
ends FAILED at once) until the feed is *fixed*: until a file named after the feed exists in the
directory ``LOOM_EXAMPLES_FIXES_DIR`` (default: ``loom-fixes`` in the system's temporary directory).
That is the operator's journey at 3 a.m.:

    loom list --status FAILED                      # find it
    touch "$LOOM_EXAMPLES_FIXES_DIR/<feed>"        # fix the feed
    loom redrive <execution_id>                    # resume from import_rows, same id, fresh attempts

and ``loom wake <execution_id>`` skips the two-hour window (the local stack's time control). The
check reads the file system at each attempt, so it holds however many workers the attempts land on
when they share that directory (the local stack's functions do; on AWS each Lambda has its own /tmp).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from engine_core import PermanentStepError, RetryPolicy, StepContext, sleep, workflow

FIXES_DIR_ENV = "LOOM_EXAMPLES_FIXES_DIR"
EXPORT_WINDOW_HOURS = 2
_FEED = re.compile(r"\A[A-Za-z0-9_.-]{1,64}\Z")


class ImportInput(BaseModel):
    feed: str = Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$",
                      description="The feed to import; names the fix's file")


def fixes_dir() -> Path:
    return Path(os.environ.get(FIXES_DIR_ENV) or Path(tempfile.gettempdir()) / "loom-fixes")


def fetch_manifest(ctx: StepContext) -> dict[str, Any]:
    feed = ctx.get("feed")
    if not isinstance(feed, str) or not _FEED.fullmatch(feed) or feed.startswith("."):
        raise PermanentStepError("input needs a 'feed': 1-64 characters from A-Z a-z 0-9 _ . - (not starting with .)")
    return {"manifest": {"feed": feed, "rows": 3}}


def import_rows(ctx: StepContext) -> dict[str, Any]:
    marker = fixes_dir() / ctx["feed"]
    if not marker.exists():
        raise PermanentStepError(f"feed {ctx['feed']!r} has a malformed row 2 (no amount); fix the feed "
                                 f"(here: create {marker}) and redrive the execution")
    return {"imported_rows": ctx["manifest"]["rows"], "imported_on_attempt": ctx.attempt}


def publish_summary(ctx: StepContext) -> dict[str, Any]:
    return {"summary": f"{ctx['imported_rows']} rows imported from {ctx['feed']}"}


@workflow("fragile_import")
class FragileImport:
    steps = [fetch_manifest, sleep(hours=EXPORT_WINDOW_HOURS, name="wait_for_export_window"), import_rows,
             publish_summary]
    retry = RetryPolicy(max_attempts=3, base=1.0, max_delay=2.0)
    step_timeout_s = 10
    input_model = ImportInput
