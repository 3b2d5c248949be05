"""Invariants checked after every run (docs: aws-pitfalls.md section 5; issue 5).

Evidence comes from three places: the store's final items, what the store proxy saw on every
successful commit and intent write while the run went on, and the simulation's own ledger of step
body executions. Each violation is a sentence naming the execution; the run fails if there is any.
"""

from __future__ import annotations

import copy
import math
import uuid
from collections import Counter

from engine_core import codec
from engine_core.errors import CorruptStateError
from engine_core.model import CorruptRecord, Status, StepRecord, StepStatus
from engine_core.storage._items import execution_from_attrs, step_from_attrs

from .workflows import step_result

TERMINAL = ("COMPLETED", "FAILED")
# Must match engine_core.engine's namespace: ids are derived from start tokens.
_TOKEN_NAMESPACE = uuid.UUID("6c6f6f6d-0000-4000-8000-746f6b656e73")


def token_id(token: str) -> str:
    return str(uuid.uuid5(_TOKEN_NAMESPACE, token))


def meaningful_minimums(sim) -> tuple[int, int, int]:
    """(deliveries, worker transitions needed, deliveries needed that ran to an outcome) for the fault
    phase of this run. A run where (nearly) every delivery died proves nothing; over 3,000 seeds of
    the real engine the lowest ratios seen were 3 transitions in 20 deliveries and 10 outcomes in 15,
    so the floors are 1 in 20 and 1 in 5 (and at least one of each)."""
    deliveries = sim.fault_stats["ops.deliver"]
    return deliveries, max(1, math.ceil(deliveries / 20)), max(1, math.ceil(deliveries / 5))


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
        wf = sim.specs[e.workflow]
        tag = f"{eid[:8]} ({e.workflow})"
        commits = sim.commits.get(eid, [])
        history = inner.steps.get(eid, {})
        records: dict[int, StepRecord] = {}
        for key in sorted(history):
            r = step_from_attrs(key, copy.deepcopy(history[key]))
            if isinstance(r, CorruptRecord):
                v(f"{tag}: history item {key} is unreadable: {r.detail}")
            elif r.step_index in records:
                v(f"{tag}: two history items for step {r.step_index}")
            else:
                records[r.step_index] = r

        if sim.creates[eid] != 1:
            v(f"{tag}: created {sim.creates[eid]} times")

        # -- terminal <=> out of the due index; everything ended once faults stopped ---------------
        terminal = e.status.is_terminal
        if terminal == (eid in due):
            v(f"{tag}: status {e.status.value} but {'in' if eid in due else 'not in'} the due index")
        if not terminal:
            v(f"{tag}: still {e.status.value} at step {e.current_step} v{e.version} after faults stopped "
              f"(next_wake_at={e.next_wake_at}, timer={e.timer})")

        # -- versions: one step up per transition, never two transitions from the same version -----
        expected = 1
        seen_from: set[int] = set()
        for c in commits:
            if c.new_version != c.expected_version + 1:
                v(f"{tag}: a commit from v{c.expected_version} wrote v{c.new_version} (must be +1)")
            if c.expected_version in seen_from:
                v(f"{tag}: two successful commits from v{c.expected_version} (seq {c.seq}): the conditional "
                  "write let a stale transition through")
            seen_from.add(c.expected_version)
            if c.prev_version != c.expected_version or c.expected_version != expected:
                v(f"{tag}: commit expecting v{c.expected_version} applied to v{c.prev_version} "
                  f"(version chain at v{expected})")
            if c.prev_status in TERMINAL:
                v(f"{tag}: a {c.prev_status} execution was changed by a later commit (terminal must absorb)")
            if c.new_step < c.expected_step:
                v(f"{tag}: current_step went back from {c.expected_step} to {c.new_step}")
            if c.settle_index is not None and c.settle_index != c.expected_step:
                v(f"{tag}: a commit at step {c.expected_step} settled step {c.settle_index}")
            expected = c.new_version
        if e.version != expected:
            v(f"{tag}: stored version v{e.version}, but the observed commits lead to v{expected}")

        # -- each step recorded at most once; on completion exactly once, its body run >= 1 --------
        succeeded = Counter(c.settle_index for c in commits if c.settle_status == StepStatus.SUCCEEDED.value)
        for index, n in sorted(succeeded.items()):
            if n > 1:
                v(f"{tag}: step {index} recorded SUCCEEDED {n} times")
        for index, r in records.items():
            if index >= len(wf.steps) or index > e.current_step:
                v(f"{tag}: history holds step {index}, beyond current step {e.current_step}")
                continue
            spec = wf.steps[index]
            if r.status is StepStatus.SUCCEEDED:
                if succeeded[index] != 1:
                    v(f"{tag}: step {index} is SUCCEEDED in history after {succeeded[index]} settling commits")
                if spec.kind != "sleep":
                    if sim.ledger.count(eid, index) < 1:
                        v(f"{tag}: step {index} recorded SUCCEEDED but its body never ran")
                    if r.result_blob is None or codec.decode(r.result_blob) != step_result(eid, spec):
                        v(f"{tag}: step {index} recorded result {r.result_blob!r}, not what its body returned")
            elif r.status is StepStatus.RUNNING and terminal and e.status is Status.COMPLETED:
                v(f"{tag}: COMPLETED with step {index} still RUNNING")
        ps = planned.get(eid)
        if e.status is Status.COMPLETED:
            outcomes["completed"] += 1
            if not wf.completable:
                v(f"{tag}: COMPLETED, but step specs say it cannot complete")
            if e.current_step != len(wf.steps):
                v(f"{tag}: COMPLETED at step {e.current_step} of {len(wf.steps)}")
            for index, spec in enumerate(wf.steps):
                r = records.get(index)
                if r is None or r.status is not StepStatus.SUCCEEDED or succeeded[index] != 1:
                    v(f"{tag}: COMPLETED but step {index} ({spec.name}) is not recorded SUCCEEDED exactly once "
                      f"(record {None if r is None else r.status.value}, {succeeded[index]} settling commits)")
            want = dict(ps.input) if ps else {}
            for spec in wf.steps:
                if spec.kind != "sleep":
                    want.update(step_result(eid, spec))
            got = codec.decode(e.context_blob)
            if got != want:
                v(f"{tag}: COMPLETED with context {got}, expected {want}")
            if any(d.get("execution_id") == eid for d in sim.queue.dead_letters):
                v(f"{tag}: COMPLETED but a failure notice was sent")

        # -- a FAILED execution must be explained by its workflow, its records or the caps ----------
        if e.status is Status.FAILED:
            err = e.error
            code = err.code if err else None
            outcomes[f"failed.{code}"] += 1
            index = err.step_index if err else None
            spec = wf.steps[index] if index is not None and index < len(wf.steps) else None
            r = records.get(index) if index is not None else None
            policy = wf.policy(index) if spec is not None else None
            if code == "step_error":
                ok = spec is not None and spec.kind == "flaky" and spec.fail_first >= policy.max_attempts
            elif code == "permanent_error":
                ok = spec is not None and spec.kind == "permanent"
            elif code == "attempts_exhausted":
                ok = r is not None and policy is not None and r.attempts > policy.max_attempts
            elif code == "attempt_cap_exceeded":
                ok = sim.config.caps and e.total_attempts >= sim.settings.max_total_attempts
            elif code == "step_cap_exceeded":
                ok = sim.config.caps and e.current_step >= sim.settings.max_steps
            else:
                ok = False
            if not ok:
                v(f"{tag}: FAILED with {code}: {err.message if err else ''} -- not explained by the step specs, "
                  f"the records or the caps")
            if code in ("step_error", "permanent_error", "attempts_exhausted"):
                if r is None or r.status is not StepStatus.FAILED or not r.is_final:
                    v(f"{tag}: FAILED with {code} at step {index}, whose record is "
                      f"{None if r is None else (r.status.value, r.is_final)}")
            if e.finalized and not any(d.get("execution_id") == eid for d in sim.queue.dead_letters):
                v(f"{tag}: FAILED and finalized, but no failure notice reached the dead-letter queue")
        if terminal and not e.finalized:
            # Finalizing repeats on redelivery of the message that ended the execution; only if that
            # message is gone (dead-lettered, or lost by the queue) may it stay undone.
            ending = next((c for c in commits if c.new_status in TERMINAL), None)
            gone = {m.mid for m in sim.queue.dlq} | sim.queue.lost
            if ending is None or ending.mid not in gone:
                notice = any(d.get("execution_id") == eid for d in sim.queue.dead_letters)
                missing = "no TTL on its history" + (", no failure notice" if e.status is Status.FAILED and not notice else "")
                v(f"{tag}: {e.status.value} but never finalized ({missing}), though the message that ended "
                  f"it (#{ending.mid if ending else '?'}) was neither lost nor dead-lettered")
            else:
                sim.stat("finalize.never_message_gone")

        # -- caps: recorded steps and settled attempts within the limits, and counted right ----------
        s = sim.settings
        attempts = sum(1 for c in commits if c.settle_index is not None and wf.steps[c.settle_index].kind != "sleep"
                       and c.error_code != "attempts_exhausted")
        if sum(succeeded.values()) > s.max_steps:
            v(f"{tag}: {sum(succeeded.values())} steps recorded, max_steps is {s.max_steps}")
        if attempts > s.max_total_attempts:
            v(f"{tag}: {attempts} step attempts settled, max_total_attempts is {s.max_total_attempts}")
        if e.total_attempts > s.max_total_attempts:
            v(f"{tag}: total_attempts is {e.total_attempts}, max_total_attempts is {s.max_total_attempts}")
        if e.total_attempts != attempts:
            v(f"{tag}: total_attempts is {e.total_attempts}, but {attempts} step attempts were settled "
              f"({e.status.value} {e.error.code if e.error else ''})".rstrip())

    _check_attempts(sim)
    _check_meaningful(sim, outcomes)
    sim.stats.update({f"result.{k}": n for k, n in outcomes.items()})


def _check_attempts(sim) -> None:
    """Attempts are numbered 1, 2, ... at their intent write, a body runs only under its own intent,
    a new attempt never starts within the step's timeout of an unsettled one, and none starts after
    the step settled."""
    v = sim.violation
    for (eid, index), intents in sorted(sim.intents.items()):
        wf = sim.specs[sim.inner.metas[eid]["workflow"]]
        tag = f"{eid[:8]} step {index}"
        numbers = [o.attempt for o in intents]
        if numbers != list(range(1, len(numbers) + 1)):
            v(f"{tag}: attempt numbers {numbers} (must count 1, 2, 3, ...)")
        settles = [c for c in sim.commits.get(eid, []) if c.settle_index == index]
        timeout = wf.timeout(index)
        for prev, cur in zip(intents, intents[1:]):
            retried = any(prev.seq < c.seq < cur.seq and c.settle_status == "FAILED" and not c.settle_final
                          for c in settles)
            gap = (cur.at - prev.at).total_seconds()
            if not retried and gap < timeout:
                v(f"{tag}: attempt {cur.attempt} started {gap:g}s after attempt {prev.attempt}, within the "
                  f"{timeout:g}s step timeout and with no retry settled between: the step could run twice at once")
        closed = [c.seq for c in settles if c.settle_status == "SUCCEEDED" or c.settle_final]
        if closed:
            for o in intents:
                if o.seq > min(closed):
                    v(f"{tag}: attempt {o.attempt} started after the step was settled")
    for (eid, index), runs in sorted(sim.body_attempts.items()):
        by_attempt = {o.attempt: o for o in sim.intents.get((eid, index), [])}
        seen: set[int] = set()
        for attempt, seq in runs:
            o = by_attempt.get(attempt)
            if o is None or o.seq > seq:
                v(f"{eid[:8]} step {index}: body ran as attempt {attempt} without that attempt's intent record")
            if attempt in seen:
                v(f"{eid[:8]} step {index}: two body executions saw attempt {attempt}")
            seen.add(attempt)


def _check_meaningful(sim, outcomes: Counter) -> None:
    """A run where (nearly) everything crashed proves nothing: demand real progress under faults, and
    at least one execution that ended the way its workflow was written to end (completed, or failed at
    its failing step, or at a cap in the caps variant), not everything worn down by crashes."""
    deliveries, need_commits, need_handled = meaningful_minimums(sim)
    commits = sim.fault_stats["commits.fault_phase_by_workers"]
    handled = sum(n for k, n in sim.fault_stats.items() if k.startswith("outcome."))
    if commits < need_commits or handled < need_handled:
        sim.violation(f"while faults were on, {deliveries} deliveries made {commits} transitions (need "
                      f"{need_commits}) and {handled} ran to an outcome (need {need_handled}): the run says nothing")
    designed = sum(n for k, n in outcomes.items() if k != "failed.attempts_exhausted")
    if outcomes and designed == 0:
        sim.violation(f"every execution ended by exhausting its attempts ({dict(outcomes)}): "
                      "the faults left nothing to check")
