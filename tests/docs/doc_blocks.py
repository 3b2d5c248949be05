"""The code blocks of the README, the guides in docs/ and the package READMEs, for the tests that run them
(tests/docs here; tests/integration/test_e2e_docs.py for the blocks that need the local stack)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "packages").glob("*/README.md"))]
SEPARATE = {"docs/deploying.md", "docs/releasing.md"}
"""Their blocks (Terraform, aws, release commands) are checked by tests/docs/test_deploy_docs.py's rules."""
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NEEDS_STACK = "# needs the local stack (make up)"
"""A python block that starts with this line drives the local stack: the integration tier runs it."""


def blocks(kind: str | None = None) -> list[tuple[str, int, str]]:
    """``(document, n, body)`` of every block of ``kind`` (all kinds with None), in document order."""
    found = []
    for doc in DOCS:
        if str(doc.relative_to(ROOT)) in SEPARATE:
            continue
        for n, (lang, body) in enumerate(BLOCK.findall(doc.read_text(encoding="utf-8"))):
            if kind is None or lang == kind:
                found.append((str(doc.relative_to(ROOT)), n, body))
    return found


def kinds() -> set[str]:
    """The languages of every block :func:`blocks` reads."""
    return {lang for doc in DOCS if str(doc.relative_to(ROOT)) not in SEPARATE
            for lang, _ in BLOCK.findall(doc.read_text(encoding="utf-8"))}


def needs_stack(body: str) -> bool:
    return body.lstrip().startswith(NEEDS_STACK)


def stack_blocks() -> list[tuple[str, int, str]]:
    return [b for b in blocks("python") if needs_stack(b[2])]
