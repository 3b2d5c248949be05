"""Releasing engine-core for one Lambda, as docs/releasing.md says: on a clone of this repository, bump
engine-core, move only the sweeper to it, rebuild from a fresh dist/, and the other two zips are the
same bytes as before; then `make test-build`'s tests pass on those mixed pins, in the clone (what CI
runs on the commit the procedure makes). Also the pieces: `set-version` moves every pin and refuses
what would break."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("build_lambda", ROOT / "tools" / "build_lambda.py")
build_lambda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_lambda)

VENV = ROOT / ".venv"
# The clone fetches no wheel the working tree's wheelhouse already holds (tools/loom_build/wheelhouse.py).
WHEELHOUSE = {"LOOM_WHEELHOUSE": os.environ.get("LOOM_WHEELHOUSE") or str(ROOT / "build" / "wheelhouse")}
GIT_ID = ["-c", "user.name=Loom test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]


def _make(repo: Path, *args: str) -> subprocess.CompletedProcess:
    # The dev venv is shared with the working tree: `-o` keeps make from ever reinstalling it (that
    # would point its editable packages at this clone).
    venv = VENV.resolve()
    done = subprocess.run(["make", "--no-print-directory", "-C", str(repo), f"VENV={venv}", "-o", f"{venv}/.installed",
                           *args], capture_output=True, text=True, env={**os.environ, **WHEELHOUSE, "MAKEFLAGS": ""})
    assert done.returncode == 0, f"make {' '.join(args)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *GIT_ID, *args], check=True, capture_output=True, text=True).stdout


def _zip_versions(path: Path) -> dict[str, str]:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    found = (re.match(r"^(loom_[a-z_]+)-([^-]+)\.dist-info/METADATA$", n) for n in names)
    return {m.group(1): m.group(2) for m in found if m}


# The code under test, copied from the working tree over the clone's HEAD: the build tooling, its make
# targets and the build tests that run on the clone.
TOOLING = ("tools", "mk", "tests/packaging", "tests/fixtures", "pytest.ini", "Makefile", ".github")


def _clone(tmp_path: Path) -> Path:
    """HEAD of this repository, with the working tree's build tooling and build tests."""
    repo = tmp_path / "loom"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(ROOT), str(repo)], check=True)
    for rel in TOOLING:
        source, target = ROOT / rel, repo / rel
        if source.is_dir():
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copyfile(source, target)
    if _git(repo, "status", "--porcelain"):
        _git(repo, "add", "--all", *TOOLING)
        _git(repo, "commit", "--quiet", "-m", "test: the working tree's build tooling")
    return repo


@pytest.mark.slow
@pytest.mark.timeout(900)  # two builds in a clone, then the whole packaging suite on it (the default is 300 s)
def test_release_when_one_lambda_moves_to_a_new_engine_core_the_other_zips_stay_byte_identical(tmp_path):
    # given: a clone whose locks match its engine-core (re-locked in the clone if HEAD is mid-development)
    repo = _clone(tmp_path)
    check = subprocess.run([str(VENV / "bin" / "python"), str(repo / "tools/build_lambda.py"), "wheels", "--out",
                            str(repo / "dist/wheels")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    if subprocess.run([str(VENV / "bin" / "python"), str(repo / "tools/build_lambda.py"), "check", "--wheels",
                       str(repo / "dist/wheels"), "worker", "sweeper", "control-plane"],
                      capture_output=True).returncode != 0:
        _make(repo, "lock-lambdas")
        _git(repo, "commit", "--quiet", "-am", "test: re-lock the development engine-core")
    old = build_lambda.source_version("engine-core", repo)
    new = re.sub(r"(\d+)$", lambda m: str(int(m.group(1)) + 1), old)  # 0.1.0 -> 0.1.1: a patch release
    _make(repo, "build", "LAMBDAS=worker control-plane")
    before = {f: (repo / "dist/lambda" / f"{f}.zip").read_bytes() for f in ("worker", "control-plane")}
    locks_before = {f: (repo / "packages" / f / "requirements.txt").read_text() for f in ("worker", "control-plane")}

    # when: the README's release steps, for the sweeper only, then a build from a fresh dist/ (as CI would)
    _make(repo, "bump-engine-core", f"VERSION={new}", "LAMBDAS=sweeper")
    _git(repo, "commit", "--quiet", "-am", f"engine-core {new} for the sweeper")
    shutil.rmtree(repo / "dist")
    _make(repo, "build")

    # then: every place that names engine-core's version moved together...
    assert build_lambda.source_version("engine-core", repo) == new
    init = (repo / "packages/engine-core/src/engine_core/__init__.py").read_text()
    assert f'__version__ = "{old}"' not in init
    assert f"loom-engine-core=={new}\n" in (repo / "packages/sweeper/requirements.in").read_text()
    assert build_lambda.locked_pins(repo / "packages/sweeper/requirements.txt")["loom-engine-core"][0] == new
    # ...only for the sweeper: the others' pins and zips did not change
    for function in ("worker", "control-plane"):
        assert (repo / "packages" / function / "requirements.txt").read_text() == locks_before[function]
        assert (repo / "dist/lambda" / f"{function}.zip").read_bytes() == before[function], function
        assert _zip_versions(repo / "dist/lambda" / f"{function}.zip")["loom_engine_core"] == old
    assert _zip_versions(repo / "dist/lambda/sweeper.zip")["loom_engine_core"] == new
    # the old version's wheel came back from git history, next to the new one
    assert {p.name for p in (repo / "dist/wheels").glob("loom_engine_core-*.whl")} == {
        f"loom_engine_core-{old}-py3-none-any.whl", f"loom_engine_core-{new}-py3-none-any.whl"}
    # and the shared dev venv still runs the working tree, not the clone
    probe = subprocess.run([str(VENV / "bin" / "python"), "-c", "import engine_core; print(engine_core.__file__)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.startswith(str(ROOT))

    # when: `make test-build`'s tests on the commit the procedure made (all but this one, which would recurse)
    shutil.rmtree(repo / "dist")
    pytest = [str(VENV / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/packaging",
              "--ignore=tests/packaging/test_release_engine_core.py"]
    env = {**os.environ, **WHEELHOUSE, "PYTHONDONTWRITEBYTECODE": "1"}
    collected = subprocess.run([*pytest, "--collect-only"], cwd=repo, capture_output=True, text=True, env=env)
    expected = len([line for line in collected.stdout.splitlines() if "::" in line])
    tests = subprocess.run(pytest, cwd=repo, capture_output=True, text=True, env=env)
    # then: green on mixed pins, every one of them run (none skipped or deselected)
    summary = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else ""
    assert tests.returncode == 0, f"the build tests fail on mixed pins:\n{tests.stdout[-6000:]}\n{tests.stderr[-2000:]}"
    assert expected > 30 and re.match(rf"^{expected} passed in ", summary), (expected, summary)


def _copy_version_files(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for package in ("engine-core", "workflows-examples", "worker", "sweeper", "control-plane"):
        for rel in ("pyproject.toml", "requirements.in", "src/engine_core/__init__.py"):
            source = ROOT / "packages" / package / rel
            if source.exists():
                (root / "packages" / package / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, root / "packages" / package / rel)
    return root


def test_set_version_when_releasing_moves_engine_core_and_the_chosen_lambdas_pins_only(tmp_path):
    # given
    root = _copy_version_files(tmp_path)
    old_worker = (root / "packages/worker/requirements.in").read_text()
    # when
    current = build_lambda.source_version("engine-core", root)
    patch = re.sub(r"(\d+)$", lambda m: str(int(m.group(1)) + 7), current)  # within workflows-examples' range
    changed = build_lambda.set_version("engine-core", patch, ("sweeper", "control-plane"), root=root)
    # then
    assert {p.relative_to(root).as_posix() for p in changed} >= {
        "packages/engine-core/pyproject.toml", "packages/sweeper/requirements.in",
        "packages/control-plane/requirements.in"}
    assert build_lambda.source_version("engine-core", root) == patch
    init = (root / "packages/engine-core/src/engine_core/__init__.py").read_text()
    assert f'__version__ = "{patch}"' in init or "__version__ = \"" not in init  # a literal moves; metadata needs nothing
    for function in ("sweeper", "control-plane"):
        assert f"loom-engine-core=={patch}\n" in (root / "packages" / function / "requirements.in").read_text()
        assert "loom-engine-core==" not in (root / "packages" / function / "pyproject.toml").read_text()
    assert (root / "packages/worker/requirements.in").read_text() == old_worker


def test_set_version_when_workflows_examples_excludes_the_version_refuses_before_editing(tmp_path):
    # given: workflows-examples requires a range of engine-core versions that excludes 7.0.0
    root = _copy_version_files(tmp_path)
    before = (root / "packages/engine-core/pyproject.toml").read_text()
    # when
    with pytest.raises(build_lambda.BuildError) as error:
        build_lambda.set_version("engine-core", "7.0.0", ("sweeper",), root=root)
    # then
    assert "packages/workflows-examples" in str(error.value) and "Widen that range" in str(error.value)
    assert (root / "packages/engine-core/pyproject.toml").read_text() == before


def test_set_version_when_version_is_not_pep440_says_so(tmp_path):
    with pytest.raises(build_lambda.BuildError, match="not a version"):
        build_lambda.set_version("engine-core", "next", ("sweeper",), root=_copy_version_files(tmp_path))


def test_wheel_from_history_when_not_a_git_checkout_says_how_to_fix(tmp_path):
    # given: a copy that is not a git checkout, and a lock on a version no wheel is built for
    root = _copy_version_files(tmp_path)
    with pytest.raises(build_lambda.BuildError) as error:
        build_lambda.wheel_from_history("engine-core", "0.0.9", {"0" * 64}, tmp_path / "wheels", root=root)
    # then
    assert "make lock-lambdas LAMBDAS=" in str(error.value) or "git" in str(error.value)


def test_wheel_from_history_when_the_clone_is_shallow_says_ci_needs_full_depth(tmp_path):
    # given: a depth-1 clone, as a CI checkout without fetch-depth: 0 is, and a pin on a version not at HEAD
    repo = tmp_path / "shallow"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{ROOT}", str(repo)], check=True)
    # when
    with pytest.raises(build_lambda.BuildError) as error:
        build_lambda.wheel_from_history("engine-core", "0.0.1", {"0" * 64}, tmp_path / "wheels", root=repo)
    # then
    message = str(error.value)
    assert "this is a shallow clone" in message and "fetch-depth: 0" in message
    assert "git fetch --unshallow --tags" in message
