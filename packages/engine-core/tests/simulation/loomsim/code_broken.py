"""Deliberately broken code-first replays, for the checker's self-test: each removes one guarantee of
``engine_core.durable.replay`` and the checker must notice within a few code-first seeds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from engine_core import codec
from engine_core.durable import replay as replay_module
from engine_core.model import StepStatus

BROKEN_REPLAYS = ("replay_returns_wrong_value", "replay_reruns_recorded_step")


@contextlib.contextmanager
def broken_replay(kind: str) -> Iterator[None]:
    """While inside: the engine's replay broken the way ``kind`` says."""
    if kind == "replay_returns_wrong_value":
        real, real_copier = replay_module.value_of, codec.copier

        def altered(value):
            return {k: f"{v}!" if isinstance(v, str) else {"altered": v} for k, v in value.items()}

        def value_of(r):  # a recorded task's value comes back altered, decoded from its record ...
            value = real(r)
            return altered(value) if r.kind == "task" and isinstance(value, dict) else value

        def copier(value):  # ... or copied from what the process kept when it recorded it
            return altered if isinstance(value, dict) else real_copier(value)

        saved = ("value_of", (real, real_copier))
        replay_module.value_of, codec.copier = value_of, copier
    elif kind == "replay_reruns_recorded_step":
        real_init = replay_module.Replay.__init__

        def __init__(self, run, stop_at=None):  # the record of the position not yet moved past is ignored
            real_init(self, run, stop_at)
            e = run.execution
            r = self.recorded.get(e.current_step)
            if stop_at is None and r is not None and r.kind == "task" and r.status is StepStatus.SUCCEEDED:
                del self.recorded[e.current_step]
                self.ready.pop(e.current_step, None)

        saved = ("Replay.__init__", real_init)
        replay_module.Replay.__init__ = __init__
    else:
        raise ValueError(kind)
    try:
        yield
    finally:
        if saved[0] == "value_of":
            replay_module.value_of, codec.copier = saved[1]
        else:
            replay_module.Replay.__init__ = saved[1]
