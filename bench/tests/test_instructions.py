"""The instruction counter's arithmetic and its layouts, without valgrind (``count`` is replaced)."""

from __future__ import annotations

import subprocess
import sys

from bench import instructions
from bench.instructions import ROOT


def test_each_command_is_counted_in_every_layout_and_the_figure_is_their_mean(monkeypatch):
    # given: a counter that answers by command and layout
    calls: list[tuple[tuple[object, ...], int]] = []

    def fake(*command: object, layout: int = 0) -> int:
        calls.append((command, layout))
        return 1000 * (1 + (command[1] == 1)) + 10 * layout + (5 if command[1] == 1 else 0) * layout

    monkeypatch.setattr(instructions, "count", fake)
    monkeypatch.setattr(instructions, "compile_sources", lambda: None)
    # when
    without, with_work = instructions.count_all([("m", 0), ("m", 1)], layouts=3)
    # then: three layouts each, in order, and the per-unit figure is the mean of the layouts' differences
    assert sorted(calls) == sorted([(("m", 0), k) for k in range(3)] + [(("m", 1), k) for k in range(3)])
    assert without == [1000, 1010, 1020] and with_work == [2000, 2015, 2030]
    assert instructions.per_unit_range(with_work, without, 10) == (100.0, 101.0, 100.5)
    assert instructions.per_unit(with_work, without, 10) == 100.5


def test_a_failed_count_in_any_layout_leaves_the_figure_unmeasured(monkeypatch):
    monkeypatch.setattr(instructions, "count", lambda *command, layout=0: None if layout == 2 else 5)
    monkeypatch.setattr(instructions, "compile_sources", lambda: None)
    (counts,) = instructions.count_all([("m", 1)], layouts=3)
    assert counts is None and instructions.per_unit(counts, [1, 2, 3], 1) is None
    assert instructions.per_unit([5, 6], [1, 2, 3], 1) is None  # not the same layouts: no figure


def test_a_shifted_layout_runs_the_module_with_its_arguments():
    # bench.layout runs ``python -m MODULE ARGS`` after the shift; the program sees its own arguments
    done = subprocess.run([sys.executable, "-m", "bench.layout", "2", "json.tool", "--compact"], cwd=ROOT,
                          input='{"a": [1, 2]}', capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '{"a":[1,2]}'
