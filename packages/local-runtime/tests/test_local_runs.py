"""Each stack run keeps its logs, crash points and call records apart; `make up` sets up the examples as the demo does."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from loom_local import cli, demo, runs
from loom_local.faults import FaultControl
from loom_local.options import stack_args


def test_start_run_when_a_second_run_starts_keeps_the_first_runs_files_apart_and_points_current_at_the_new_one(tmp_path):
    # given: a first run that logged and armed a crash point
    first = runs.start_run(tmp_path, "20260101T000000Z-1")
    (first / "logs" / "worker.log").write_text("first run\n")
    FaultControl(first / "faults").arm("worker.after_claim")

    # when
    second = runs.start_run(tmp_path, "20260101T000100Z-2")

    # then: the new run starts with no log and no arm; current and logs point at it
    assert not (second / "logs" / "worker.log").exists()
    assert FaultControl(second / "faults").pending() == []
    assert (tmp_path / "current").resolve() == second.resolve()
    assert (tmp_path / "logs").resolve() == (second / "logs").resolve()
    assert (first / "logs" / "worker.log").read_text() == "first run\n"


def test_start_run_keeps_the_newest_runs_and_moves_an_old_logs_directory_into_runs(tmp_path):
    # given: the layout before runs/ (a real logs directory) and more runs than are kept
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "worker.log").write_text("before\n")
    ids = [f"20260101T0000{i:02d}Z-{i}" for i in range(runs.KEEP + 2)]

    # when
    for run_id in ids:
        runs.start_run(tmp_path, run_id)

    # then
    kept = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert kept == ids[-runs.KEEP:]
    assert (tmp_path / "logs").is_symlink()


def _args(command: str, tmp_path: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    stack_args(parser)
    if command == "run":
        parser.add_argument("--state-file", type=Path, default=None)
    return parser.parse_args(["--repo", str(Path(__file__).resolve().parents[3]), "--run-dir", str(tmp_path)])


def test_make_up_and_make_demo_give_the_functions_the_same_examples_configuration(tmp_path):
    # given
    up = cli.run_options(_args("run", tmp_path / "up"))
    tour, _ = demo.stack_options(_args("demo", tmp_path / "demo"))

    # when
    up_examples = {k: v for k, v in up.function_env.items() if k.startswith("LOOM_EXAMPLES_")}
    demo_examples = {k: v for k, v in tour.function_env.items() if k.startswith("LOOM_EXAMPLES_")}

    # then: one ledger file shared by every function process (order_saga's refund finds the charge),
    # and the same fixes directory
    assert set(up_examples) == set(demo_examples) == {"LOOM_EXAMPLES_LEDGER_PATH", "LOOM_EXAMPLES_FIXES_DIR"}
    assert up_examples["LOOM_EXAMPLES_FIXES_DIR"] == demo_examples["LOOM_EXAMPLES_FIXES_DIR"]
    for env in (up_examples, demo_examples):
        assert os.path.isabs(env["LOOM_EXAMPLES_LEDGER_PATH"])
    assert Path(up_examples["LOOM_EXAMPLES_LEDGER_PATH"]).parent == tmp_path / "up" / "state"  # reset with the table


def test_start_run_when_one_process_starts_stacks_back_to_back_gives_each_its_own_directory(tmp_path):
    made = [runs.start_run(tmp_path) for _ in range(runs.KEEP)]
    assert len(set(made)) == runs.KEEP and all(p.is_dir() for p in made)
