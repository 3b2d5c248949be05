"""A delivery's objects are freed when it ends, not left to the garbage collector.

A reference cycle through a delivery's run (its records, decoded values, a code-first plan) keeps all of
it alive until the next collection, and every collection in between scans it: that cost grows with the
history. With the collector off, one execution of each shape runs to the end and ``gc.collect()`` then
counts what only the collector could have freed.
"""

from __future__ import annotations

import gc

import pytest

from engine_core import Registry, Status, map_, sleep
from engine_core.durable import durable
from engine_core.durable import step as durable_step
from engine_core.registry import build_workflow
from engine_core.testing import LocalRunner


def _registry() -> Registry:
    registry = Registry()

    def fetch(ctx):
        return {"n": 1}

    def items(ctx):
        return {"xs": [1, 2, 3]}

    def double(ctx):
        return ctx.item * 2

    def summarize(ctx):
        return {"sum": ctx["n"] + 1}

    registry.register(build_workflow("listed", [fetch, sleep(seconds=30), summarize], source="tests"))
    registry.register(build_workflow("fanned", [items, map_(double, over="xs", max_concurrency=2)], source="tests"))

    @durable("coded", registry=registry)
    def coded(input):
        users = durable_step("fetch", lambda: [1, 2, 3])
        return durable_step("summarize", sum, users)

    return registry


@pytest.mark.parametrize("workflow", ["listed", "fanned", "coded"])
def test_an_execution_runs_to_the_end_without_leaving_cyclic_garbage(workflow):
    # given a runner, warmed by one execution so first-use caches are built
    runner = LocalRunner(_registry())
    assert runner.run_until_done(runner.start(workflow)).status is Status.COMPLETED
    gc.collect()
    gc.disable()
    try:
        # when a second execution runs start to end with the collector off
        execution = runner.run_until_done(runner.start(workflow))
        # then only the collector could free: nothing
        found = gc.collect()
    finally:
        gc.enable()
    assert execution.status is Status.COMPLETED
    assert found == 0
