"""Workflows for the multi-process tests: every body writes when it starts and when it ends to a journal
(one O_APPEND write per line, which survives the process's death), and may end its own process with
``os._exit`` between the two (no exception, no cleanup: a crash).

Environment: ``LITE_TEST_JOURNAL`` (the journal file), ``LITE_TEST_EXIT_RATE`` (the chance a body exits),
``LITE_TEST_EXIT_STEP`` (a step whose body exits once, on its first run, in every third execution: so a run
always has exits, whatever the random draws and the kills did).
"""

from __future__ import annotations

import json
import os
import random
import time

from engine_core import RetryPolicy, workflow

STEPS = 6


def note(kind: str, ctx) -> None:
    line = json.dumps({"k": kind, "e": ctx.execution_id, "s": ctx.step_index, "a": ctx.attempt, "pid": os.getpid(),
                       "t": time.time()}) + "\n"
    fd = os.open(os.environ["LITE_TEST_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def exited_before(ctx) -> bool:
    """The journal holds an exit of this execution's body at this step."""
    with open(os.environ["LITE_TEST_JOURNAL"]) as journal:
        return any(e["k"] == "exit" and e["e"] == ctx.execution_id and e["s"] == ctx.step_index
                   for e in map(json.loads, filter(str.strip, journal)))


def must_exit(ctx) -> bool:
    forced = os.environ.get("LITE_TEST_EXIT_STEP")
    if forced and ctx.step_index == int(forced) and ctx.get("n", 1) % 3 == 0 and not exited_before(ctx):
        return True
    return random.random() < float(os.environ.get("LITE_TEST_EXIT_RATE", "0"))


def make(index: int):
    def body(ctx):
        note("start", ctx)
        time.sleep(random.uniform(0.05, 0.25))
        if must_exit(ctx):
            note("exit", ctx)
            os._exit(17)
        note("end", ctx)
        return {f"s{index}": (ctx.get(f"s{index - 1}", 0) if index else 0) + 1}

    body.__name__ = f"s{index}"
    return body


@workflow("crashy")
class Crashy:
    steps = [make(i) for i in range(STEPS)]
    step_timeout_s = 1
    retry = RetryPolicy(max_attempts=30, base=0.05, max_delay=0.2)
