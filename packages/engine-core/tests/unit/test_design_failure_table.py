"""DESIGN.md's failure table names a test for every row: each named test must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
SEARCH = [ROOT / "packages/engine-core/tests", ROOT / "packages/worker/tests", ROOT / "tests/integration",
          ROOT / "packages/engine-core/tests/simulation"]
DEFAULT_FILE = "functional/test_failure_table.py"


def _rows() -> list[str]:
    text = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    table = text[text.index("## Failure table"):text.index("## Costs per step")]
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| Failure")]


def _resolve(name: str) -> Path | None:
    if (ROOT / name).is_file():  # a path from the repository's root (another package's tests)
        return ROOT / name
    for base in SEARCH:
        for candidate in (base / name, *base.rglob(Path(name).name)):
            if candidate.is_file():
                return candidate
    return None


def test_every_test_the_failure_table_names_exists():
    missing = []
    for row in _rows():
        current = DEFAULT_FILE
        for ref in re.findall(r"`([^`]*::[^`]*)`", row):
            path, _, name = ref.partition("::")
            if path:
                current = path.split(" ")[-1]
            name = name.split("[")[0]
            source = _resolve(current)
            if source is None or not re.search(rf"^def {re.escape(name)}\(", source.read_text(), re.M):
                missing.append(f"{current}::{name}")
    assert not missing, "DESIGN.md names tests that do not exist:\n" + "\n".join(missing)


def _kind_table() -> list[str]:
    text = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    table = text[text.index("## One protocol for every kind"):text.index("## Operator actions")]
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| kind")]


def test_every_cell_of_the_kind_table_names_a_test_that_exists_with_its_parameters():
    rows = _kind_table()
    assert [row.split("|")[1].strip() for row in rows] == ["task", "sleep", "wait", "parallel/map branch",
                                                           "compensation"]
    missing = []
    for row in rows:
        cells = row.split("|")[2:-1]
        assert len(cells) == 10, row[:40]
        for cell in cells:
            refs = re.findall(r"`([^`]*::[^`]*|\[[^`]*\])`", cell)
            assert refs, f"a cell names no test: {cell[:80]}"
            current, base = "functional/test_kind_table.py", ""
            for ref in refs:
                if ref.startswith("["):  # another parameter of the test named before it
                    param = ref
                else:
                    path, _, name = ref.partition("::")
                    current = path.split(" ")[-1] if path else current
                    base, _, rest = name.partition("[")
                    param = f"[{rest}" if rest else ""
                source = _resolve(current)
                text = "" if source is None else source.read_text()
                if not re.search(rf"^def {re.escape(base)}\(", text, re.M):
                    missing.append(f"{current}::{base}")
                for value in param.strip("[]").split("-", 1) if param else []:
                    if f'"{value}"' not in text:
                        missing.append(f"{current}::{base}{param} (no parameter {value!r})")
    assert not missing, "DESIGN.md's kind table names tests that do not exist:\n" + "\n".join(missing)


def test_the_failure_table_has_a_test_for_every_row():
    assert all("::" in row or "`adapter/" in row or "simulation" in row for row in _rows())
