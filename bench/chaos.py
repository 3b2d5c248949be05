"""Chaos runs on the local stack, shorter than ``make chaos``'s: both profiles on one fresh stack.

The deployed zips run on moto as under ``make up`` (``LOCAL_TF_VARS=lease_s=5``, a sweep every 5 s).
``faults``: the examples under worker, sweeper and control-plane kills, duplicated and replayed
messages and operator actions (the issue-27 mix, scaled to the count); ``backlog``: starts at the
rate of 300 in 45 s, no faults. Every figure is what ``loom_local.chaos`` counts from the stack's own
records (invocations, step bodies, the worker's and the sweeper's logs) and the API; the invariants
are checked from the examples' ledger and the API. ``make chaos`` runs the full-size profiles.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"faults": 40, "backlog": 100}
QUICK_SIZES = {"faults": 12, "backlog": 30}
SEED = 1


def measure(progress: Callable[[str], None] = print, quick: bool = False) -> dict[str, Any]:
    if shutil.which("terraform") is None:
        return {"status": "pending", "reason": "no terraform CLI on PATH: the local runtime deploys terraform/envs/local"}
    if not list((ROOT / "dist" / "local").glob("*.zip")):
        return {"status": "pending", "reason": "no zips in dist/local: run `make build-local` (`make bench` does)"}
    rc = ROOT / "build" / "terraform" / "terraformrc"
    if rc.exists():
        os.environ["TF_CLI_CONFIG_FILE"] = str(rc)
    from loom_local.chaos import figures, invariants
    from loom_local.chaos.config import profile
    from loom_local.chaos.session import run_profiles
    from loom_local.stack import StackOptions

    sizes = QUICK_SIZES if quick else SIZES
    configs = [profile(name, seed=SEED, count=n) for name, n in sizes.items()]
    run_dir = Path(tempfile.mkdtemp(prefix="loom-bench-chaos-"))
    opts = StackOptions(repo=ROOT, run_dir=run_dir, tf_vars={"lease_s": "5"}, sweep_every_s=5.0,
                        progress=lambda m: None if m.lstrip().startswith("module.") else progress(f"  chaos: {m}"))
    try:
        records, _ = run_profiles(opts, configs, progress=lambda m: progress(f"  {m.strip()}"))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    runs = {}
    for record in records:
        config = record["plan"]["config"]
        runs[config["profile"]] = {"config": config, "figures": figures.measure(record),
                                   "violations": invariants.check(record)}
    return {"status": "measured", "seed": SEED, "runs": runs}
