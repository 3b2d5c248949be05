"""The simulation checks itself: a deliberately broken store is caught within a few seeds, a run where
everything crashes is rejected as meaningless, seeds replay exactly, and the fault machinery does what
it claims (a crash after a call keeps the call's effect and loses the acknowledgement)."""

from __future__ import annotations

import datetime as dt
import os
import random
import subprocess
import sys

import pytest

from engine_core.adapters.memory import MemoryStore
from loomsim.runner import run_seed
from loomsim.sim import FaultMix, Simulation, make_config
from loomsim.world import BROKEN_KINDS, OpPlan, SimulatedCrash, broken_store_class, due_snapshot, query_snapshot

HERE = os.path.dirname(os.path.abspath(__file__))

# What the checker must say about each broken store, and within how many seeds.
EXPECTED = {
    "commit_ignores_version": (("two successful commits from", "version chain", "stored version"), 12),
    "put_ignores_later_attempt": (("replaced the record of later attempt",), 12),
    "claim_not_counted": (("did not count its attempt", "without a claim"), 4),
    "terminal_keeps_due_key": (("due index",), 4),
    "index_misses_items": (("not terminal within", "nothing can ever wake"), 4),
}


@pytest.mark.parametrize("kind", BROKEN_KINDS)
def test_a_broken_store_is_caught_within_a_few_seeds(kind):
    phrases, budget = EXPECTED[kind]
    factory = broken_store_class(kind)
    seen = []
    for seed in range(budget):
        result = run_seed(seed, store_factory=factory)
        hits = [v for v in result.violations if any(p in v for p in phrases)]
        if hits:
            return
        seen += result.violations[:2]
    pytest.fail(f"{kind}: no violation naming {phrases} in {budget} seeds; saw {seen[:6]}")


def test_the_real_store_is_not_flagged_by_the_broken_store_phrases():
    """The phrases above come from the breakage, not from noise every run produces."""
    for seed in range(12):
        for text in run_seed(seed).violations:
            for phrases, _ in EXPECTED.values():
                assert not any(p in text for p in phrases), f"seed {seed}: {text}"


@pytest.mark.parametrize("victims", [("start", "deliver", "sweep"), ("deliver",)])
def test_a_run_where_everything_crashes_says_nothing_and_fails(victims):
    class CrashFirst(Simulation):
        def plan(self, kind):
            if not self.faults_on or kind not in victims:
                return OpPlan()
            return OpPlan(crash_at=1, crash_after=False)  # the operation dies before its first call

    sim = CrashFirst(make_config(3), MemoryStore)
    sim.run()
    assert sim.fault_stats["commits.fault_phase_by_workers"] == 0
    if victims == ("deliver",):
        assert sim.fault_stats["ops.deliver"] > 0
    assert any("the run says nothing" in v for v in sim.violations), sim.violations
    # ... while the quiet phase still finished everything, so only the meaningfulness check objects
    assert not sim.live()


def test_a_seed_replays_exactly_in_process_and_in_another_process():
    first, again = run_seed(7, tracing=True), run_seed(7, tracing=True)
    assert first.trace == again.trace and first.digest
    # another interpreter, another hash seed: set iteration order must not leak into the schedule
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, os.path.join(HERE, "sim_main.py"), "--seed", "7", "--digest"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == first.digest, out.stderr[-2000:]


def test_different_seeds_explore_different_schedules():
    digests = {run_seed(seed, tracing=True).digest for seed in range(5)}
    assert len(digests) == 5


def test_simulated_crash_cannot_be_swallowed_by_engine_code():
    assert issubclass(SimulatedCrash, BaseException) and not issubclass(SimulatedCrash, Exception)
    try:
        try:
            raise SimulatedCrash(1, "here")
        except Exception:  # what engine code catches
            pytest.fail("an except Exception caught the crash")
    except SimulatedCrash:
        pass


def _quiet_sim(seed: int = 11) -> Simulation:
    config = make_config(seed, fx=FaultMix(), fault_ops=0)
    return Simulation(config, MemoryStore)


def test_a_crash_after_a_commit_keeps_the_commit_and_loses_the_acknowledgement():
    sim = _quiet_sim()
    ps = sim.planned[0]
    sim.start(ps)
    (m,) = sim.queue.messages.values()
    wf = sim.specs[ps.workflow]
    plan = OpPlan(crash_on="commit", crash_after=True)
    sim.plan = lambda kind: plan  # this one delivery crashes right after its checkpoint
    sim.deliver(m)
    meta = sim.inner.metas[ps.eid]
    assert meta["version"] == 2, "the commit happened before the crash"
    assert sim.stats["crash.after.commit"] == 1 and sim.stats["crashed.deliver"] == 1
    assert m.mid in sim.queue.messages, "not acknowledged"
    if wf.steps[0].kind != "sleep" and len(wf.steps) > 1:
        assert len(sim.queue.messages) == 1, "the next step was never enqueued"
    # SQS hands it out again after the visibility timeout; now it is stale and gets acknowledged
    sim.plan = lambda kind: OpPlan()
    assert not sim.queue.visible()
    sim.clock.advance(sim.config.visibility_s)
    assert m in sim.queue.visible()
    sim.deliver(m)
    assert m.mid not in sim.queue.messages
    assert sim.stats["outcome.stale"] + sim.stats["outcome.terminal"] == 1


def test_a_crash_before_a_call_prevents_it():
    sim = _quiet_sim()
    ps = sim.planned[0]
    sim.plan = lambda kind: OpPlan(crash_on="create", crash_after=False)
    sim.start(ps)
    assert not sim.inner.metas and not ps.acked
    sim.plan = lambda kind: OpPlan(crash_on="create", crash_after=True)
    sim.start(ps)
    assert ps.eid is None and not ps.acked and len(sim.inner.metas) == 1, "created, never acknowledged"
    sim.plan = lambda kind: OpPlan()
    sim.start(ps)  # the client retries with its token and gets the same execution
    assert ps.acked and ps.eid in sim.inner.metas and len(sim.inner.metas) == 1


def test_a_pause_runs_other_operations_inside_the_paused_call():
    sim = _quiet_sim()
    ps = sim.planned[0]
    sim.start(ps)
    (m,) = sim.queue.messages.values()
    sim.faults_on = True
    calls = []
    sim.pause = lambda op, where: calls.append((op.kind, where, sim.inner.metas[ps.eid]["version"]))
    sim.plan = lambda kind: OpPlan(pause_at=1, pause_after=False)
    sim.deliver(m)
    assert calls == [("deliver", "before load_state", 1)]


def test_stale_index_reads_follow_the_query_contract():
    """query_snapshot answers exactly like MemoryStore.query_due on the same index content."""
    rng = random.Random(5)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for _ in range(30):
        shards = rng.choice([1, 2, 4])
        store = MemoryStore(shards=shards)
        for i in range(rng.randint(0, 12)):
            eid = f"00000000-0000-4000-8000-{i:012d}"
            store.metas[eid] = {"next_wake_at": (t0 + dt.timedelta(seconds=rng.choice([0, 5, 5, 60, 600]))).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ")} if rng.random() < 0.8 else {"status": "COMPLETED"}
        snap = due_snapshot(store)
        now = t0 + dt.timedelta(seconds=rng.choice([0, 10, 100, 1000]))
        for shard in range(shards):
            limit, cursor, cursor2 = rng.choice([1, 2, 100]), None, None
            while True:
                a = store.query_due(shard, now, limit, cursor)
                b = query_snapshot(snap, shards, shard, now, limit, cursor2)
                assert a.items == b.items and a.cursor == b.cursor and a.read_count == b.read_count
                if a.cursor is None:
                    break
                cursor, cursor2 = a.cursor, b.cursor


def _backlog_seeds(n: int) -> list[int]:
    return [seed for seed in range(400) if make_config(seed).fx.backlog][:n]


def test_backlog_seeds_redrive_queued_messages_within_the_doubling_schedule():
    # given: seeds whose queue delays each send by a share of the lease per message already queued
    seeds = _backlog_seeds(12)
    # when
    results = [run_seed(seed) for seed in seeds]
    # then: messages waited past their leases and were re-drived several times, and never more than allowed
    assert all(r.ok for r in results), [r.violations[:3] for r in results if not r.ok]
    stats = sum((r.stats for r in results), start=__import__("collections").Counter())
    assert stats["queue.backlogged"] > 100 and stats["backlog.stretches_of_several_copies"] >= 10, stats
    # and the workers' backlog mark held the sweeper back from re-sending messages only queued
    assert stats["sweep.skipped.behind_backlog"] > 100, stats


def test_a_sweeper_that_never_redrives_a_message_behind_a_backlog_mark_is_caught(monkeypatch):
    # given: a sweeper that trusts the mark forever, so a message lost under a backlog is never re-sent
    from engine_core import sweeper

    monkeypatch.setattr(sweeper, "behind_backlog", lambda *args: True)
    # when
    results = [run_seed(seed) for seed in _backlog_seeds(12)]
    # then: the executions whose message was lost never end
    hits = [v for r in results for v in r.violations if "not terminal within" in v]
    assert hits, [r.violations[:2] for r in results]


def test_a_sweeper_that_redrives_every_lease_under_a_backlog_is_caught(monkeypatch):
    # given: the engine as before the backoff, a fresh copy each lease whatever the message's age
    from engine_core import transitions

    real = transitions.redriven
    monkeypatch.setattr(transitions, "redriven",
                        lambda e, now, lease_s, slack_s, max_doublings=6: real(e, now, lease_s, slack_s, 0))
    # when: the workers' backlog mark off, so the lease alone decides when to re-send
    results = [run_seed(seed, backlog_marks=False) for seed in _backlog_seeds(12)]
    # then
    hits = [v for r in results for v in r.violations if "a backlog is multiplied" in v]
    assert hits, [r.violations[:2] for r in results]


def test_copies_allowed_follows_the_lease_doubling():
    from loomsim.backlog import copies_allowed

    # a 60 s lease: copies at 60, 120, 240, 480 s after the send (waits 60, 60, 120, 240), capped waits after
    assert [copies_allowed(age, 60, 6) for age in (59, 60, 119, 120, 239, 240, 479, 480)] == [0, 1, 1, 2, 2, 3, 3, 4]
    assert copies_allowed(60 + 60 * 10, 60, 0) == 11  # no doubling: one per lease
