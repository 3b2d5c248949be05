"""Every code block of docs/deploying.md and docs/releasing.md is checked, and what they say matches the
repository.

- ``sh`` blocks are shell sessions: each command is checked against what it names (the checks of
  test_doc_blocks.py for ``make`` and ``loom``, plus: a ``terraform -chdir=DIR`` names an existing
  root and only variables it declares, an ``aws`` command is an operation of that service with options
  of its input, a ``make VAR=...`` sets a variable the makefiles read, a copied file exists), and the
  whole block passes ``bash -n``. What they do runs elsewhere: the builds and releases in
  tests/packaging, the Terraform in tests/terraform.
- ``hcl`` blocks are pieces of terraform/examples/vendored/main.tf (their module source aside), which
  ``make tf-validate`` validates and tests/terraform plans and applies to moto.
- Versions in examples are this checkout's: the engine-core release example is the next patch of
  engine-core, the range is workflows-examples' own, the Loom tag is terraform/modules/VERSION's.
- Every document that shows where vendored modules live shows the same path.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import botocore.session
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "deploying.md", ROOT / "docs" / "releasing.md"]
# Fences may be indented (a block inside a list item); the block's lines lose that indentation.
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
VENDORED = ROOT / "terraform" / "examples" / "vendored" / "main.tf"
VENDORED_SOURCE = 'source = "./vendor/loom/modules/loom"'
_SHELL_OK = ("export", "cd", "mkdir", "sha256sum")
_TERRAFORM_COMMANDS = {"init", "plan", "apply", "output", "destroy", "validate", "fmt", "providers"}


def _readme_checks():
    """test_doc_blocks.py's helpers (loaded by path: tests/docs is not a package)."""
    spec = importlib.util.spec_from_file_location("doc_blocks_checks", ROOT / "tests" / "docs" / "test_doc_blocks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


readme = _readme_checks()


def _fenced(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block, indented ones included."""
    found = []
    for m in _FENCE.finditer(text):
        indent = len(m.group("indent"))
        found.append((m.group("lang"), "".join(line[indent:] if line[:indent].strip() == "" else line
                                               for line in m.group("body").splitlines(keepends=True))))
    return found


def _blocks(kind: str) -> list:
    return [pytest.param(body, id=f"{doc.relative_to(ROOT)}#{n}") for doc in DOCS
            for n, (lang, body) in enumerate(_fenced(doc.read_text(encoding="utf-8"))) if lang == kind]


def test_blocks_of_both_documents_are_of_kinds_this_file_checks():
    kinds = {lang for doc in DOCS for lang, _ in _fenced(doc.read_text(encoding="utf-8"))}
    fences = sum(doc.read_text(encoding="utf-8").count("```") for doc in DOCS)
    assert fences == 2 * sum(len(_fenced(doc.read_text(encoding="utf-8"))) for doc in DOCS), "a fence was not read"
    assert kinds <= {"sh", "hcl"}, f"a block of another kind ({kinds}) would go unchecked"
    assert _blocks("sh") and _blocks("hcl")


# -- shell sessions ---------------------------------------------------------------------------------
def _make_variables() -> set[str]:
    text = "\n".join(p.read_text() for p in [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))])
    return set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text))


def _declared(root: Path) -> set[str]:
    return {n for tf in root.glob("*.tf") for n in re.findall(r'^variable "([a-z0-9_]+)"', tf.read_text(), re.M)}


def _check_terraform(words: list[str], part: str) -> None:
    chdir = [w.split("=", 1)[1] for w in words if w.startswith("-chdir=")]
    assert chdir, f"`{part}`: say which root (-chdir=terraform/envs/<env>)"
    root = ROOT / chdir[0]
    assert root.is_dir() and list(root.glob("*.tf")), f"`{part}`: {chdir[0]} is not a Terraform root here"
    rest = [w for w in words[1:] if not w.startswith("-chdir=")]
    assert rest and rest[0] in _TERRAFORM_COMMANDS, f"`{part}`: unknown terraform command"
    declared = _declared(root)
    for i, word in enumerate(rest):
        if word == "-var":
            name = rest[i + 1].split("=", 1)[0]
            assert name in declared, f"`{part}`: {chdir[0]} declares no variable {name}"
        if word.startswith("-backend-config="):
            config = root / word.split("=", 1)[1]
            assert config.exists() or config.with_name(config.name + ".example").exists(), f"`{part}`: no {config}"


def _check_aws(words: list[str], part: str) -> None:
    session = botocore.session.get_session()
    service, operation = words[1], words[2]
    assert service.replace("s3api", "s3") in session.get_available_services(), f"`{part}`: no AWS service {service}"
    model = session.get_service_model(service.replace("s3api", "s3"))
    names = {re.sub(r"(?<!^)(?=[A-Z])", "-", op).lower(): op for op in model.operation_names}
    assert operation in names, f"`{part}`: {service} has no operation {operation}"
    members = {m.lower() for m in model.operation_model(names[operation]).input_shape.members}
    for option in (w[2:] for w in words[3:] if w.startswith("--")):
        assert option.replace("-", "") in members | {"region", "profile", "output"}, \
            f"`{part}`: {service} {operation} takes no --{option}"


def _check_command(part: str, targets: dict[str, str], make_variables: set[str]) -> None:
    words = shlex.split(readme._PLACEHOLDER.sub("6f1c2b1e-0000-4000-8000-000000000001", part), comments=True)
    if not words:
        return
    if words[0] == "make":
        named = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
        missing = [t for t in named if t not in targets]
        assert not missing, f"`{part.strip()}` names make targets that do not exist: {missing}"
        unread = [w.split("=", 1)[0] for w in words[1:] if "=" in w and w.split("=", 1)[0] not in make_variables]
        assert not unread, f"`{part.strip()}` sets variables no makefile reads: {unread}"
    elif words[0].endswith("loom"):
        try:
            from loom_cli.main import parser

            parser().parse_args(words[1:])
        except SystemExit as exc:
            pytest.fail(f"`{part.strip()}`: the loom CLI refuses these arguments (exit {exc.code})")
    elif words[0] == "terraform":
        _check_terraform(words, part.strip())
    elif words[0] == "aws":
        _check_aws(words, part.strip())
    elif words[0] == "cp":
        assert (ROOT / words[1]).is_file(), f"`{part.strip()}`: {words[1]} does not exist"
    elif words[0] == ".venv/bin/pip":
        # the wheels make builds (WHEEL_DIR in mk/build.mk) are where pip finds loom-engine-core
        assert "--find-links" in words and words[words.index("--find-links") + 1] == "dist/wheels", part
    else:
        assert words[0].startswith(_SHELL_OK), f"`{part.strip()}`: no test covers this command"


@pytest.mark.parametrize("block", _blocks("sh"))
def test_shell_sessions_name_real_targets_roots_variables_and_operations(block: str):
    # given
    syntax = subprocess.run(["bash", "-n"], input=readme._PLACEHOLDER.sub("X", block), capture_output=True, text=True)
    targets, make_variables = readme._make_targets(), _make_variables()

    # then
    assert syntax.returncode == 0, syntax.stderr
    for command in readme._commands(block):
        for part in re.split(r"&&|\|\|", command):
            _check_command(part, targets, make_variables)


# -- Terraform --------------------------------------------------------------------------------------
def _vendored_snippet() -> str:
    text = VENDORED.read_text(encoding="utf-8")
    return text.split("# -- snippet: begin", 1)[1].split("\n", 1)[1].split("# -- snippet: end", 1)[0]


@pytest.mark.parametrize("block", _blocks("hcl"))
def test_hcl_blocks_are_pieces_of_the_validated_vendored_example(block: str):
    # given: the example's module source is the repository's path to the module
    tested = _vendored_snippet().replace('source = "../../modules/loom"', VENDORED_SOURCE)

    # then
    assert block.strip() in tested, "this block differs from terraform/examples/vendored/main.tf: copy one into the other"


def test_deploying_shows_the_whole_vendored_snippet_with_the_outputs_the_cli_reads():
    # given
    text = (ROOT / "docs" / "deploying.md").read_text(encoding="utf-8")
    blocks = [body for lang, body in _fenced(text) if lang == "hcl"]

    # then
    whole = _vendored_snippet().replace('source = "../../modules/loom"', VENDORED_SOURCE).strip()
    assert whole in [b.strip() for b in blocks]
    for output in ("function_url", "queue_url", "dlq_url", "region"):
        assert f'output "{output}"' in whole


# -- versions ---------------------------------------------------------------------------------------
def _engine_core_version() -> str:
    return tomllib.loads((ROOT / "packages/engine-core/pyproject.toml").read_text())["project"]["version"]


def test_engine_core_release_example_is_the_next_patch_of_this_checkouts_engine_core():
    # given
    major, minor, patch = (int(p) for p in _engine_core_version().split(".")[:3])
    text = (ROOT / "docs" / "releasing.md").read_text(encoding="utf-8")

    # when
    examples = set(re.findall(r"make bump-engine-core VERSION=(\S+)", text))

    # then
    assert examples == {f"{major}.{minor}.{patch + 1}"}, (
        f"docs/releasing.md releases engine-core {examples}; engine-core is {major}.{minor}.{patch} here: write "
        f"`make bump-engine-core VERSION={major}.{minor}.{patch + 1} LAMBDAS=sweeper`")


def test_engine_core_ranges_in_the_documents_are_this_checkouts():
    # given: the range workflows-examples really requires
    examples = tomllib.loads((ROOT / "packages/workflows-examples/pyproject.toml").read_text())["project"]
    (required,) = [d for d in examples["dependencies"] if d.startswith("loom-engine-core")]
    major, minor = _engine_core_version().split(".")[:2]

    # when
    releasing = (ROOT / "docs" / "releasing.md").read_text(encoding="utf-8")
    deploying = (ROOT / "docs" / "deploying.md").read_text(encoding="utf-8")

    # then
    assert set(re.findall(r"`(loom-engine-core[<>=,.0-9]+)`", releasing)) == {required}
    assert set(re.findall(r"`(loom-engine-core>=[0-9.]+)`", deploying)) == {f"loom-engine-core>={major}.{minor}"}


def test_loom_tag_examples_when_concrete_are_this_checkouts_version():
    # given
    version = (ROOT / "terraform" / "modules" / "VERSION").read_text().strip()

    # when
    tags = {t for doc in DOCS for t in re.findall(r"loom-v(\d+\.\d+\.\d+)\b", doc.read_text(encoding="utf-8"))}

    # then: concrete tags are the current version (0.1.0 also names the first release in an upgrade note)
    assert tags <= {version, "0.1.0"} and version in tags


# -- one vendoring path -----------------------------------------------------------------------------
def _documents() -> list[Path]:
    skip = {".venv", "build", "dist", ".terraform", "node_modules", ".git"}
    found = [p for p in ROOT.rglob("*") if p.suffix in (".md", ".tf", ".example") and p.is_file()
             and not skip & set(p.relative_to(ROOT).parts) and not any(part.startswith(".venv") for part in p.parts)]
    return sorted(found)


def test_vendoring_path_in_every_document_is_the_same():
    # when
    paths = {(str(p.relative_to(ROOT)), m) for p in _documents()
             for m in re.findall(r"vendor/loom/[\w/.-]*", p.read_text(encoding="utf-8", errors="replace"))}
    refs = {(str(p.relative_to(ROOT)), m) for p in _documents()
            for m in re.findall(r"//terraform/modules/loom\?ref=\S+", p.read_text(encoding="utf-8", errors="replace"))}

    # then
    assert paths and all(m.startswith("vendor/loom/modules") for _, m in paths), sorted(paths)
    assert refs and all(m.startswith("//terraform/modules/loom?ref=loom-vX.Y.Z") for _, m in refs), sorted(refs)


def test_readme_when_its_sections_moved_links_to_both_documents():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/deploying.md)" in text and "(docs/releasing.md)" in text
