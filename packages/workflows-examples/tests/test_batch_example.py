"""``batch_resize`` end to end on LocalRunner (memory store, manual clock): a map over 100 images,
at most 10 at a time."""

from __future__ import annotations

import pytest

from engine_core import REGISTRY, InvalidInputError, Status
from engine_core.model import Branch
from engine_core.testing import LocalRunner


def _open_branches(runner: LocalRunner, eid: str) -> int:
    return sum(1 for b in runner.store.branches(eid, 1) if isinstance(b, Branch) and b.status.is_open)


def test_batch_resize_maps_over_100_images_never_more_than_10_open_and_completes_once():
    runner = LocalRunner(REGISTRY)
    eid = runner.start("batch_resize", {"flaky_every": 7})
    # when: driven delivery by delivery, watching the branch items
    peak = 0
    for _ in range(10_000):
        if runner.engine.get(eid).status.is_terminal:
            break
        runner.step_once()
        peak = max(peak, _open_branches(runner, eid))
    done = runner.engine.get(eid)
    # then
    assert done.status is Status.COMPLETED
    assert peak == 10
    context = runner.context(eid)
    assert [r["source"] for r in context["resize_images"]] == [f"uploads/img-{i:04d}.jpg" for i in range(100)]
    assert context["resized"] == 100 and context["retried"] == len(range(0, 100, 7))
    fan = next(r for r in runner.history(eid) if r.name == "resize_images")
    assert fan.kind == "fanout" and fan.attempts == 100
    assert len({r["thumbnail"] for r in context["resize_images"]}) == 100  # one idempotency key per branch


def test_batch_resize_of_an_empty_batch_completes_with_nothing_resized():
    runner = LocalRunner(REGISTRY)
    eid = runner.start("batch_resize", {"count": 0})
    assert runner.run_until_done(eid).status is Status.COMPLETED
    assert runner.context(eid)["resized"] == 0


def test_batch_resize_refuses_a_batch_over_1000_images_at_start():
    runner = LocalRunner(REGISTRY)
    with pytest.raises(InvalidInputError, match="count"):
        runner.start("batch_resize", {"count": 1001})
