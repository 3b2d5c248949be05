"""Code-first workflows: a plain Python function with durable calls (see ``api.py``).

    from engine_core.durable import durable, step, sleep, wait_for_event, parallel, map
"""

from .api import (
    DurableCallError,
    durable,
    execution_id,
    idempotency_key,
    map,
    new_id,
    now,
    parallel,
    sleep,
    step,
    wait_for_callback,
    wait_for_event,
)
from .replay import NondeterministicReplay

__all__ = ["DurableCallError", "NondeterministicReplay", "durable", "execution_id", "idempotency_key", "map",
           "new_id", "now", "parallel", "sleep", "step", "wait_for_callback", "wait_for_event"]
