"""The chaos run's figures, on small records built by hand so each count can be told in advance."""

from __future__ import annotations

import pytest

from loom_local.chaos import figures

E1, E2 = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"


def _held(at: float, rid: str, *messages: tuple[str, str, int]) -> dict:
    return {"at": at, "kind": "held", "request_id": rid, "messages": [
        {"message_id": m, "execution_id": e, "step": 0, "version": 1, "branch": None, "receive_count": n}
        for m, e, n in messages]}


def _invocation(rid: str, pid: int, start: float, end: float, status: str, deadline: float | None = None) -> list[dict]:
    return [{"at": start, "kind": "start", "request_id": rid, "role": "worker", "pid": pid,
             "deadline_at": deadline if deadline is not None else start + 20},
            {"at": end, "kind": "end", "request_id": rid, "pid": pid, "status": status}]


def _record(invocations=(), deliveries=(), redrives=(), steps=(), arms=(), finals=None) -> dict:
    plans = [{"execution_id": E1, "variant": "order_fulfillment/plain"},
             {"execution_id": E2, "variant": "flaky_greeting/plain"}]
    return {"plan": {"config": {"profile": "backlog", "seed": 1}, "executions": plans},
            "settings": {"sweep_every_s": 5.0, "worker_timeout_s": 20, "lease_s": 5, "worker_concurrency": 2,
                         "batch_size": 10},
            "window": {"t0": 100.0, "load_done": 200.0, "timed_out": False, "left_on_queue": 0, "bound_s": 900},
            "starts": {E1: {"at": 101.0, "answer": {}}, E2: {"at": 102.5, "answer": {}}},
            "actions": {}, "faults": {"arms": list(arms), "injected": []},
            "finals": finals or {}, "ledger": {"charges": [], "refunds": []},
            "runtime": {"invocations": list(invocations), "deliveries": list(deliveries), "redrives": list(redrives),
                        "steps": list(steps)}}


def test_deliveries_when_one_invocation_was_killed_count_its_messages_lost_and_the_stale_share_of_the_rest():
    # given: r1 handed three messages (a step advanced, a stale copy, a released record), r2 killed holding two
    record = _record(
        invocations=[_held(110, "r1", ("m1", E1, 1), ("m2", E1, 2), ("m3", E2, 1)), *_invocation("r1", 7, 110, 111, "ok"),
                     _held(120, "r2", ("m4", E2, 1), ("m5", E1, 3)), *_invocation("r2", 8, 120, 121, "crashed")],
        deliveries=[{"request_id": "r1", "message_id": "m1", "outcome": "advanced"},
                    {"request_id": "r1", "message_id": "m2", "outcome": "stale"},
                    {"request_id": "r1", "message_id": "m3", "outcome": "released"}])
    # when
    got = figures.deliveries(record)
    # then
    assert got["total"] == 5 and got["stale"] == 1 and got["stale_share"] == 0.2
    assert got["by_category"] == {"lost with its invocation": 2, "work": 1, "stale copy": 1, "released": 1}
    assert got["redelivered"] == 2


def test_redrives_when_something_died_holding_the_execution_count_after_a_kill_else_nothing_died():
    # given: E1's message was held by an invocation killed at 121; the sweeper re-drove E1 at 130 and again at
    # 150 (nothing died in between), and E2 at 140 (nothing ever held it in a dead invocation)
    record = _record(
        invocations=[_held(120, "r2", ("m4", E1, 1)), *_invocation("r2", 8, 120, 121, "crashed")],
        redrives=[{"at": 130, "execution_id": E1, "reason": "stalled_lease"},
                  {"at": 150, "execution_id": E1, "reason": "stalled_lease"},
                  {"at": 140, "execution_id": E2, "reason": "retry_due"}])
    # when
    got = figures.redrives(record)
    # then
    assert got["total"] == 3
    assert {(r["reason"], r["cause"]): r["n"] for r in got["by_reason"]} == {
        ("stalled_lease", "after a kill"): 1, ("stalled_lease", "nothing died"): 1, ("retry_due", "nothing died"): 1}


def test_kills_when_a_claimed_step_was_killed_time_its_next_body_start_against_the_bound():
    # given: a worker (pid 8, deadline 140) killed at 125 inside E1's step 1; E1's step 1 body starts again at
    # 157 (the step 1 body at 124 was the killed one; a body of step 2 at 150 is another step)
    arm = {"kind": "worker", "point": "step.enter", "fired": True, "fired_at": 125.0, "pid": 8,
           "info": {"execution_id": E1, "step": 1, "branch": None, "compensation": False}}
    record = _record(
        invocations=[_held(120, "r2", ("m4", E1, 1)), *_invocation("r2", 8, 120, 125.5, "crashed", deadline=140)],
        steps=[{"at": 124, "execution_id": E1, "step": 1}, {"at": 150, "execution_id": E1, "step": 2},
               {"at": 157, "execution_id": E1, "step": 1}],
        redrives=[{"at": 152, "execution_id": E1, "reason": "stalled_lease"}], arms=[arm])
    # when
    got = figures.kills(record)
    # then: bound = deadline 140 + 5 + tick 5 - kill 125 = 25; re-run 32 s after the kill
    (rerun,) = got["reruns"]
    assert (rerun["rerun_s"], rerun["bound_s"], rerun["redriven_s"]) == (32.0, 25.0, 27.0)
    assert got["within_bound"] == 0 and got["fired"] == {"worker": 1}
    assert got["interrupted"][0]["request_id"] == "r2" and got["held_by_killed"] == 1


def test_kills_when_the_sweeper_re_driving_the_killed_step_was_killed_too_count_it_apart_from_the_bound():
    # given: the worker killed at 125 inside E1's step 1 (as above), then the sweeper killed at 146 right after
    # claiming E1's re-drive; E1's step 1 body starts again at 190
    worker = {"kind": "worker", "point": "step.enter", "fired": True, "fired_at": 125.0, "pid": 8,
              "info": {"execution_id": E1, "step": 1, "branch": None, "compensation": False}}
    sweeper = {"kind": "sweeper", "point": "sweeper.after_claim", "fired": True, "fired_at": 146.0, "pid": 9,
               "info": {"execution_id": E1}}
    record = _record(
        invocations=[_held(120, "r2", ("m4", E1, 1)), *_invocation("r2", 8, 120, 125.5, "crashed", deadline=140)],
        steps=[{"at": 124, "execution_id": E1, "step": 1}, {"at": 190, "execution_id": E1, "step": 1}],
        redrives=[{"at": 188, "execution_id": E1, "reason": "stalled_lease"}], arms=[worker, sweeper])
    # when
    got = figures.kills(record)
    # then: late (65 s against a 25 s bound), and counted as a double fault, not held to the single fault's bound
    (rerun,) = got["reruns"]
    assert rerun["sweeper_killed"] is True and rerun["rerun_s"] == 65.0
    assert (got["within_bound"], got["single_fault"], got["single_fault_within_bound"]) == (0, 0, 0)


def test_measure_when_executions_ended_takes_time_to_end_from_the_api_and_statuses_from_the_ends():
    # given
    finals = {E1: {"status": "COMPLETED", "created_at": "2026-01-01T00:00:00.000000Z",
                   "updated_at": "2026-01-01T00:00:30.500000Z"},
              E2: {"status": "RUNNING", "created_at": "2026-01-01T00:00:00.000000Z",
                   "updated_at": "2026-01-01T00:00:05.000000Z"}}
    # when
    got = figures.measure(_record(finals=finals))
    # then
    assert got["by_status"] == {"COMPLETED": 1, "RUNNING": 1}
    assert got["time_to_end"] == {"n": 1, "median": 30.5, "p90": 30.5, "max": 30.5}
    assert got["started_over_s"] == pytest.approx(2.5)
