"""Fixtures for the local runtime's own tests: tiny zips with real engine-core crash points and runner."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from loom_local import runtime_libs
from loom_local.functions import Function, FunctionSpec
from loom_local.logs import LogSink

HERE = Path(__file__).parent
REPO = HERE.parents[2]
ENGINE_SRC = REPO / "packages" / "engine-core" / "src" / "engine_core"
# Standard-library-only engine-core modules: enough for crash points and the step-body runner.
ENGINE_FILES = ("faults.py", "_runner.py", "context.py", "errors.py")


def build_tiny_zip(path: Path, marker: str) -> Path:
    """A Lambda zip: the tiny handlers, engine-core's faults/_runner, and a marker that makes its hash unique."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(HERE / "tiny" / "tiny_handlers.py", "tiny_handlers.py")
        z.writestr("engine_core/__init__.py", "")
        for name in ENGINE_FILES:
            z.write(ENGINE_SRC / name, f"engine_core/{name}")
        z.writestr("marker.txt", marker)
    return path


@pytest.fixture(autouse=True)
def _own_user_state_file(tmp_path, monkeypatch) -> Path:
    """A per-user state file of the test's own: a stack the developer has up is never read or replaced."""
    path = tmp_path / "user-state" / "local.json"
    monkeypatch.setenv("LOOM_STATE_FILE", str(path))
    return path


@pytest.fixture(scope="session")
def libs_dir() -> Path:
    return runtime_libs.ensure(REPO / "build" / "runtime-libs")


@pytest.fixture
def out_file(tmp_path: Path) -> Path:
    return tmp_path / "out.jsonl"


@pytest.fixture
def read_out(out_file: Path):
    """What the tiny handlers recorded, one dict per line."""

    def read() -> list[dict]:
        if not out_file.exists():
            return []
        return [json.loads(line) for line in out_file.read_text().splitlines() if line.strip()]

    return read


@pytest.fixture
def make_function(tmp_path: Path, libs_dir: Path, out_file: Path):
    """Build a Function around a tiny handler; every one made is closed at teardown."""
    made: list[Function] = []
    code = tmp_path / "code"
    with zipfile.ZipFile(build_tiny_zip(tmp_path / "tiny.zip", "probe")) as z:
        z.extractall(code)

    def make(handler: str = "tiny_handlers.probe", timeout_s: float = 5.0, concurrency: int = 2,
             fault_dir: Path | None = None, env: dict[str, str] | None = None, observer=None) -> Function:
        spec = FunctionSpec(name=f"tiny-{len(made)}", arn=f"arn:aws:lambda:us-east-1:123456789012:function:tiny-{len(made)}",
                            handler=handler, timeout_s=timeout_s, memory_mb=128, code_dir=code,
                            environment={"TINY_OUT": str(out_file), "AWS_LAMBDA_FUNCTION_NAME": f"tiny-{len(made)}",
                                         **(env or {})}, role="test")
        fn = Function(spec, libs_dir, LogSink(tmp_path / "logs"), fault_dir=fault_dir, max_concurrency=concurrency,
                      observer=observer)
        made.append(fn)
        return fn

    yield make
    for fn in made:
        fn.close()
