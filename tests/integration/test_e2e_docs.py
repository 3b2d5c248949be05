"""The documentation's blocks that drive the local stack (those starting ``# needs the local stack (make
up)``: the README's SDK session, docs/sdk.md's), run on the session's stack as a reader runs them: a fresh
interpreter in a directory of its own, finding the stack through the per-user state file (here a
temporary one) that `make up` writes. tests/docs checks that every such block is collected here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))

from doc_blocks import stack_blocks  # noqa: E402


@pytest.mark.parametrize("doc, n, code", stack_blocks(), ids=[f"{doc}#{n}" for doc, n, _ in stack_blocks()])
def test_a_documented_session_runs_on_the_local_stack(loom, tmp_path, doc, n, code):
    # given: the stack recorded as `make up` records it, in a state file of this test's own
    state = tmp_path / "state" / "local.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"url": loom.url}))
    # when
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LOOM_STATE_FILE": str(state),
                               "HOME": str(tmp_path)})
    # then
    assert done.returncode == 0, f"{doc} block {n} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
