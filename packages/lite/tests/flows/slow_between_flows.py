"""A code-first function whose own code between two durable calls runs past its delivery's deadline (no
step timeout covers it): its execution fails with the line, and the process goes on serving the others."""

import time

from engine_core import Registry
from engine_core.durable import durable, step

registry = Registry()


@durable("slow_between", registry=registry)
def slow_between(input):
    step("before", lambda: 1)
    time.sleep(60)  # the slow line: belongs in a step
    return step("after", lambda: 2)


@durable("quick", registry=registry)
def quick(input):
    return step("only", lambda: "ok")
