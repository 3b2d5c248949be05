"""Backlogs in the simulation: a queue whose delivery delay grows with its length, and the check that the
sweeper's copies of a queued message stay logarithmic in how long it has waited.

A seed with ``FaultMix.backlog`` set delays each send by that many seconds per message already in the
queue (a worker fleet that drains it at a fixed rate), so messages wait past their lease and the sweeper
re-drives executions whose message is only queued. Each re-drive of a message no worker claimed commits
``resends`` one higher (``transitions.redriven``) and doubles the new message's lease, up to
``max_resend_doublings``; a claim, or any other move, ends the stretch.

The check reads only the commits the store applied: for each stretch of consecutive re-drives of one
unclaimed message it counts the copies sent and the time since the stretch's first message was sent, and
compares the count with what the doubling schedule allows in that time (``copies_allowed``), using the
settings' ``lease_s`` (the shortest lease any step gets: a longer one allows fewer copies). A sweeper
that re-drove every lease instead, as before the backoff, sends copies linear in the backlog's age and
fails it once the age passes a few leases.
"""

from __future__ import annotations

import datetime as dt

from engine_core.clock import parse_ts

SLACK_COPIES = 1
"""One copy beyond the schedule: the first message's own lease may start at its timer, not its send."""


def copies_allowed(age_s: float, lease_s: float, max_doublings: int) -> int:
    """How many re-drives the doubling schedule fits in ``age_s`` seconds after a message was sent: the first
    one lease after it, each next one the previous copy's lease later (``lease_s * 2**min(k - 1, cap)``)."""
    n, t = 0, lease_s
    while t <= age_s + 1e-6:
        n += 1
        t += lease_s * 2 ** min(n - 1, max_doublings)
    return n


def _stretches(commits: list) -> list[list]:
    """Runs of consecutive re-drives of one unclaimed message (``resends`` 1, 2, 3, ... in commit order)."""
    out: list[list] = []
    current: list = []
    for c in commits:
        resends = c.after.get("resends") or 0
        if resends >= 1 and (resends == 1 or (current and resends == (current[-1].after.get("resends") or 0) + 1)):
            if resends == 1:
                current = []
                out.append(current)
            current.append(c)
        else:
            current = []
    return out


def check_redrive_backoff(sim) -> None:
    """Every stretch of re-drives of a queued message sent no more copies than the doubling schedule allows."""
    lease_s = float(sim.settings.lease_s)
    cap = sim.settings.max_resend_doublings
    for eid, commits in sorted(sim.commits.items()):
        for stretch in _stretches(sorted(commits, key=lambda c: c.seq)):
            first = stretch[0]
            sent = parse_ts(first.before["updated_at"]) if first.before.get("updated_at") else first.at
            age = (stretch[-1].at - sent).total_seconds()
            allowed = copies_allowed(age, lease_s, cap) + SLACK_COPIES
            sim.stat("backlog.redrive_stretches")
            sim.stat("backlog.redrive_copies", len(stretch))
            if len(stretch) > 1:
                sim.stat("backlog.stretches_of_several_copies")
            if len(stretch) > allowed:
                sim.violation(f"{eid[:8]}: the sweeper sent {len(stretch)} copies of a message no worker claimed "
                              f"within {_human(age)} of its send, more than the lease doubling allows ({allowed} "
                              f"with a {lease_s:g} s lease, doublings capped at {cap}): a backlog is multiplied")


def _human(seconds: float) -> str:
    return str(dt.timedelta(seconds=round(seconds)))


__all__ = ["SLACK_COPIES", "check_redrive_backoff", "copies_allowed"]
