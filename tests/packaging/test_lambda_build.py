"""`make build`'s guarantees: reproducible wheels, locks that match them, deterministic zips, and zips
that import and answer in a clean Python that has nothing but what the Lambda runtime provides.

Every test here holds on mixed pins too: after the one-Lambda release (`make bump-engine-core
VERSION=<next> LAMBDAS=sweeper`) the other Lambdas still pin the earlier engine-core, whose wheel
`make build-wheels` rebuilds from git history (tests/packaging/test_release_engine_core.py runs these
tests on such a clone)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("build_lambda", ROOT / "tools" / "build_lambda.py")
build_lambda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_lambda)

HANDLERS = {"worker": "loom_worker.handler", "sweeper": "loom_sweeper.handler",
            "control-plane": "loom_control_plane.handler"}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """What `make build-wheels` makes: the working tree's wheels, and every earlier version a Lambda still pins."""
    out = tmp_path_factory.mktemp("wheels")
    build_lambda.build_wheels(out)
    build_lambda.provide_locked_wheels(out)
    return out


def _lock(function: str) -> dict[str, tuple[str, set[str]]]:
    return build_lambda.locked_pins(ROOT / "packages" / function / "requirements.txt")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_wheels_when_built_from_another_checkout_are_byte_identical(wheels, tmp_path):
    # given: a second checkout at another path, with fresh file times
    for package in build_lambda.WHEEL_PACKAGES:
        shutil.copytree(ROOT / "packages" / package, tmp_path / "checkout" / "packages" / package,
                        copy_function=shutil.copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    # when
    rebuilt = build_lambda.build_wheels(tmp_path / "out", root=tmp_path / "checkout")
    # then
    assert len(rebuilt) == 2
    for wheel in rebuilt:
        assert _digest(wheel) == _digest(wheels / wheel.name), wheel.name


@pytest.mark.slow
def test_locks_when_checked_against_fresh_wheels_match(wheels):
    # when / then: raises BuildError (bump engine-core and run make lock-lambdas) if they drifted
    for function in HANDLERS:
        build_lambda.check_lock(function, wheels)


def test_check_when_engine_core_changed_without_bump_fails_with_the_fix(tmp_path, capsys):
    # given: a wheel with the locked name and version but other contents
    pinned_version = build_lambda.locked_pins(ROOT / "packages/worker/requirements.txt")["loom-engine-core"][0]
    (tmp_path / f"loom_engine_core-{pinned_version}-py3-none-any.whl").write_bytes(b"changed code")
    # when
    code = build_lambda.main(["check", "--wheels", str(tmp_path), "worker"])
    # then
    err = capsys.readouterr().err
    assert code == 1
    assert "changed without a version bump" in err and "make lock-lambdas" in err
    assert "packages/engine-core/pyproject.toml" in err


def test_check_when_wheel_version_differs_from_pin_says_to_relock(tmp_path, capsys):
    # given
    (tmp_path / "loom_engine_core-9.9.9-py3-none-any.whl").write_bytes(b"newer")
    # when
    code = build_lambda.main(["check", "--wheels", str(tmp_path), "sweeper"])
    # then
    err = capsys.readouterr().err
    assert code == 1 and "loom_engine_core-9.9.9-py3-none-any.whl" in err and "make lock-lambdas" in err


def _project_version(package: str) -> str:
    import tomllib

    return tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.parametrize("function", sorted(HANDLERS))
def test_locked_pins_when_reading_a_lock_returns_versions_and_hashes(function):
    from packaging.version import Version

    # when
    pins = _lock(function)
    # then: the local packages at the working tree's version or an earlier release (mixed pins)
    assert pins["aws-lambda-powertools"][0] == "3.37.0"
    for package in build_lambda.WHEEL_PACKAGES:
        assert Version(pins[build_lambda.dist_name(package)][0]) <= Version(_project_version(package)), package
    assert all(len(h) == 64 for _, hashes in pins.values() for h in hashes)
    assert all(hashes for _, hashes in pins.values())
    assert "boto3" not in pins and "botocore" not in pins


def test_write_zip_when_trees_differ_in_mtime_order_and_umask_gives_same_bytes(tmp_path):
    # given: the same files, written in different orders, times and modes
    files = {"b/mod.py": b"print('b')\n", "a/__init__.py": b"", "run.sh": b"#!/bin/sh\n", "z.txt": b"z" * 5000}
    for name, order, mode in (("one", sorted(files), 0o644), ("two", sorted(files, reverse=True), 0o600)):
        for rel in order:
            path = tmp_path / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[rel])
            os.chmod(path, 0o755 if rel.endswith(".sh") else mode)
            os.utime(path, (1_700_000_000 + len(name) * 1000, 1_700_000_000 + len(name) * 1000))
    # when
    build_lambda.write_zip(tmp_path / "one", tmp_path / "one.zip")
    build_lambda.write_zip(tmp_path / "two", tmp_path / "two.zip")
    # then
    assert _digest(tmp_path / "one.zip") == _digest(tmp_path / "two.zip")
    with zipfile.ZipFile(tmp_path / "one.zip") as zf:
        assert zf.namelist() == sorted(files)
        assert {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}["run.sh"] == 0o755
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}


@pytest.fixture(scope="module")
def python312() -> Path:
    """The CPython 3.12 that compiles the Lambda zips' bytecode (a prerequisite: fail, never skip)."""
    found = build_lambda.find_python("3.12", os.environ.get("LAMBDA_PYTHON") or None)
    if found is None:
        pytest.fail("no CPython 3.12 here (python3.12 on PATH, pyenv, LAMBDA_PYTHON): the Lambda zips' bytecode is "
                    "compiled by one. Install python3.12 or set LAMBDA_PYTHON=/path/to/python3.12", pytrace=False)
    return found


def _poison_sources(tree: Path) -> int:
    """Replace every module's source with one that exits: an import that reads a source fails loudly."""
    sources = [p for p in tree.rglob("*.py")]
    for path in sources:
        path.write_text(f"raise SystemExit('the source of {path.relative_to(tree)} was read: no usable bytecode')\n")
    return len(sources)


def _pyc_names(names: list[str], tag: str) -> tuple[set[str], set[str]]:
    """(sources without a ``tag`` pyc beside them, pycs of any other tag) among a zip's names."""
    pycs = {n for n in names if n.endswith(".pyc")}
    expected = {f"{n.rsplit('/', 1)[0] + '/' if '/' in n else ''}__pycache__/{n.rsplit('/', 1)[-1][:-3]}.{tag}.pyc"
                for n in names if n.endswith(".py")}
    return {e for e in expected if e not in pycs}, pycs - expected


@pytest.mark.slow
def test_lambda_zip_when_built_twice_has_the_same_sha256_and_python312_bytecode_it_loads(wheels, python312, tmp_path):
    # when
    first = build_lambda.build_zip("sweeper", "lambda", wheels, tmp_path / "1" / "sweeper.zip")
    second = build_lambda.build_zip("sweeper", "lambda", wheels, tmp_path / "2" / "sweeper.zip")
    # then
    assert first == second
    with zipfile.ZipFile(tmp_path / "1" / "sweeper.zip") as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "task")
    assert "loom_sweeper/handler.py" in names and "engine_core/adapters/bootstrap.py" in names
    assert any(n.startswith("pydantic_core/") and n.endswith("cpython-312-x86_64-linux-gnu.so") for n in names)
    examples_version = _lock("sweeper")["loom-workflows-examples"][0]
    assert f"loom_workflows_examples-{examples_version}.dist-info/entry_points.txt" in names
    engine_version = _lock("sweeper")["loom-engine-core"][0]
    assert f"loom_engine_core-{engine_version}.dist-info/METADATA" in names
    assert not any(n.startswith(("boto3/", "botocore/")) for n in names)
    # every module has its python3.12 bytecode beside it, and nothing for another interpreter
    assert _pyc_names(names, "cpython-312") == (set(), set())
    # which python3.12 loads without ever reading a source (engine-core and pydantic: no boto3 needed)
    assert _poison_sources(tmp_path / "task") > 100
    done = subprocess.run([str(python312), "-I", "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                           "import engine_core, engine_core.adapters.memory; print(engine_core.__version__)",
                           str(tmp_path / "task")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == engine_version


def test_compiler_for_a_lambda_zip_when_no_python312_is_found_is_none_and_says_how_to_fix(tmp_path, monkeypatch, capsys):
    # given: a PATH with neither python3.12 nor pyenv on it
    monkeypatch.setenv("PATH", str(tmp_path))
    # when
    compiler = build_lambda.compiler_for("lambda", "auto")
    # then: sources only, and the build says so
    assert compiler is None
    err = capsys.readouterr().err
    assert "no CPython 3.12 found" in err and "LAMBDA_PYTHON=/path/to/python3.12" in err


def test_compiler_for_a_lambda_zip_when_lambda_python_is_not_312_is_refused():
    # when: this machine's Python (3.11) named as the Lambda zips' compiler
    with pytest.raises(build_lambda.BuildError) as error:
        build_lambda.compiler_for("lambda", sys.executable)
    # then
    assert f"LAMBDA_PYTHON={sys.executable} is CPython {sys.version_info[0]}.{sys.version_info[1]}" in str(error.value)
    assert "Point LAMBDA_PYTHON at a python3.12" in str(error.value)


@pytest.mark.slow
def test_lambda_zip_when_built_for_arm64_holds_aarch64_binaries_only(wheels, tmp_path):
    # when
    build_lambda.build_zip("worker", "lambda", wheels, tmp_path / "worker.zip", arch="arm64")
    # then: pydantic-core for Graviton, nothing for x86_64
    with zipfile.ZipFile(tmp_path / "worker.zip") as zf:
        binaries = [n for n in zf.namelist() if n.endswith(".so")]
    assert binaries and all("aarch64" in n for n in binaries), binaries
    assert any(n.endswith("cpython-312-aarch64-linux-gnu.so") for n in binaries)


def test_zip_when_the_architecture_is_unknown_is_refused_before_building(wheels, tmp_path):
    # when
    with pytest.raises(build_lambda.BuildError) as error:
        build_lambda.build_zip("worker", "lambda", wheels, tmp_path / "worker.zip", arch="x86")
    # then
    assert "x86_64 or arm64" in str(error.value) and not (tmp_path / "worker.zip").exists()


_LOCK = """\
# header
alpha==1.0 \\
    --hash=sha256:{a}
    # via -r requirements.in
examples==2.0 \\
    --hash=sha256:{b}
    # via -r requirements.in
only-examples==3.0 \\
    --hash=sha256:{c}
    # via examples
deep==4.0 \\
    --hash=sha256:{d}
    # via only-examples
shared==5.0 \\
    --hash=sha256:{e}
    # via
    #   alpha
    #   examples
""".format(a="a" * 64, b="b" * 64, c="c" * 64, d="d" * 64, e="e" * 64)


def test_requirements_without_drops_the_package_and_what_only_it_required(tmp_path):
    # when
    text, dropped = build_lambda.requirements_without(_LOCK, {"examples"})
    # then: shared and direct requirements stay, with their hashes
    assert dropped == ["examples", "only-examples", "deep"]
    (tmp_path / "lock.txt").write_text(text)
    assert set(build_lambda.locked_pins(tmp_path / "lock.txt")) == {"alpha", "shared"}
    assert f"--hash=sha256:{'e' * 64}" in text and "# header" in text


def test_requirements_without_a_package_the_lock_lacks_says_so():
    with pytest.raises(build_lambda.BuildError, match="pins no nothing-here"):
        build_lambda.requirements_without(_LOCK, {"nothing-here"})


_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
function, module = sys.argv[2], sys.argv[3]
import importlib
handler = importlib.import_module(module)
import engine_core

class Context:
    function_name = "probe"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:probe"
    aws_request_id = "00000000-0000-4000-8000-000000000000"
    def get_remaining_time_in_millis(self):
        return 1000  # the sweeper stops before its first query; nothing here calls AWS

event = json.load(open(sys.argv[4]))
reply = handler.handler(event, Context())
print(json.dumps({"reply": reply, "handler_file": handler.__file__, "engine_core_file": engine_core.__file__}))
"""


@pytest.fixture(scope="module")
def runtime_python(tmp_path_factory) -> Path:
    """A venv holding only boto3 and its closure (what the Lambda runtime adds to a zip): the dev venv's
    pinned distributions copied file by file (loom_local.runtime_libs, as the local stack provides them)."""
    from loom_local import runtime_libs

    root = tmp_path_factory.mktemp("runtime")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    provided = runtime_libs.ensure(root / "provided")
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "lambda-runtime.pth").write_text(f"{provided}\n")
    done = subprocess.run([str(python), "-I", "-c", "import boto3, botocore; print(boto3.__version__, botocore.__version__)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == [version("boto3"), version("botocore")]
    return python


_ENV = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
        "LOOM_TABLE_NAME": "loom-probe", "LOOM_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-probe",
        "LOOM_DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-probe-dlq",
        "POWERTOOLS_SERVICE_NAME": "probe", "POWERTOOLS_METRICS_NAMESPACE": "Probe"}


def _probe(python: Path, tmp_path: Path, archive: Path, function: str, event: dict) -> dict:
    """Unpack ``archive`` and call its handler with ``event`` in ``python`` (isolated: only the zip and boto3;
    every source replaced by one that exits, so only the zip's bytecode can run)."""
    (tmp_path / "probe.py").write_text(_PROBE)
    task = tmp_path / "task" / function
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(task)
        # every module has this Python's bytecode beside it, and the handler runs without reading a source
        tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"
        assert _pyc_names(zf.namelist(), tag) == (set(), set())
    assert _poison_sources(task) > 100
    (tmp_path / f"{function}.json").write_text(json.dumps(event))
    done = subprocess.run([str(python), "-I", str(tmp_path / "probe.py"), str(task), function, HANDLERS[function],
                           str(tmp_path / f"{function}.json")], env={"PATH": os.environ["PATH"], **_ENV},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    # everything came from the unpacked zip, not from the dev environment
    assert probe["handler_file"].startswith(str(task)) and probe["engine_core_file"].startswith(str(task))
    return probe["reply"]


def _workflows_event() -> dict:
    """GET /workflows without its live counts (``?live=0``): they read the table, and the probe has no AWS."""
    event = json.loads((ROOT / "tests/events/function_url_get_execution.json").read_text())
    return {**event, "rawPath": "/workflows", "rawQueryString": "live=0", "queryStringParameters": {"live": "0"}}


@pytest.mark.slow
def test_local_zips_when_unpacked_in_a_clean_venv_import_and_answer(wheels, runtime_python, tmp_path):
    # given: the three local zips
    events = {
        "worker": {"Records": [{**json.loads((ROOT / "tests/events/sqs_step_batch.json").read_text())["Records"][0],
                                "body": "not a step message"}]},
        "sweeper": json.loads((ROOT / "tests/events/eventbridge_scheduled.json").read_text()),
        "control-plane": _workflows_event(),
    }
    replies = {}
    for function in HANDLERS:
        archive = tmp_path / f"{function}.zip"
        build_lambda.build_zip(function, "local", wheels, archive)
        # when
        replies[function] = _probe(runtime_python, tmp_path, archive, function, events[function])
    # then
    assert replies["worker"] == {"batchItemFailures": [{"itemIdentifier": events["worker"]["Records"][0]["messageId"]}]}
    assert replies["sweeper"]["shards_scanned"] == 0 and replies["sweeper"]["truncated"] is True
    assert replies["control-plane"]["statusCode"] == 200
    names = {w["name"] for w in json.loads(replies["control-plane"]["body"])["workflows"]}
    assert {"order_fulfillment", "order_saga", "expense_approval", "batch_resize"} <= names
    if _lock("control-plane")["loom-workflows-examples"][0] == _project_version("workflows-examples"):
        from engine_core import REGISTRY

        REGISTRY.load_entry_points()  # the examples package installed here is the one the zip was built from
        assert names == {wf.name for wf in REGISTRY.all() if wf.source.startswith("loom_examples.")}


@pytest.mark.slow
def test_local_zip_without_examples_holds_none_and_answers_with_no_workflows(wheels, runtime_python, tmp_path):
    # given: the control plane built as `make build-local EXAMPLES=0` builds it
    archive = tmp_path / "control-plane.zip"
    assert build_lambda.main(["zip", "control-plane", "--runtime", "local", "--wheels", str(wheels), "--examples", "0",
                              "--extra-lock", str(tmp_path / "x.lock"), "--out", str(archive)]) == 0
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
    # when
    reply = _probe(runtime_python, tmp_path, archive, "control-plane", _workflows_event())
    # then: no example package, its metadata or its entry point; the rest of the lock is there
    assert not any(n.startswith(("loom_examples/", "loom_workflows_examples-")) for n in names)
    assert "loom_control_plane/handler.py" in names and any(n.startswith("loom_engine_core-") for n in names)
    assert reply["statusCode"] == 200 and json.loads(reply["body"]) == {"workflows": []}
