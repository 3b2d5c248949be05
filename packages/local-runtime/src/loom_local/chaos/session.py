"""A fresh local stack for chaos runs: the deployed functions as ``make up`` runs them, with a payment ledger
and a feed-fixes directory of the run's own, then one :class:`~.driver.Run` per profile on it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import runs
from ..stack import LocalStack, StackOptions
from .config import ChaosConfig
from .driver import Run, Target
from .plan import make_plan

RECORD = "chaos-{profile}.json"


def run_profiles(options: StackOptions, configs: list[ChaosConfig], progress: Callable[[str], None] = print,
                 drain_s: float | None = None) -> tuple[list[dict[str, Any]], Path]:
    """Start a stack with ``options`` (its run directory, ledger and fixes set here), run each config on it in
    turn, and return each run's record and the stack's run directory (where each record is also written)."""
    run_id = options.run_id or runs.new_run_id()
    stack_dir = options.run_dir / runs.RUNS / run_id
    examples = stack_dir / "examples"
    options.run_id = run_id
    options.function_env = {**options.function_env, "LOOM_EXAMPLES_LEDGER_PATH": str(examples / "ledger.jsonl"),
                            "LOOM_EXAMPLES_FIXES_DIR": str(examples / "fixes")}
    records = []
    with LocalStack(options) as stack:
        target = Target.of(stack, examples / "ledger.jsonl", examples / "fixes")
        s = target.settings
        progress(f"chaos: worker timeout {s['worker_timeout_s']:g} s, sweeper every {s['sweep_every_s']:g} s, lease "
                 f"{s['lease_s']:g} s, visibility timeout {s['visibility_timeout_s']} s, {s['worker_concurrency']} "
                 f"worker batches of {s['batch_size']} at once")
        for config in configs:
            plan = make_plan(config, nonce=f"{uuid.uuid4().hex[:8]}{config.profile[0]}")
            progress(f"chaos [{config.profile}]: {config.count} executions over {config.start_window_s:g} s (seed "
                     f"{config.seed}); {config.worker_kills} worker, {config.sweeper_kills} sweeper and "
                     f"{config.control_kills} control-plane kills; {config.duplicates} duplicated and "
                     f"{config.replays} replayed messages; bound {config.duration_s:g} s")
            record = Run(plan, target, progress, drain_s=drain_s).run()
            (stack_dir / RECORD.format(profile=config.profile)).write_text(json.dumps(record, default=str))
            records.append(record)
    return records, stack_dir
