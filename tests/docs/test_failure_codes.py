"""docs/operating.md's table of failure codes names every code the engine fails an execution (or refuses a
start) with, and no other: a new code is documented with what to do, a removed one leaves the table."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "packages" / "engine-core" / "src" / "engine_core"
# How the engine writes a failure's code: ErrorInfo(code=...), op.error(...), a body's _failed(...), an error
# class's ``code``, a code-first failure, a map's unusable input, and the definition checks' constants.
_WRITTEN = re.compile(r'(?:\bcode=|\bcode = |\.error\(|\b_failed\(|_code_failed\(|return None, \(|'
                      r'^(?:MISMATCH|MISSING_VERSION) = )"([a-z]+(?:_[a-z]+)+)"', re.M)
REFUSALS_AT_START = {"over_step_cap", "invalid_input", "idempotency_conflict"}


def engine_codes() -> set[str]:
    found = {m.group(1) for f in ENGINE.rglob("*.py") for m in _WRITTEN.finditer(f.read_text(encoding="utf-8"))}
    return found


def documented_codes() -> set[str]:
    text = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    section = text.split("### What a failure's code means", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {code for row in rows for code in re.findall(r"`([a-z_]+)`", row.split(" | ")[0])}


def test_the_failure_code_table_names_every_code_the_engine_writes_and_no_other():
    engine, documented = engine_codes(), documented_codes()
    assert {"step_error", "step_timeout", "workflow_definition_mismatch", "workflow_version_missing"} <= engine
    assert engine - REFUSALS_AT_START - documented == set(), "codes the engine writes that the table lacks"
    assert documented - engine == set(), "codes in the table the engine no longer writes"
