"""The cold-start section's verdicts: each handler's import and init against the floor and the target, and
before against after (issue 15's dev-venv baseline, issue 22's zip baseline)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..analysis import TARGET_IMPORT_MS, TARGET_OVER_FLOOR_MS
from .findings import Check

COLDSTART_BEFORE = Path(__file__).resolve().parent.parent / "baseline" / "coldstart-before-issue15.json"
ZIP_COLDSTART_BEFORE = Path(__file__).resolve().parent.parent / "baseline" / "coldstart-before-issue22.json"


def import_checks(cold: dict[str, Any]) -> list[Check]:
    return [Check("handler import ms", function, r["import_ms"], TARGET_IMPORT_MS, r["import_ms"] < TARGET_IMPORT_MS)
            for function, r in cold["venv"].items() if r.get("ok")]


def floor_checks(cold: dict[str, Any]) -> list[Check]:
    """Each handler's import over the floor (boto3 and its clients, measured in the same rounds) against
    the target; only runs that measured the floor per handler have them."""
    limit = cold.get("target_over_floor_ms", TARGET_OVER_FLOOR_MS)
    return [Check("handler import over the floor ms", function, r["over_floor_ms"], limit, r["over_floor_ms"] <= limit)
            for function, r in cold["venv"].items() if r.get("ok") and r.get("over_floor_ms") is not None]


def zip_floor_checks(cold: dict[str, Any]) -> list[Check]:
    """The same target in the zips as Lambda loads them: the first zip run (``dist/lambda`` on a CPython
    3.12 when there is one, else ``dist/local`` on this Python), each handler's init over its floor."""
    runs = cold.get("zip_runs") or []
    if not runs:
        return []
    first = runs[0]
    limit = cold.get("target_over_floor_ms", TARGET_OVER_FLOOR_MS)
    return [Check("handler init over the floor ms", f"{function}, {first['dir']} on Python {first['python_version']}",
                  r["over_floor_ms"], limit, r["over_floor_ms"] <= limit)
            for function, r in first["functions"].items() if r.get("ok") and r.get("over_floor_ms") is not None]


@dataclass(frozen=True)
class ColdStart:
    checks: list[Check]
    floor_ms: float | None
    """``import boto3`` plus the clients a handler creates, alone."""
    floor_over_budget: bool
    largest_self: list[tuple[str, str, float]]
    """Per function, the package with the largest self time and that time."""
    compiled_saving_ms: float | None
    """Mean init time the zip's bytecode saves against the same zip's sources (first zip run)."""


@dataclass(frozen=True)
class BeforeAfter:
    """One handler's dev-venv import before issue 15 and now, each beside the floor of its own run."""

    function: str
    before_ms: float
    after_ms: float
    before_over_floor_ms: float | None
    after_over_floor_ms: float | None

    @property
    def saved_ms(self) -> float:
        return self.before_ms - self.after_ms

    @property
    def saved_over_floor_ms(self) -> float | None:
        if self.before_over_floor_ms is None or self.after_over_floor_ms is None:
            return None
        return self.before_over_floor_ms - self.after_over_floor_ms


def coldstart_before() -> dict[str, Any] | None:
    return json.loads(COLDSTART_BEFORE.read_text()) if COLDSTART_BEFORE.exists() else None


def before_after(cold: dict[str, Any], before: dict[str, Any] | None) -> list[BeforeAfter]:
    if not before:
        return []
    rows = []
    for function, r in cold["venv"].items():
        b = before.get("venv", {}).get(function, {})
        if r.get("ok") and b.get("ok") and r.get("import_ms") and b.get("import_ms"):
            rows.append(BeforeAfter(function, b["import_ms"], r["import_ms"], b.get("over_floor_ms"), r.get("over_floor_ms")))
    return rows


def zip_before_after(cold: dict[str, Any], before: dict[str, Any] | None) -> list[tuple[str, BeforeAfter]]:
    """Each zip run's handlers now against the same zip run (same directory and Python) in ``before``."""
    if not before:
        return []
    earlier = {(e["dir"], e.get("python_version")): e for e in before.get("zip_runs") or []}
    rows = []
    for entry in cold.get("zip_runs") or []:
        b_entry = earlier.get((entry["dir"], entry.get("python_version")))
        for function, r in entry["functions"].items():
            b = (b_entry or {}).get("functions", {}).get(function, {})
            if r.get("ok") and b.get("ok") and r.get("import_ms") and b.get("import_ms"):
                rows.append((entry["dir"], BeforeAfter(function, b["import_ms"], r["import_ms"], b.get("over_floor_ms"),
                                                       r.get("over_floor_ms"))))
    return rows


def zip_coldstart_before() -> dict[str, Any] | None:
    return json.loads(ZIP_COLDSTART_BEFORE.read_text()) if ZIP_COLDSTART_BEFORE.exists() else None


def cold_start(cold: dict[str, Any]) -> ColdStart:
    floor = cold.get("boto3_floor_ms")
    largest = [(f, r["by_package_ms"][0][0], r["by_package_ms"][0][1]) for f, r in cold["venv"].items()
               if r.get("ok") and r.get("by_package_ms")]
    first = (cold.get("zip_runs") or [{}])[0].get("functions", {})
    pairs = [(z["sources_only_ms"], z["import_ms"]) for z in first.values()
             if z.get("ok") and z.get("import_ms") and z.get("sources_only_ms")]
    saving = sum(a - b for a, b in pairs) / len(pairs) if pairs else None
    return ColdStart(checks=import_checks(cold), floor_ms=floor,
                     floor_over_budget=bool(floor and floor > TARGET_IMPORT_MS), largest_self=largest,
                     compiled_saving_ms=saving)
