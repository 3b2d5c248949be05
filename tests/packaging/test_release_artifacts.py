"""`make release`: a tag is released only from the commit holding the version it names, and the release's
wheels and zips are built twice, compared, and listed with their sha256."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("release_cli", ROOT / "tools" / "release.py")
release_cli = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release_cli)
from loom_build import release  # noqa: E402 - tools/ is on sys.path once release.py is loaded
from loom_build.common import BuildError, locked_pins, source_version  # noqa: E402

LOOM_VERSION = (ROOT / "terraform" / "modules" / "VERSION").read_text().strip()
ENGINE_VERSION = source_version("engine-core")


def test_loom_version_file_when_read_holds_one_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", LOOM_VERSION), LOOM_VERSION


@pytest.mark.parametrize("tag, what, version", [
    (f"loom-v{LOOM_VERSION}", "loom", LOOM_VERSION),
    (f"engine-core-v{ENGINE_VERSION}", "engine-core", ENGINE_VERSION),
])
def test_check_tag_when_it_names_this_commits_version_accepts_it(tag, what, version):
    assert release.check_tag(tag) == (what, version)


@pytest.mark.parametrize("tag, words", [
    ("loom-v99.0.0", ["names loom 99.0.0", f"terraform/modules/VERSION says {LOOM_VERSION}"]),
    ("engine-core-v99.0.0", ["names engine-core 99.0.0", f"packages/engine-core/pyproject.toml says {ENGINE_VERSION}",
                             "make bump-engine-core VERSION=99.0.0"]),
    ("v1.0.0", ["is not a release tag", "loom-vX.Y.Z", "engine-core-vX.Y.Z"]),
    ("loom-v1", ["is not a release tag"]),
    ("", ["RELEASE_TAG is empty", f"RELEASE_TAG=loom-v{LOOM_VERSION}"]),
])
def test_check_tag_when_it_does_not_match_says_which_file_and_what_to_do(tag, words):
    # when
    with pytest.raises(BuildError) as refused:
        release.check_tag(tag)
    # then
    for word in words:
        assert word in str(refused.value)


def test_release_when_the_tag_does_not_match_builds_nothing(tmp_path, capsys):
    # when
    code = release_cli.main(["--tag", "loom-v99.0.0", "--out", str(tmp_path / "release")])
    # then
    assert code == 1 and "release failed: tag loom-v99.0.0" in capsys.readouterr().err
    assert not (tmp_path / "release").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)  # every wheel and zip built twice, beside the other tiers of `make test` (the default is 300 s)
def test_release_of_engine_core_builds_twice_lists_sha256_and_sets_the_wheel_aside_for_the_index(tmp_path, capsys):
    # when
    code = release_cli.main(["--tag", f"engine-core-v{ENGINE_VERSION}", "--out", str(tmp_path)])
    # then
    out = capsys.readouterr().out
    assert code == 0 and "built twice, the same bytes" in out
    engine = f"loom_engine_core-{ENGINE_VERSION}-py3-none-any.whl"
    examples = f"loom_workflows_examples-{source_version('workflows-examples')}-py3-none-any.whl"
    files = {p.name for p in tmp_path.iterdir() if p.is_file()}
    assert files == {engine, examples, "worker.zip", "sweeper.zip", "control-plane.zip", "SHA256SUMS"}
    sums = dict(reversed(line.split("  ")) for line in (tmp_path / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == files - {"SHA256SUMS"}
    for name, digest in sums.items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest, name
    # the zips are the Lambdas' locks, for python3.12 on x86_64 (whatever engine-core each one pins)
    for function in ("worker", "sweeper", "control-plane"):
        pinned = locked_pins(ROOT / "packages" / function / "requirements.txt")["loom-engine-core"][0]
        with zipfile.ZipFile(tmp_path / f"{function}.zip") as zf:
            names = zf.namelist()
        assert f"loom_engine_core-{pinned}.dist-info/METADATA" in names
        assert any(n.endswith("cpython-312-x86_64-linux-gnu.so") for n in names)
    # what the package index receives: the engine-core wheel alone
    assert [p.name for p in (tmp_path / "engine-core").iterdir()] == [engine]
    assert (tmp_path / "engine-core" / engine).read_bytes() == (tmp_path / engine).read_bytes()
