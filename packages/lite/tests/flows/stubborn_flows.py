"""A step whose first attempt will not stop at its timeout (it swallows the step's timeout, as a body stuck
in a C call cannot see it): what the lite worker's watchdog is for. Each body start and end goes to the
journal named by ``LITE_TEST_JOURNAL``."""

import json
import os
import time

from engine_core import Registry, workflow

registry = Registry()


def _journal(what: str, ctx) -> None:
    with open(os.environ["LITE_TEST_JOURNAL"], "a") as f:
        f.write(json.dumps({"what": what, "attempt": ctx.attempt, "pid": os.getpid(), "at": time.time()}) + "\n")


def stubborn(ctx):
    _journal("start", ctx)
    if ctx.attempt == 1:
        until = time.monotonic() + 30
        while time.monotonic() < until:
            try:
                time.sleep(0.05)
            except BaseException:  # noqa: BLE001 - the step's timeout, swallowed: the body runs on
                pass
    _journal("end", ctx)
    return {"done": ctx.attempt}


@workflow("stubborn", registry=registry)
class Stubborn:
    steps = [stubborn]
