"""A platform team's own workflows, built into the Lambda zips from outside this repository: the
acme-flows fixture (tests/fixtures/acme-flows, not under packages/) goes in as a wheel, is locked by
sha256, loads from the zip, and a tampered wheel is refused."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_lambda = _load("build_lambda", ROOT / "tools" / "build_lambda.py")
acme = _load("acme_flows_fixture", ROOT / "tests" / "fixtures" / "acme_flows.py")


@pytest.fixture(scope="module")
def locked_wheels(tmp_path_factory) -> Path:
    """Loom's wheels as the control-plane lock pins them: from the working tree, or, while engine-core
    is mid-development without a re-lock, from the commit the lock was made from."""
    out = tmp_path_factory.mktemp("wheels")
    build_lambda.build_wheels(out)
    pins = build_lambda.locked_pins(ROOT / "packages/control-plane/requirements.txt")
    for package in build_lambda.WHEEL_PACKAGES:
        version, hashes = pins[build_lambda.dist_name(package)]
        wheel = out / f"{build_lambda.dist_name(package).replace('-', '_')}-{version}-py3-none-any.whl"
        if not wheel.exists() or build_lambda.sha256_file(wheel) not in hashes:
            build_lambda.wheel_from_history(package, version, hashes, out)
    build_lambda.check_lock("control-plane", out)
    return out


@pytest.fixture()
def outside(tmp_path) -> Path:
    """The team's own directory, nowhere inside this repository."""
    path = tmp_path / "acme-team"
    path.mkdir()
    return path


def _zip(locked_wheels: Path, out: Path, *extra: str, function: str = "control-plane", runtime: str = "local") -> int:
    return build_lambda.main(["zip", function, "--runtime", runtime, "--wheels", str(locked_wheels),
                              "--out", str(out), *extra])


@pytest.mark.slow
def test_zip_with_an_extra_wheel_holds_and_loads_it_locks_its_hash_and_is_reproducible(locked_wheels, outside, tmp_path):
    # given: acme-flows built into the team's own directory
    wheel = acme.build_wheel(outside / "wheels")
    lock = outside / "loom-extras.lock"
    # when: built twice, from the wheel file and from its directory
    assert _zip(locked_wheels, tmp_path / "1.zip", "--extra-wheels", str(wheel), "--extra-lock", str(lock)) == 0
    assert _zip(locked_wheels, tmp_path / "2.zip", "--extra-wheels", str(wheel.parent), "--extra-lock", str(lock)) == 0
    # then: the same bytes, holding the package and its entry point
    assert (tmp_path / "1.zip").read_bytes() == (tmp_path / "2.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "1.zip") as zf:
        names = zf.namelist()
        entry_points = zf.read("acme_flows-1.0.0.dist-info/entry_points.txt").decode()
        zf.extractall(tmp_path / "task")
    assert "acme_flows/__init__.py" in names and "loom_control_plane/handler.py" in names
    assert "[loom.workflows]" in entry_points and "acme = acme_flows" in entry_points
    # the lock records the wheel's sha256
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert build_lambda.locked_pins(lock)["acme-flows"] == ("1.0.0", {digest})
    # and the Lambda's registry finds the workflow in the unpacked zip
    probe = ("import json, sys; sys.path.insert(0, sys.argv[1]); from engine_core import REGISTRY; "
             "REGISTRY.load_entry_points(); import acme_flows, engine_core; "
             "print(json.dumps([REGISTRY.names(), acme_flows.__file__, engine_core.__file__]))")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "task")], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names, acme_file, engine_file = json.loads(done.stdout)
    assert acme.WORKFLOW in names
    assert acme_file.startswith(str(tmp_path / "task")) and engine_file.startswith(str(tmp_path / "task"))


@pytest.mark.slow
def test_zip_when_the_extra_wheel_is_tampered_with_is_refused_until_relocked(locked_wheels, outside, tmp_path, capsys):
    # given: a lock made from the real wheel, then other bytes under the same name and version
    lock = outside / "loom-extras.lock"
    good = acme.build_wheel(outside / "good")
    assert build_lambda.main(["lock-extras", "--extra-wheels", str(good), "--extra-lock", str(lock)]) == 0
    bad = acme.build_wheel(outside / "bad", tamper="import os  # something the team never shipped")
    assert bad.name == good.name
    capsys.readouterr()
    # when
    code = _zip(locked_wheels, tmp_path / "x.zip", "--extra-wheels", str(bad), "--extra-lock", str(lock))
    check = build_lambda.main(["check", "worker", "--wheels", str(locked_wheels), "--extra-wheels", str(bad),
                               "--extra-lock", str(lock)])
    # then: refused, saying what and how to fix, and nothing built
    err = capsys.readouterr().err
    assert code == 1 and check == 1
    assert "changed without a version bump, or was tampered with" in err and "make lock-extras" in err
    assert bad.name in err and hashlib.sha256(good.read_bytes()).hexdigest() in err
    assert not (tmp_path / "x.zip").exists()
    assert build_lambda.locked_pins(lock)["acme-flows"][1] == {hashlib.sha256(good.read_bytes()).hexdigest()}


def test_extra_lock_when_a_new_version_is_built_keeps_the_earlier_one_and_still_refuses_its_tampering(outside):
    # given: acme-flows 1.0.0 built in, then 1.1.0
    lock = outside / "loom-extras.lock"
    first = acme.build_wheel(outside / "v1", version="1.0.0")
    second = acme.build_wheel(outside / "v2", version="1.1.0")
    build_lambda.Extras([first], lock=lock)
    # when
    extras = build_lambda.Extras([second], lock=lock)
    # then: the lock records both versions; pip is given only the wheel passed this time
    recorded = lock.read_text()
    for wheel, version in ((first, "1.0.0"), (second, "1.1.0")):
        assert f"acme-flows=={version}" in recorded and hashlib.sha256(wheel.read_bytes()).hexdigest() in recorded
    assert extras.wheel_requirements() == (
        f"acme-flows==1.1.0 --hash=sha256:{hashlib.sha256(second.read_bytes()).hexdigest()}\n")
    # and going back to 1.0.0 with other bytes is still refused
    tampered = acme.build_wheel(outside / "bad", version="1.0.0", tamper="import os  # not what was shipped")
    with pytest.raises(build_lambda.BuildError, match="changed without a version bump"):
        build_lambda.Extras([tampered], lock=lock)
    assert "acme-flows==1.1.0" in lock.read_text()


def test_extra_requirements_without_hashes_are_refused_with_the_fix(tmp_path, capsys):
    # given
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# ours\nacme-flows>=1.0\n")
    # when
    code = build_lambda.main(["check", "worker", "--wheels", str(tmp_path), "--extra-requirements",
                              str(requirements), "--extra-lock", str(tmp_path / "x.lock")])
    # then
    err = capsys.readouterr().err
    assert code == 1
    assert "acme-flows>=1.0" in err and "not pinned with a hash" in err and "pip-compile --generate-hashes" in err


def test_extra_requirements_with_hashes_are_accepted(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"--find-links ./wheels\nacme-flows==1.0.0 \\\n    --hash=sha256:{'a' * 64}  # ours\n")
    assert build_lambda.check_extra_requirements(requirements) == {"acme-flows": ("1.0.0", {"a" * 64})}


def test_extra_wheels_that_are_not_wheels_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "acme.tar.gz").write_bytes(b"")
    for bad, message in ((tmp_path / "empty", "no .whl files"), (tmp_path / "acme.tar.gz", "neither a .whl")):
        with pytest.raises(build_lambda.BuildError, match=message):
            build_lambda.collect_extra_wheels([bad])


def test_extra_wheel_replacing_a_locked_dependency_is_refused(tmp_path):
    # given: a pydantic wheel of another version than the Lambda's lock
    extras = build_lambda.Extras()
    extras.names = {"pydantic": "1.0.0"}
    extras.wheel_pins = {"pydantic": ("1.0.0", "0" * 64)}
    # when / then
    with pytest.raises(build_lambda.BuildError, match="a zip holds one version"):
        build_lambda.check_extras("worker", extras)


def test_make_passes_extra_wheels_to_every_zip_of_both_builds():
    # when: a dry run (prints the commands, runs none)
    done = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), "-o", ".venv/.installed", "build",
                           "build-local", "EXTRA_WHEELS=/teams/acme/wheels /teams/acme/b.whl",
                           "EXTRA_REQUIREMENTS=/teams/acme/req.txt", "EXTRA_LOCK=/teams/acme/loom.lock"],
                          capture_output=True, text=True, check=True)
    # then
    zips = [line for line in done.stdout.splitlines() if " zip " in line]
    commands = [c for line in zips for c in line.split(" && ") if " zip " in c]
    assert len(commands) == 6
    for command in commands:
        assert "--extra-wheels /teams/acme/wheels --extra-wheels /teams/acme/b.whl" in command
        assert "--extra-requirements /teams/acme/req.txt" in command and "--extra-lock /teams/acme/loom.lock" in command
        assert "--examples 1" in command


def test_make_build_with_examples_0_and_arm64_passes_both_to_every_zip():
    # when: a dry run (prints the commands, runs none)
    done = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), "-o", ".venv/.installed", "build",
                           "build-local", "EXAMPLES=0", "LAMBDA_ARCH=arm64"], capture_output=True, text=True, check=True)
    # then: the check and all six zips leave the examples out; the Lambda zips are for arm64, in their own directory
    lines = [c for line in done.stdout.splitlines() for c in line.split(" && ")]
    checks = [c for c in lines if " check " in c]
    zips = [c for c in lines if " zip " in c]
    assert len(checks) == 2 and all("--examples 0" in c for c in checks)
    assert len(zips) == 6 and all("--examples 0" in c for c in zips)
    lambda_zips = [c for c in zips if "--runtime lambda" in c]
    assert len(lambda_zips) == 3
    assert all("--arch arm64" in c and "--out dist/lambda-arm64/" in c for c in lambda_zips)
    assert "cd dist/lambda-arm64 && sha256sum" in done.stdout
