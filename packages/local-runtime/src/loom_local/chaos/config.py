"""The two load profiles, their defaults and the goals a chaos run's figures are set beside.

``faults``: a mixed load of every example with the issue-27 fault mix scaled to the count (at 150
executions: 32 worker SIGKILLs, at random and at every crash point; two sweeper kills; two
control-plane kills after the create; 12 duplicated and 6 replayed stale messages; cancels, wakes,
redrives, events and callbacks mid-flight). ``backlog``: many starts in a short window and no
faults at all (the workflows' own events, callbacks and the fix-and-redrive still happen: they are
how those executions end); its stale share is what the 5% goal is about.
"""

from __future__ import annotations

from dataclasses import dataclass

STALE_SHARE_GOAL = 0.05
"""At most this share of the backlog profile's deliveries may find nothing to do (issue 27)."""
RERUN_MARGIN_S = 5.0
"""A killed step re-runs by its killed invocation's deadline + this + one sweeper tick (the design's bound)."""
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")


@dataclass(frozen=True)
class ChaosConfig:
    profile: str
    seed: int = 1
    count: int = 150
    start_window_s: float = 60.0
    """The starts are spread evenly over this window (the backlog profile's burst)."""
    duration_s: float = 900.0
    """The whole run's bound, from the first start: what has not ended by then is reported as not ended."""
    cancels: bool = True
    worker_kills: int = 0
    sweeper_kills: int = 0
    control_kills: int = 0
    duplicates: int = 0
    """Executions whose first delivered message is sent again at once (SQS delivering twice)."""
    replays: int = 0
    """Executions whose first message is sent again after they ended (a stale message from long ago)."""
    restarts: int = 0
    """Executions started a second time with the same token and input (a client retrying)."""
    variants: tuple[str, ...] = ()
    """Only these variants of the catalog (``workflow/name``); empty: all of them."""

    @property
    def faults(self) -> int:
        return self.worker_kills + self.sweeper_kills + self.control_kills + self.duplicates + self.replays


FAULTS_AT_150 = {"worker_kills": 32, "sweeper_kills": 2, "control_kills": 2, "duplicates": 12, "replays": 6}
"""The fault mix of issue 27's run, for 150 executions; other counts scale it."""
PROFILES = {
    "faults": {"count": 150, "start_window_s": 60.0, "duration_s": 900.0, "faulty": True},
    "backlog": {"count": 300, "start_window_s": 45.0, "duration_s": 1200.0, "faulty": False},
}


def profile(name: str, **overrides) -> ChaosConfig:
    """A profile's defaults, with any field given (not None) in ``overrides`` replacing its own. The fault
    counts and the start window scale with ``count`` (at least one fault of each kind in a faulty profile;
    the same start rate)."""
    if name not in PROFILES:
        raise ValueError(f"unknown chaos profile {name!r}; profiles: {', '.join(PROFILES)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    base = dict(PROFILES[name])
    faulty = base.pop("faulty")
    count = int(given.get("count", base["count"]))
    scaled = {k: (max(1, round(n * count / 150)) if faulty else 0) for k, n in FAULTS_AT_150.items()}
    restarts = max(1, round(8 * count / 150))
    window = base["start_window_s"] * count / base["count"]  # the profile's start rate, whatever the count
    fields = {**base, **scaled, "start_window_s": round(window, 1), "restarts": restarts, "cancels": faulty, **given}
    return ChaosConfig(profile=name, **fields)
