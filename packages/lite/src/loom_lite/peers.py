"""Every ``loom dev`` on one file serves the same workflows.

Processes on one file share its queue: a message goes to whichever process receives it first. A process
that lacks the workflow (or the version, or the definition) an execution started on would fail it for good
(``workflow_version_missing``), although another process serves it. So each runtime records what it serves
in the file's ``loom_meta`` (``lite.process.<host>.<pid>``: every workflow version's fingerprint, its
process's start time, and when it was last seen), and a runtime whose workflows differ from a live one's is
refused at start, naming the difference and the other process. A record of this host is live while its
process runs (``/proc``: not a zombie, and the same start time, so a reused pid does not count): a process
killed with ``kill -9`` stops counting at once, however long its sweeper's interval. A record of another
host is live while it is renewed (the sweeper's tick, at most every ``BEAT_S``). A clean stop removes its
record; the records of one process are its own (a second runtime in it replaces the first's).
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from engine_core import Registry
from engine_core.settings import ConfigurationError
from loom_cli.sdk.locate import process_on_this_host

PREFIX = "lite.process."
BEAT_S = 10.0
"""How often a runtime renews its record (at its sweeper's tick)."""
LIVE_S = 60.0
"""A record of another host not renewed for this long (or three of its renewals) is a process gone."""


def catalogue(registry: Registry) -> list[str]:
    """What a registry serves: ``<name> v<version> <fingerprint>`` for every version, sorted."""
    return sorted(f"{w.name} v{w.version} {w.fingerprint}" for w in registry.all_versions())


def _alive(record: dict[str, Any], now: float) -> bool:
    """On this host: its process exists, is not a zombie (killed, not yet reaped) and is the one that wrote
    the record (the same start time: not a reused pid). On another host (a file shared over a network file
    system, which SQLite's locks do not make safe): renewed within ``LIVE_S``, or three of its renewals."""
    if record.get("host") == socket.gethostname() and isinstance(record.get("pid"), int):
        found = process_on_this_host(record["pid"])
        if found is None or found[0] in ("Z", "X"):
            return False
        return not (found[1] and record.get("started") and found[1] != record["started"])
    renew_s = float(record.get("renew_s", BEAT_S))
    return now - float(record.get("seen", 0)) <= max(LIVE_S, 3 * renew_s)


def difference(mine: list[str], theirs: list[str]) -> str:
    """The workflows one side serves and the other does not (or serves another definition of)."""
    def versions(entries: list[str]) -> dict[str, str]:
        return {e.rsplit(" ", 1)[0]: e.rsplit(" ", 1)[1] for e in entries}

    here, there = versions(mine), versions(theirs)
    parts = []
    for label, names in (("only there", sorted(set(there) - set(here))), ("only here", sorted(set(here) - set(there))),
                         ("defined otherwise", sorted(n for n in set(here) & set(there) if here[n] != there[n]))):
        if names:
            parts.append(f"{label}: {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}")
    return "; ".join(parts)


class Peers:
    """This runtime's record among the processes on its file."""

    def __init__(self, db: Any, registry: Registry, renew_s: float = BEAT_S):
        self.db, self.mine = db, catalogue(registry)
        self.key = f"{PREFIX}{socket.gethostname()}.{os.getpid()}"
        self.renew_s = max(BEAT_S, renew_s)
        """How often this runtime renews its record: at its sweeper's tick, at most every ``BEAT_S``."""
        found = process_on_this_host(os.getpid())
        self.started = found[1] if found else ""
        self._beaten = 0.0

    def _record(self, now: float) -> str:
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": self.started, "seen": now,
                           "renew_s": self.renew_s, "serves": self.mine})

    def join(self) -> None:
        """Refuse to serve beside a live process that serves other workflows; else record this one."""
        now = time.time()
        with self.db.write() as conn:
            rows = conn.execute("SELECT key, value FROM loom_meta WHERE key >= ? AND key < ?",
                                (PREFIX, PREFIX + "\uffff")).fetchall()
            for key, value in rows:
                if key == self.key:
                    continue
                try:
                    other = json.loads(value)
                except ValueError:
                    continue
                if not isinstance(other, dict) or not _alive(other, now):
                    conn.execute("DELETE FROM loom_meta WHERE key = ?", (key,))  # a process gone
                    continue
                theirs = other.get("serves") or []
                if theirs != self.mine:
                    raise ConfigurationError(
                        f"another loom dev (pid {other.get('pid')} on {other.get('host')}) serves this file with "
                        f"other workflows ({difference(self.mine, theirs)}). Processes on one file share its queue, "
                        "so one that lacks an execution's workflow would fail it: stop that process, or start "
                        "this one with the same modules (or use another --db)")
            conn.execute("INSERT OR REPLACE INTO loom_meta (key, value) VALUES (?, ?)", (self.key, self._record(now)))
        self._beaten = now

    def beat(self) -> None:
        """Renew the record (at most every ``BEAT_S``)."""
        now = time.time()
        if now - self._beaten < BEAT_S:
            return
        with self.db.write(durable=False) as conn:
            conn.execute("INSERT OR REPLACE INTO loom_meta (key, value) VALUES (?, ?)", (self.key, self._record(now)))
        self._beaten = now

    def leave(self) -> None:
        with self.db.write() as conn:
            conn.execute("DELETE FROM loom_meta WHERE key = ?", (self.key,))


__all__ = ["BEAT_S", "LIVE_S", "Peers", "catalogue", "difference"]
