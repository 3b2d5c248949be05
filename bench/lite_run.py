"""One measured run for the ``lite`` section, in a process of its own (so strace can count its fsyncs and DBOS's
global state starts clean): ``python -m bench.lite_run loom|dbos --steps N --executions E --dir D``.

Both run the same workflow: ``N`` steps, each a function returning a small dict, one durable commit per step.

- ``loom``: the SQLite store and queue (``synchronous=FULL``), the one-process runtime's worker loop
  (``loom_lite.worker.Worker``: receive, ``Engine.process`` with a deadline, ack), the lite defaults.
- ``dbos``: DBOS Transact on SQLite, its defaults (``@DBOS.workflow`` calling ``N`` ``@DBOS.step`` s).

Prints one JSON line: wall and CPU seconds of the measured executions (after one warm-up execution of a few
steps, which creates the file and imports everything), and the steps they ran.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from pathlib import Path

PAYLOAD = "x" * 100


def run_loom(steps: int, executions: int, work: Path) -> dict:
    from engine_core import Registry
    from engine_core.adapters.sqlite import SqliteStore
    from engine_core.adapters.sqlite_queue import SqliteQueue
    from engine_core.engine import Engine
    from engine_core.registry import build_workflow
    from loom_lite.config import LiteConfig
    from loom_lite.worker import Worker

    def make(i: int):
        def body(ctx):
            return {"i": i, "payload": PAYLOAD}

        body.__name__ = f"step_{i:04d}"
        return body

    registry = Registry()
    for n in {steps, 3}:
        registry.register(build_workflow(f"bench_{n}", [make(i) for i in range(n)], source="bench.lite"))
    config = LiteConfig(db=work / "loom.db")
    store = SqliteStore(str(config.db), synchronous=config.synchronous)
    queue = SqliteQueue(store.db)
    engine = Engine(store, queue, registry, settings=config.settings)
    worker = Worker(engine, queue, config.delivery_s, config.visibility_s, config.poll_s, threading.Event())

    def one(name: str) -> None:
        eid = engine.start(name, {}).execution.execution_id
        while True:
            if not worker.once():
                raise RuntimeError("the queue ran dry before the execution completed")
            if store.load(eid).status.is_terminal:
                assert store.load(eid).status.value == "COMPLETED"
                return

    one("bench_3")  # warm-up: the file, the imports, the statement caches
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(executions):
        one(f"bench_{steps}")
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "steps": steps * executions}


def run_dbos(steps: int, executions: int, work: Path) -> dict:
    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config={"name": "bench-lite", "system_database_url": f"sqlite:///{work / 'dbos.sqlite'}",
                 "run_admin_server": False})

    @DBOS.step()
    def one(i: int) -> dict:
        return {"i": i, "payload": PAYLOAD}

    @DBOS.workflow()
    def flow(n: int) -> int:
        for i in range(n):
            one(i)
        return n

    DBOS.launch()
    try:
        flow(3)  # warm-up
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(executions):
            assert flow(steps) == steps
        return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "steps": steps * executions}
    finally:
        DBOS.destroy()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lite_run")
    p.add_argument("engine", choices=["loom", "dbos"])
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--executions", type=int, default=1)
    p.add_argument("--dir", type=Path, required=True)
    args = p.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    logging.getLogger("engine_core").setLevel(logging.ERROR)
    result = (run_loom if args.engine == "loom" else run_dbos)(args.steps, args.executions, args.dir)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
