"""Every code block in the README, the guides in docs/ and the package READMEs runs in a test.

- ``python`` blocks run, each in a fresh interpreter in a temporary directory; any ``test_*`` function a
  block defines is then called. A block that starts with ``# needs the local stack (make up)`` drives
  the local stack: ``tests/integration/test_e2e_docs.py`` runs it on the integration tier's stack (here it
  must compile, and be one that test collects).
- ``toml`` blocks parse.
- ``sh`` blocks are shell sessions: each command is checked against what it names (a ``make`` target that
  exists and says what it does, a ``loom`` command line the CLI's own parser accepts, with placeholders
  like ``<execution_id>`` filled in), and the whole block passes ``bash -n``. The sessions themselves run
  elsewhere: ``make demo``/``make test`` in CI and this suite's neighbours, the ``loom`` journeys in
  tests/integration (``test_e2e_operations.py``, ``test_e2e_cli.py``), the curl calls in
  tests/integration against the same routes.
- Links between the documents point at files that exist.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
import tomllib

import pytest
from doc_blocks import DOCS, ROOT, blocks, kinds, needs_stack, stack_blocks

_PLACEHOLDER = re.compile(r"<[a-z_]+>")
_SHELL_OK = ("mkdir", "touch", "curl", "URL=", "export", "cd", "python3")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _params(kind: str, keep=lambda body: True) -> list:
    return [pytest.param(body, id=f"{doc}#{n}") for doc, n, body in blocks(kind) if keep(body)]


def test_every_block_is_of_a_kind_this_test_runs():
    found = kinds()
    assert found <= {"python", "toml", "sh"}, f"a block of another kind ({found}) would go untested"


def test_the_guides_are_all_here():
    found = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {"workflows.md", "operating.md", "sdk.md", "console-and-mcp.md", "api.md", "layout.md"} <= found


@pytest.mark.parametrize("code", _params("python", lambda body: not needs_stack(body)))
def test_python_blocks_run(code: str, tmp_path):
    program = code + textwrap.dedent("""

        for _name, _value in list(globals().items()):
            if _name.startswith("test_") and callable(_value):
                _value()
    """)
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "LOOM_EXAMPLES_LEDGER_PATH": str(tmp_path / "ledger.jsonl"),
                               "LOOM_STATE_FILE": str(tmp_path / "no-stack.json")})
    assert done.returncode == 0, f"block failed:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("code", _params("python", needs_stack))
def test_blocks_that_need_the_local_stack_compile_and_the_integration_tier_runs_them(code: str):
    compile(code, "<block>", "exec")
    runner = (ROOT / "tests" / "integration" / "test_e2e_docs.py").read_text()
    assert "stack_blocks()" in runner and "def test_" in runner
    assert code in [body for _, _, body in stack_blocks()]


def test_the_readme_drives_a_workflow_through_the_sdk_on_the_local_stack():
    readme = [body for doc, _, body in stack_blocks() if doc == "README.md"]
    assert readme and "LoomClient()" in readme[0] and "client.wait(" in readme[0]


@pytest.mark.parametrize("text", _params("toml"))
def test_toml_blocks_parse(text: str):
    tomllib.loads(text)


def _make_targets() -> dict[str, str]:
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    return {m.group(1): m.group(2) for m in re.finditer(r"make (\S+)\s+(.*)", out)}


def _commands(block: str) -> list[str]:
    joined = block.replace("\\\n", " ")
    lines, buf = [], ""
    for line in joined.splitlines():
        buf = f"{buf}\n{line}" if buf else line
        try:
            shlex.split(buf, comments=True)
        except ValueError:  # an open quote: the command goes on on the next line
            continue
        if buf.strip() and not buf.strip().startswith("#"):
            lines.append(buf.strip())
        buf = ""
    return lines


@pytest.mark.parametrize("block", _params("sh"))
def test_shell_sessions_name_real_targets_and_valid_commands(block: str):
    from loom_cli.main import parser

    syntax = subprocess.run(["bash", "-n"], input=_PLACEHOLDER.sub("X", block), capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    targets = _make_targets()
    for command in _commands(block):
        for part in re.split(r"&&|\|\|", command):
            words = shlex.split(_PLACEHOLDER.sub("6f1c2b1e-0000-4000-8000-000000000001", part), comments=True)
            if not words:
                continue
            if words[0] == "make":
                named = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
                missing = [t for t in named if t not in targets]
                assert not missing, f"`{part.strip()}` names make targets that do not exist: {missing}"
            elif words[0].endswith("loom"):
                try:
                    parser().parse_args(words[1:])
                except SystemExit as exc:
                    pytest.fail(f"`{part.strip()}`: the loom CLI refuses these arguments (exit {exc.code})")
            else:
                assert words[0].startswith(_SHELL_OK), f"`{part.strip()}`: no test covers this command"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_links_between_documents_point_at_files_that_exist(doc):
    for target in _LINK.findall(doc.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        path = (doc.parent / target).resolve()
        assert path.exists(), f"{doc.relative_to(ROOT)} links to {target}: no such file"
