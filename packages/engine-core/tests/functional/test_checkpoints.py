"""A delivery reads the history from the latest checkpoint on, not from the start (issue 22): a record
that holds the whole context after its step, written with the step's own record. Engine + memory store
+ manual clock; reads counted at the store."""

from __future__ import annotations

from engine_core import EngineSettings, PermanentStepError, Registry, StepStatus, step, wait_for_event, workflow
from engine_core.adapters.memory import MemoryStore
from engine_core.registry import build_workflow
from engine_core.testing import LocalRunner


class ReadCountingStore(MemoryStore):
    """Counts the history records each delivery's read returned."""

    def __init__(self):
        super().__init__()
        self.read_sizes: list[int] = []

    def load_state(self, execution_id, since=None):
        state = super().load_state(execution_id, since)
        if state is not None:
            self.read_sizes.append(len(state.records))
        return state


def long_flow(n: int, registry: Registry, fail_at: int | None = None, journal: list | None = None):
    def make(i: int):
        def body(ctx):
            if i == fail_at:
                raise PermanentStepError("the last step fails for good")
            return {f"k{i % 7}": i, "last": i}
        body.__name__ = f"s{i:05d}"
        return body

    def undo(ctx):
        journal.append((ctx.step_index, ctx.result))

    steps = [step(make(0), compensate=undo) if journal is not None else make(0)] + [make(i) for i in range(1, n)]
    registry.register(build_workflow("long", steps, source="test_checkpoints.long"))


def test_every_delivery_of_a_long_execution_reads_a_bounded_tail_and_the_context_is_whole():
    registry, store = Registry(), ReadCountingStore()
    long_flow(1500, registry)
    runner = LocalRunner(registry, store=store, settings=EngineSettings(max_steps=10_000, max_chain_steps=1))
    eid = runner.start("long", {"seed": 1})
    done = runner.run_until_done(eid)
    assert done.status.value == "COMPLETED" and done.current_step == 1500
    # then: no delivery read more than a checkpoint's tail, however long the history had grown
    assert max(store.read_sizes[1:]) <= EngineSettings().checkpoint_records + 1, max(store.read_sizes)
    assert done.checkpoint is not None and done.checkpoint >= 1400
    ctx = runner.context(eid)
    assert ctx["seed"] == 1 and ctx["last"] == 1499 and all(ctx[f"k{j}"] == max(i for i in range(1500) if i % 7 == j)
                                                            for j in range(7))
    keys = sorted(runner.store.steps[eid])
    assert keys[999].startswith("STEP#999#") and keys[1000].startswith("STEP#~001000#")  # key order = step order


def test_a_failure_far_after_a_compensable_step_reads_the_whole_history_to_undo_it():
    registry, journal = Registry(), []
    long_flow(300, registry, fail_at=299, journal=journal)
    runner = LocalRunner(registry, settings=EngineSettings(max_chain_steps=1))
    eid = runner.start("long", {})
    done = runner.run_until_done(eid)
    assert (done.status.value, done.compensated) == ("FAILED", True)
    assert journal == [(0, {"k0": 0, "last": 0})]


def test_an_unusable_checkpoint_is_read_around_from_the_whole_history():
    registry = Registry()
    long_flow(250, registry)
    runner = LocalRunner(registry, settings=EngineSettings(max_chain_steps=1))
    eid = runner.start("long", {"seed": 2})
    while runner.engine.get(eid).checkpoint is None:
        runner.step_once()
    kept = runner.engine.get(eid).checkpoint
    key = next(k for k in runner.store.steps[eid] if k.startswith(f"STEP#{kept:03d}#"))
    del runner.store.steps[eid][key]["context"]  # the checkpoint lost its context
    done = runner.run_until_done(eid)
    assert done.status.value == "COMPLETED" and runner.context(eid)["last"] == 249


def test_a_second_wait_after_a_checkpoint_does_not_consume_the_first_waits_event_again():
    registry = Registry()

    def filler(i):
        def body(ctx):
            return {"n": i}
        body.__name__ = f"f{i:03d}"
        return body

    @workflow("two_waits_apart", registry=registry)
    class TwoWaitsApart:
        steps = ([wait_for_event("go", timeout=600, name="first")] + [filler(i) for i in range(150)]
                 + [wait_for_event("go", timeout=600, name="second")])

    runner = LocalRunner(registry, settings=EngineSettings(max_chain_steps=1))
    eid = runner.start("two_waits_apart", {})
    runner.send_event(eid, "go", {"which": 1}, event_id="a")
    waiting = runner.run_until(eid, "WAITING")
    assert waiting.current_step == 151 and waiting.checkpoint is not None  # the first event stays consumed
    runner.send_event(eid, "go", {"which": 2}, event_id="b")
    assert runner.run_until_done(eid).status.value == "COMPLETED"
    ctx = runner.context(eid)
    assert (ctx["first"], ctx["second"]) == ({"which": 1}, {"which": 2})
    records = [r for r in runner.history(eid) if r.kind == "event" and r.status is StepStatus.SUCCEEDED]
    assert [r.event_id for r in records] == ["a", "b"]


def test_a_handoff_checkpoint_is_written_between_deliveries_but_not_with_the_last_step():
    # given: every step hands the execution to the next delivery, each result over the 4 KB rule
    registry = Registry()

    def make(i: int):
        def body(ctx):
            return {f"blob{i}": "x" * (5000 if i < 2 else 30000)}  # the last outweighs the context kept
        body.__name__ = f"s{i}"
        return body

    registry.register(build_workflow("handoffs", [make(i) for i in range(3)], source="test_checkpoints.handoffs"))
    runner = LocalRunner(registry, settings=EngineSettings(max_chain_steps=1))
    eid = runner.start("handoffs", {})
    # when
    done = runner.run_until_done(eid)
    # then: the first two records hold the context for the delivery after them; the last one, which nothing
    # reads to go on, does not pay for it
    records = runner.history(eid)
    assert done.status.value == "COMPLETED"
    assert [r.context_blob is not None for r in records] == [True, True, False]


def test_a_checkpoint_keeps_the_results_as_stored_when_a_later_body_changes_them_in_place():
    # given: each step returns a list and a nested dict, and every body changes the earlier results in place
    # through its context; the delivery chains, so the checkpoint is built from results it encoded itself
    registry, store = Registry(), ReadCountingStore()

    def make(i: int):
        def body(ctx):
            for key, value in ctx.data.items():
                if key.startswith("r"):
                    value["items"].append("changed")
                    value["nested"]["n"] = -1
            return {f"r{i}": {"items": [i], "nested": {"n": i}}}
        body.__name__ = f"s{i:03d}"
        return body

    registry.register(build_workflow("mutating", [make(i) for i in range(40)], source="test_checkpoints.mutating"))
    runner = LocalRunner(registry, store=store, settings=EngineSettings(checkpoint_records=8, max_chain_steps=100))
    eid = runner.start("mutating", {})
    # when
    done = runner.run_until_done(eid)
    # then: every checkpoint written holds each result as its step returned it
    assert done.status.value == "COMPLETED" and done.checkpoint is not None
    kept = [r for r in store.history(eid) if r.context_blob is not None]
    assert len(kept) >= 4
    from engine_core import codec
    for record in kept:
        context = codec.decode(record.context_blob)
        assert context == {f"r{i}": {"items": [i], "nested": {"n": i}} for i in range(record.step_index + 1)}
    assert runner.context(eid) == {f"r{i}": {"items": [i], "nested": {"n": i}} for i in range(40)}
