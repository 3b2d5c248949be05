"""Invariants checked after every run (docs: aws-pitfalls.md section 5; issues 5 and 10).

Evidence comes from four places: the store's final items; what the store proxy saw on every
successful commit (the execution item before and after it) and every history write while the run
went on; the step bodies themselves (each run, its attempt number, the operation it ran in and how it
ended); and the queue. The checker counts what really happened from that evidence (claims, failed
body runs, advances) and compares it with what the engine stored and claims; it never accepts a state
because the engine could only have produced it. Each violation is a sentence naming the execution.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import re
import uuid
from collections import Counter
from dataclasses import dataclass

from engine_core import codec
from engine_core.clock import parse_ts
from engine_core.engine import rebuild_context
from engine_core.errors import CorruptStateError
from engine_core.model import CorruptRecord, Status, StepRecord, StepStatus
from engine_core.adapters._items import execution_from_attrs, step_from_attrs

from . import checks_code
from .checks_code import RETURN_KIND, expected_result

TERMINAL = ("COMPLETED", "FAILED")

KNOWN_DEFECTS: dict[str, str] = {}
"""Engine defects the simulation found that are not fixed yet: reported (``SimResult.known``, and an
xfail in test_sim_invariants.py that lists the seeds), not counted as violations. Remove an entry once
the engine is fixed: the check becomes a violation again."""
# Must match engine_core.engine's namespace: ids are derived from start tokens.
_TOKEN_NAMESPACE = uuid.UUID("6c6f6f6d-0000-4000-8000-746f6b656e73")
_OF = re.compile(r"\(attempt (\d+) of (\d+)\)")


def token_id(token: str) -> str:
    return str(uuid.uuid5(_TOKEN_NAMESPACE, token))


def meaningful_minimums(sim) -> tuple[int, int, int]:
    """(deliveries, worker transitions needed, deliveries needed that ran to an outcome) for the fault
    phase of this run. A run where (nearly) every delivery died proves nothing; over 3,000 seeds of
    the real engine the lowest ratios seen were 3 transitions in 20 deliveries and 10 outcomes in 15,
    so the floors are 1 in 20 and 1 in 5 (and at least one of each)."""
    deliveries = sim.fault_stats["ops.deliver"]
    return deliveries, max(1, math.ceil(deliveries / 20)), max(1, math.ceil(deliveries / 5))


def _ts(value) -> dt.datetime | None:
    return parse_ts(value) if isinstance(value, str) else None


@dataclass
class Claim:
    """An attempt started: a commit that claimed a step (counted from the store's items)."""

    seq: int
    step: int
    attempt: int
    at: dt.datetime
    lease: dt.datetime | None
    op_id: int
    used: bool = False


def check_run(sim) -> None:
    v = sim.violation
    inner = sim.inner
    planned = {token_id(ps.token): ps for ps in sim.planned}

    # Every acknowledged start exists, and every execution belongs to a start.
    for ps in sim.planned:
        if ps.acked and ps.eid not in inner.metas:
            v(f"start #{ps.index} was acknowledged as {ps.eid} but the execution does not exist")
    for eid in inner.metas:
        if eid not in planned:
            v(f"{eid} exists but no start asked for it")

    due = inner.due_ids()
    outcomes: Counter = Counter()
    for eid in sorted(inner.metas):
        try:
            e = execution_from_attrs(eid, copy.deepcopy(inner.metas[eid]))
        except CorruptStateError as exc:
            v(f"{eid}: the execution item is unreadable: {exc}")
            continue
        before = Counter(outcomes)
        _check_execution(sim, e, eid in due, planned.get(eid), outcomes)
        if e.workflow in sim.specs and sim.specs[e.workflow].code:
            sim.stats.update({f"code.result.{k}": 1 for k in outcomes - before})

    _check_meaningful(sim, outcomes)
    sim.stats.update({f"result.{k}": n for k, n in outcomes.items()})


def _check_execution(sim, e, in_due: bool, ps, outcomes: Counter) -> None:
    v = sim.violation
    inner, settings = sim.inner, sim.settings
    eid = e.execution_id
    wf = sim.specs[e.workflow]
    tag = f"{eid[:8]} ({e.workflow})"
    commits = sim.commits.get(eid, [])
    puts = sim.puts.get(eid, [])
    history = inner.steps.get(eid, {})
    records: dict[int, StepRecord] = {}
    returned: StepRecord | None = None  # a code-first function's return value
    for key in sorted(history):
        r = step_from_attrs(key, copy.deepcopy(history[key]))
        if isinstance(r, CorruptRecord):
            v(f"{tag}: history item {key} is unreadable: {r.detail}")
        elif wf.code and r.kind == RETURN_KIND:
            returned = r
        elif r.step_index in records:
            v(f"{tag}: two history items for step {r.step_index}")
        else:
            records[r.step_index] = r

    if sim.creates[eid] != 1:
        v(f"{tag}: created {sim.creates[eid]} times")

    # -- terminal <=> out of the due index; everything ended once faults stopped -------------------
    terminal = e.status.is_terminal
    if terminal == in_due:
        v(f"{tag}: status {e.status.value} but {'in' if in_due else 'not in'} the due index")
    if not terminal:
        v(f"{tag}: still {e.status.value} at step {e.current_step} v{e.version} after faults stopped "
          f"(next_wake_at={e.next_wake_at}, timer={e.timer})")

    # -- versions: one step up per commit, never two commits from the same version ------------------
    expected = 1
    seen_from: set[int] = set()
    for c in commits:
        b, a = c.before, c.after
        if c.new_version != c.expected_version + 1:
            v(f"{tag}: a commit from v{c.expected_version} stored v{c.new_version} (must be +1)")
        if c.expected_version in seen_from:
            v(f"{tag}: two successful commits from v{c.expected_version} (seq {c.seq}): the conditional "
              "write let a stale transition through")
        seen_from.add(c.expected_version)
        if b.get("version") != c.expected_version or b.get("current_step") != c.expected_step \
                or c.expected_version != expected:
            v(f"{tag}: commit expecting s{c.expected_step} v{c.expected_version} applied to "
              f"s{b.get('current_step')} v{b.get('version')} (version chain at v{expected})")
        if b.get("status") in TERMINAL:
            v(f"{tag}: a {b.get('status')} execution was changed by a later commit (terminal must absorb)")
        if not 0 <= a.get("current_step", 0) - b.get("current_step", 0) <= 1:
            v(f"{tag}: current_step went from {b.get('current_step')} to {a.get('current_step')}")
        expected = c.new_version
    if e.version != expected:
        v(f"{tag}: stored version v{e.version}, but the observed commits lead to v{expected}")

    # -- claims: counted at the claim, leased over the budget, never two at once ---------------------
    claims: dict[int, list[Claim]] = {}
    holder: Claim | None = None  # the claim the stored item holds, as the commits went
    retry_at: dict[int, dt.datetime] = {}
    advances: dict[int, list] = {}
    for c in commits:
        b, a = c.before, c.after
        step = a.get("current_step", 0)
        total_delta = a.get("total_attempts", 0) - b.get("total_attempts", 0)
        if b.get("attempt_started_at") is not None and holder is not None and c.op_id != holder.op_id:
            # Only the claimer may move a claimed execution on, or the sweeper once the lease ran out.
            if c.op_kind != "sweep":
                v(f"{tag}: op {c.op_id} ({c.op_kind}) committed v{c.expected_version} while attempt "
                  f"{holder.attempt} of step {holder.step} (op {holder.op_id}) held the step")
            elif holder.lease is not None and c.at < holder.lease:
                v(f"{tag}: the sweeper re-drove step {holder.step} at {c.at}, inside attempt {holder.attempt}'s "
                  f"lease (until {holder.lease}): the step could run twice at once")
        if c.advanced:
            advances.setdefault(b.get("current_step", 0), []).append(c)
        if c.claim:
            want = b.get("attempt", 0) + 1 if step == b.get("current_step") else 1
            if a.get("attempt") != want:
                v(f"{tag}: a claim of step {step} stored attempt {a.get('attempt')}, the count was "
                  f"{b.get('attempt', 0) if step == b.get('current_step') else 0} (the claim did not count its attempt)")
            if total_delta != 1:
                v(f"{tag}: a claim of step {step} moved total_attempts by {total_delta}")
            if c.op_kind != "deliver":
                v(f"{tag}: a {c.op_kind} claimed step {step} (only a worker running it may)")
            if not c.advanced and c.message is not None and (c.message.step, c.message.version) != (
                    b.get("current_step"), b.get("version")):
                v(f"{tag}: step {step} was claimed by a delivery of s{c.message.step} v{c.message.version}, "
                  f"the execution was at s{b.get('current_step')} v{b.get('version')} (a stale copy claimed)")
            claim = Claim(c.seq, step, a.get("attempt", 0), c.at, _ts(a.get("next_wake_at")), c.op_id)
            timeout = wf.timeout(step)
            if claim.lease is None or claim.lease < c.issued_at + dt.timedelta(seconds=timeout):
                v(f"{tag}: attempt {claim.attempt} of step {step} claimed at {c.issued_at} with a lease until "
                  f"{claim.lease}, shorter than its {timeout:g}s budget")
            deadline = sim.op_deadlines.get(c.op_id)
            if deadline is not None and claim.lease is not None and claim.lease < deadline - dt.timedelta(milliseconds=1):
                v(f"{tag}: attempt {claim.attempt} of step {step} leased until {claim.lease}, before its "
                  f"invocation's deadline {deadline}: another worker could take over while it still runs")
            earlier = claims.get(step, [])
            if earlier:
                prev = earlier[-1]
                released = any(prev.seq < o.seq < c.seq and o.released and o.op_id == prev.op_id for o in commits)
                if not released and (prev.lease is None or c.at < prev.lease):
                    v(f"{tag}: attempt {claim.attempt} of step {step} claimed at {c.at}, while attempt "
                      f"{prev.attempt} (claimed {prev.at}) was unsettled and its lease ran until {prev.lease}")
            if step in retry_at and c.at < retry_at[step] - dt.timedelta(seconds=settings.early_tolerance_s):
                v(f"{tag}: attempt {claim.attempt} of step {step} claimed at {c.at}, before the retry backoff "
                  f"ended at {retry_at[step]} (a retry spent early)")
            claims.setdefault(step, []).append(claim)
            holder = claim
        else:
            if total_delta != 0:
                v(f"{tag}: a commit that claimed nothing moved total_attempts by {total_delta}")
            if a.get("attempt_started_at") is None:
                holder = None
        if c.released and a.get("timer") == "retry":
            retry_at[step] = _ts(a.get("next_wake_at"))
            _check_retry(sim, tag, eid, c, b.get("attempt", 0), wf)
    n_claims = sum(len(x) for x in claims.values())
    if e.total_attempts != n_claims:
        v(f"{tag}: total_attempts is {e.total_attempts}, but {n_claims} claims were observed")
    for step, cl in claims.items():
        if len(cl) > wf.policy(step).max_attempts:
            v(f"{tag}: step {step} claimed {len(cl)} times, its policy allows {wf.policy(step).max_attempts}")

    # -- every body run under its own claim, one run per claim --------------------------------------
    for index in range(len(wf.steps)):
        for run in sim.bodies.get((eid, index), []):
            match = [cl for cl in claims.get(index, []) if cl.op_id == run.op_id and cl.attempt == run.attempt
                     and cl.seq < run.seq]
            if not match:
                v(f"{tag}: step {index} body ran as attempt {run.attempt} (op {run.op_id}) without a claim of "
                  "that attempt by its worker")
            elif match[-1].used:
                v(f"{tag}: step {index}: two body runs under the claim of attempt {run.attempt}")
            else:
                match[-1].used = True

    # -- history writes: by the attempt that holds the step -------------------------------------------
    for p in puts:
        if wf.code and p.kind == RETURN_KIND:
            continue  # checks_code.check_return
        if p.step >= len(wf.steps):
            v(f"{tag}: a history write for step {p.step}, past the workflow's end")
            continue
        if wf.steps[p.step].kind == "sleep":
            continue
        held = any(cl.op_id == p.op_id and cl.attempt == p.attempts and cl.seq < p.seq for cl in claims.get(p.step, []))
        if not held and p.error_code != "attempts_exhausted":
            v(f"{tag}: step {p.step} record of attempt {p.attempts} written by op {p.op_id}, which did not claim it")
        if p.status == "SUCCEEDED":
            ok = any(r.op_id == p.op_id and r.attempt == p.attempts and r.end == "ok"
                     for r in sim.bodies.get((eid, p.step), []))
            if not ok or p.result_blob is None or codec.decode(p.result_blob) != expected_result(eid, wf, p.step):
                v(f"{tag}: step {p.step} recorded SUCCEEDED by attempt {p.attempts} with {p.result_blob!r}, not what "
                  "a successful body of that attempt returned")

    # -- each step advanced past once, by the attempt that succeeded, with its record ----------------
    for index, moves in sorted(advances.items()):
        if len(moves) > 1:
            v(f"{tag}: the execution advanced past step {index} {len(moves)} times")
        c = moves[0]
        if index >= len(wf.steps):
            v(f"{tag}: advanced past step {index}, the workflow has {len(wf.steps)}")
            continue
        spec = wf.steps[index]
        if spec.kind == "sleep":
            # A sleep begins at its own position (SLEEPING, attempt 1) and is passed only once its wake time
            # came: by its own delivery, never under a claim.
            began = _sleep_began(commits, index, c.seq)
            if began is None or c.before.get("attempt", 0) < 1 or c.before.get("attempt_started_at") is not None:
                v(f"{tag}: passed sleep step {index} from {c.before.get('status')}/{c.before.get('timer')} "
                  f"attempt {c.before.get('attempt')} without beginning it (a sleep is passed after it began)")
            elif c.at < _ts(began.after.get("next_wake_at")) - dt.timedelta(seconds=settings.early_tolerance_s):
                v(f"{tag}: passed sleep step {index} at {c.at}, before its wake time "
                  f"{began.after.get('next_wake_at')}")
            continue
        if wf.code:  # its record may be passed by a later delivery's replay
            checks_code.check_advance(sim, tag, eid, wf, index, c, puts, records)
            continue
        attempt = c.before.get("attempt", 0)
        if c.before.get("attempt_started_at") is None:
            v(f"{tag}: advanced past task step {index} with no attempt holding it")
        if not any(r.op_id == c.op_id and r.attempt == attempt and r.end == "ok"
                   for r in sim.bodies.get((eid, index), [])):
            v(f"{tag}: advanced past step {index} (op {c.op_id}), but no body of attempt {attempt} succeeded in it")
        if not any(p.op_id == c.op_id and p.step == index and p.attempts == attempt and p.status == "SUCCEEDED"
                   and p.seq < c.seq for p in puts):
            v(f"{tag}: advanced past step {index} before its worker recorded the result of attempt {attempt}")
        r = records.get(index)
        if r is None or r.status is not StepStatus.SUCCEEDED or r.attempts != attempt:
            v(f"{tag}: step {index} was passed by attempt {attempt}, but its history record is "
              f"{None if r is None else (r.status.value, r.attempts)}")
        elif r.result_blob is None or codec.decode(r.result_blob) != expected_result(eid, wf, index):
            v(f"{tag}: step {index} recorded result {r.result_blob!r}, not what its body returned")

    for index, r in records.items():
        if index >= len(wf.steps) or index > e.current_step:
            v(f"{tag}: history holds step {index}, beyond current step {e.current_step}")
            continue
        spec = wf.steps[index]
        if spec.kind == "sleep" and index in advances:
            c = _sleep_began(commits, index, advances[index][0].seq)
            got = codec.decode(r.result_blob) if r.result_blob else None
            if c is None or not isinstance(got, dict) or got.get("wake_at") != c.after.get("next_wake_at"):
                sim.known_defect("sleep_record_overwritten", f"{tag}: sleep step {index} recorded {got}, but the "
                                 f"execution slept until {c.after.get('next_wake_at')}")

    if wf.code:
        checks_code.check_names(v, tag, wf, records)
        checks_code.check_recorded_once(sim, tag, eid, wf, claims, puts)
        checks_code.check_return(sim, tag, eid, wf, e, commits, puts, returned)

    # -- the ending ------------------------------------------------------------------------------------
    notices = [d for d in sim.queue.dead_letters if d.get("execution_id") == eid]
    if e.status is Status.COMPLETED:
        outcomes["completed"] += 1
        if not wf.completable:
            v(f"{tag}: COMPLETED, but step specs say it cannot complete")
        if e.current_step != len(wf.steps):
            v(f"{tag}: COMPLETED at step {e.current_step} of {len(wf.steps)}")
        for index, spec in enumerate(wf.steps):
            if len(advances.get(index, [])) != 1:
                v(f"{tag}: COMPLETED but advanced past step {index} ({spec.name}) "
                  f"{len(advances.get(index, []))} times")
        want = dict(ps.input) if ps else {}
        for spec in wf.steps:
            if spec.kind != "sleep":
                want.update(expected_result(eid, wf, spec.index))
        try:
            got = rebuild_context(inner.inputs.get(eid, ""), [records[i] for i in sorted(records)],
                                  wf.definition, len(wf.steps))
        except ValueError as exc:
            got = f"unreadable: {exc}"
        if got != want and not wf.code:  # what a function made is its return value (checks_code.check_return)
            v(f"{tag}: COMPLETED with context {got}, expected {want}")
        if notices:
            v(f"{tag}: COMPLETED but a failure notice was sent")

    if e.status is Status.FAILED:
        _check_failure(sim, tag, e, wf, claims, records, outcomes)
        if e.finalized and not notices:
            v(f"{tag}: FAILED and finalized, but no failure notice reached the dead-letter queue")

    if terminal:
        if not e.finalized:
            v(f"{tag}: {e.status.value} but never finalized (finalize_by {e.finalize_by}), though the sweeper "
              "ran past it")
        elif e.expires_at is not None:
            ending = next((c for c in commits if c.new_status in TERMINAL), None)
            for index, r in records.items():
                if r.expires_at is not None and r.expires_at < e.expires_at:
                    text = (f"{tag}: finalized, but the history item of step {index} expires at {r.expires_at}, "
                            f"before the execution ({e.expires_at})")
                    last = [p for p in puts if p.step == index][-1:]
                    late = (ending is not None and last and last[0].seq > ending.seq
                            and last[0].op_id != ending.op_id)
                    if late and sim.op_deadlines.get(last[0].op_id) is None:
                        # A writer with no invocation deadline (in-process use, never a Lambda delivery)
                        # stalled past its claim's lease: nothing fences its one late record.
                        sim.stat("outside_contract.late_write_without_deadline")
                    else:
                        v(text)

    # -- caps ------------------------------------------------------------------------------------------
    passed = len(advances)
    if passed > settings.max_steps:
        v(f"{tag}: advanced past {passed} steps, max_steps is {settings.max_steps}")
    if e.total_attempts > settings.max_total_attempts:
        v(f"{tag}: total_attempts is {e.total_attempts}, max_total_attempts is {settings.max_total_attempts}")


def _sleep_began(commits: list, index: int, before_seq: int):
    """The last commit before ``before_seq`` that began the sleep at ``index`` (SLEEPING at it, attempt 1)."""
    began = [o for o in commits if o.seq < before_seq and o.before.get("current_step") == index
             and o.after.get("current_step") == index and o.after.get("timer") == "sleep"
             and o.before.get("attempt", 0) == 0]
    return began[-1] if began else None


def _check_retry(sim, tag: str, eid: str, c, attempt: int, wf) -> None:
    """A retry is scheduled only by the worker whose body of that attempt really failed, after it
    recorded the failure."""
    v = sim.violation
    step = c.before.get("current_step", 0)
    runs = [r for r in sim.bodies.get((eid, step), []) if r.op_id == c.op_id and r.attempt == attempt]
    if not any(r.end in ("raised", "overran") for r in runs):
        v(f"{tag}: step {step} retry scheduled after attempt {attempt} by op {c.op_id}, whose body of that attempt "
          f"did not fail ({[r.end for r in runs]})")
    if not any(p.op_id == c.op_id and p.step == step and p.attempts == attempt and p.status == "FAILED"
               and not p.is_final and p.seq < c.seq for p in sim.puts.get(eid, [])):
        v(f"{tag}: step {step} retry scheduled after attempt {attempt} without its FAILED record")
    if attempt >= wf.policy(step).max_attempts:
        v(f"{tag}: step {step} retry scheduled after attempt {attempt}, the policy allows "
          f"{wf.policy(step).max_attempts}")


def _check_failure(sim, tag: str, e, wf, claims: dict, records: dict, outcomes: Counter) -> None:
    """A FAILED execution is explained by what really happened: the bodies that failed, the attempts
    actually claimed, or the caps (never by what the engine's own counters say)."""
    v = sim.violation
    err = e.error
    code = err.code if err else None
    outcomes[f"failed.{code}"] += 1
    index = err.step_index if err else None
    spec = wf.steps[index] if index is not None and index < len(wf.steps) else None
    policy = wf.policy(index) if spec is not None else None
    claimed = claims.get(index, []) if index is not None else []
    ending = next((c for c in sim.commits.get(e.execution_id, []) if c.new_status == "FAILED"), None)
    runs = [r for r in sim.bodies.get((e.execution_id, index), [])] if index is not None else []
    last = claimed[-1] if claimed else None
    last_runs = [r for r in runs if last is not None and r.op_id == last.op_id and r.attempt == last.attempt]
    why = ""
    if code in ("step_error", "step_timeout"):
        m = _OF.search(err.message if err else "")
        want_end = "raised" if code == "step_error" else "overran"
        ok = (m is not None and policy is not None and int(m.group(1)) == int(m.group(2)) == policy.max_attempts
              and len(claimed) == policy.max_attempts and ending is not None and last is not None
              and ending.op_id == last.op_id and any(r.end == want_end for r in last_runs))
        why = (f"message {err.message[-40:]!r}, {len(claimed)} attempts claimed, the last one's body "
               f"{[r.end for r in last_runs]}")
    elif code == "permanent_error":
        ok = spec is not None and any(r.end == "permanent" for r in last_runs) and ending is not None \
            and ending.op_id == last.op_id
        why = f"the last body {[r.end for r in last_runs]}"
    elif code == "attempts_exhausted":
        ok = policy is not None and len(claimed) == policy.max_attempts
        why = f"{len(claimed)} attempts claimed of {policy.max_attempts if policy else '?'}"
    elif code == "attempt_cap_exceeded":
        total = sum(len(x) for x in claims.values())
        ok = sim.config.caps and total >= sim.settings.max_total_attempts
        why = f"{total} attempts claimed"
    elif code == "step_cap_exceeded":
        ok = sim.config.caps and e.current_step >= sim.settings.max_steps
    else:
        ok = False
    if not ok:
        v(f"{tag}: FAILED with {code}: {err.message if err else ''} -- not explained by what happened "
          f"({why})")
    if code in ("step_error", "step_timeout", "permanent_error", "attempts_exhausted"):
        r = records.get(index)
        if r is None or r.status is not StepStatus.FAILED or not r.is_final:
            text = (f"{tag}: FAILED with {code} at step {index}, whose record is "
                    f"{None if r is None else (r.status.value, r.is_final)}")
            puts = [p for p in sim.puts.get(e.execution_id, []) if p.step == index]
            final = next((p for p in puts if p.error_code == "attempts_exhausted"), None)
            if code == "attempts_exhausted" and final is not None and any(
                    p.seq > final.seq and p.attempts == final.attempts and p.op_id != final.op_id for p in puts):
                sim.known_defect("exhausted_record_overwritten", text)
            else:
                v(text)


def _check_meaningful(sim, outcomes: Counter) -> None:
    """A run where (nearly) everything crashed proves nothing: demand real progress under faults, and
    at least one execution that ended the way its workflow was written to end (completed, or failed at
    its failing step, or at a cap in the caps variant), not everything worn down by crashes."""
    deliveries, need_commits, need_handled = meaningful_minimums(sim)
    if sim.fx.backlog:  # behind a backlog most fault-phase deliveries are stale copies, by design: the
        need_commits = 0  # executions move in the quiet phase, and the outcome check below still applies
    commits = sim.fault_stats["commits.fault_phase_by_workers"]
    handled = sum(n for k, n in sim.fault_stats.items() if k.startswith("outcome."))
    if commits < need_commits or handled < need_handled:
        sim.violation(f"while faults were on, {deliveries} deliveries made {commits} transitions (need "
                      f"{need_commits}) and {handled} ran to an outcome (need {need_handled}): the run says nothing")
    designed = sum(n for k, n in outcomes.items() if k != "failed.attempts_exhausted")
    if outcomes and designed == 0:
        sim.violation(f"every execution ended by exhausting its attempts ({dict(outcomes)}): "
                      "the faults left nothing to check")
