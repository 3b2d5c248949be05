"""Fixtures for the Terraform suite: a moto server, a scratch copy of terraform/, and one apply per env.

The suite applies ``envs/local``, ``envs/dev`` (with ``emulator_override.tf.example`` dropped in) and
``examples/vendored`` (a platform team's root: boundary, role path, the worker in a VPC, extra worker
statements, an allow-list; its network and boundary policy created in moto first) to one fresh moto
server, plans ``envs/dev``, ``envs/prod`` and ``examples/vendored`` unchanged for static checks, and
finally destroys the three applies. Everything runs in a temporary copy of ``terraform/`` (``dist/`` is
symlinked beside it), so no state, lock file or override ever lands in the working tree, and an
interactive local stack's state is never touched.

The AWS provider waits ~25 s after creating each SQS queue, so an apply takes one to two minutes:
every Terraform run of the session (two applies, three plans, three broken-input checks) starts in the
background on first use, and each test waits only for the run it reads.

Run through ``make test-terraform``: it builds the zips (``make build``, ``make build-local``) and
writes the provider-mirror CLI configuration (``TF_CLI_CONFIG_FILE``) first. Every Terraform command's
output (with its duration) and moto's log are kept in ``build/terraform/test-logs/``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

# Helper modules beside this file (importlib mode adds no directory to sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from deployed_stacks import SPECS, Deployed  # noqa: E402
from terraform_cases import (  # noqa: E402
    BACKEND_OVERRIDE,
    CROSS_VARIABLE_CASES,
    EXISTING_BUS_CASES,
    LOCAL_SCHEDULES,
    LOCAL_WORKFLOW_ACCESS,
    OFFLINE_PROVIDER,
    SINGLE_VARIABLE_CASES,
    VENDORED_OVERRIDE,
    vendored_inputs,
)

REPO = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = REPO / "terraform"
DIST = REPO / "dist"
# Kept after the session (the scratch copy is not): one log per Terraform working directory, and moto's.
LOG_DIR = REPO / "build" / "terraform" / "test-logs"
REGION = "us-east-1"
ZIPS = ("worker.zip", "sweeper.zip", "control-plane.zip")
# Terraform runs at once: applies and plans mostly wait on the emulator (SQS settles for ~25 s).
PARALLEL_RUNS = 4
RUN_TIMEOUT_S = 600
# The Terraform roots the session applies to the emulator (and destroys at its end).
APPLIED = ("local", "dev", "vendored")


class TerraformRunError(Exception):
    pass


def _require_inputs() -> None:
    """Fail (never skip) with the command that fixes a missing prerequisite."""
    for sub, target in (("local", "make build-local"), ("lambda", "make build")):
        missing = [z for z in ZIPS if not (DIST / sub / z).is_file()]
        if missing:
            pytest.fail(f"dist/{sub}/{', '.join(missing)} missing: run `{target}` (or `make test-terraform`, "
                        "which builds them)", pytrace=False)
    rc = os.environ.get("TF_CLI_CONFIG_FILE", "")
    if not rc or not Path(rc).is_file():
        pytest.fail(f"TF_CLI_CONFIG_FILE={rc!r} is not a file: run this suite through `make test-terraform`, which "
                    "writes build/terraform/terraformrc (providers from the local mirror only) and exports it",
                    pytrace=False)
    if shutil.which("terraform") is None:
        pytest.fail("terraform CLI not found on PATH: install Terraform 1.9 or newer", pytrace=False)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _moto_command(port: int) -> list[str]:
    script = Path(sys.executable).parent / "moto_server"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "moto.server"]
    return [*base, "-H", "127.0.0.1", "-p", str(port)]


@dataclass
class Emulator:
    endpoint: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id="test", aws_secret_access_key="test")


def _start_moto(log_path: Path) -> Emulator:
    port = _free_port()
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    # AWS managed policies (AWSLambdaVPCAccessExecutionRole, attached to a worker in a VPC) exist in
    # every real account; moto loads them only when asked.
    env = {**os.environ, "MOTO_IAM_LOAD_MANAGED_POLICIES": "true"}
    proc = subprocess.Popen(_moto_command(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                return Emulator(endpoint, proc, log_path)
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"moto_server did not answer on {endpoint} within 30 s; see {log_path}")


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@dataclass
class Workspace:
    """One Terraform working directory inside the scratch copy, with the environment its runs get."""

    name: str
    path: Path
    env: dict[str, str]
    variables: dict[str, str] = field(default_factory=dict)
    background: bool = False
    """Run at low CPU priority: plans and checks fill the applies' idle time instead of slowing them."""
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = LOG_DIR / (re.sub(r"[^A-Za-z0-9.-]+", "-", self.name).strip("-") + ".log")

    def run(self, *args: str, timeout_s: float = RUN_TIMEOUT_S, ok_codes: tuple[int, ...] = (0,)) -> str:
        return self.run_code(*args, timeout_s=timeout_s, ok_codes=ok_codes)[1]

    def run_code(self, *args: str, timeout_s: float = RUN_TIMEOUT_S, ok_codes: tuple[int, ...] = (0,)) -> tuple[int, str]:
        cmd = ["terraform", f"-chdir={self.path}", *args]
        if self.background and shutil.which("nice"):
            cmd = ["nice", "-n", "10", *cmd]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise TerraformRunError(f"{self.name}: `terraform {args[0]}` did not finish in {timeout_s:g} s "
                                    f"(log: {self.log_path})") from None
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(cmd)}  # {time.monotonic() - started:.1f} s, exit {proc.returncode}\n{out}\n")
        if proc.returncode not in ok_codes:
            tail = "\n".join(out.strip().splitlines()[-40:])
            raise TerraformRunError(f"{self.name}: `terraform {' '.join(args[:2])}` failed (exit {proc.returncode})."
                                    f" Last lines:\n{tail}\n(full log: {self.log_path})")
        return proc.returncode, out

    def var_args(self) -> list[str]:
        return [f"-var={k}={v}" for k, v in self.variables.items()]

    def init(self) -> None:
        self.run("init", "-input=false", "-no-color")

    def apply(self) -> Applied:
        self.init()
        self.run("apply", "-auto-approve", "-input=false", "-no-color", *self.var_args())
        outputs = self.outputs()
        # A second plan right after the apply must find nothing to change: a perpetual diff means a
        # module argument the provider normalizes differently (and every later apply would touch it).
        code, out = self.run_code("plan", "-detailed-exitcode", "-input=false", "-no-color", *self.var_args(),
                                  ok_codes=(0, 2))
        changes = out[out.find("Terraform used the selected providers"):] if code == 2 else ""
        return Applied(outputs, changes or (out if code == 2 else ""))

    def failure(self, *args: str) -> str:
        """Run a command that must fail; return its output with whitespace collapsed."""
        self.init()
        code, out = self.run_code(*args, "-no-color", ok_codes=(0, 1))
        if code == 0:
            raise TerraformRunError(f"{self.name}: `terraform {args[0]}` succeeded but was expected to fail")
        return " ".join(out.split())

    def outputs(self) -> dict[str, Any]:
        raw = json.loads(self.run("output", "-json", "-no-color"))
        return {k: v["value"] for k, v in raw.items()}

    def managed_ids(self, resource_type: str) -> set[str]:
        """The ids this workspace's state holds for resources of ``resource_type`` (read from the state, no refresh)."""
        shown = json.loads(self.run("show", "-json", "-no-color"))
        found: set[str] = set()
        stack = [(shown.get("values") or {}).get("root_module") or {}]
        while stack:
            module = stack.pop()
            found |= {r["values"]["id"] for r in module.get("resources", []) if r.get("type") == resource_type}
            stack.extend(module.get("child_modules", []))
        return found

    def plan_json(self) -> dict[str, Any]:
        self.init()
        self.run("plan", "-input=false", "-no-color", "-out=tfplan", *self.var_args())
        return json.loads(self.run("show", "-json", "-no-color", "tfplan"))

    def destroy(self) -> None:
        # The state was written by this session's apply; re-reading every resource first adds time only.
        self.run("destroy", "-auto-approve", "-input=false", "-no-color", "-refresh=false", *self.var_args())


@dataclass(frozen=True)
class Applied:
    outputs: dict[str, Any]
    drift: str
    """The plan output when a plan right after the apply still wanted changes; empty when clean."""


def _hermetic_env(extra: Mapping[str, str], scratch: Path) -> dict[str, str]:
    """The runs' environment: this machine's, minus anything that could reach a real AWS account."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TF_VAR_", "AWS_", "TF_WORKSPACE", "TF_DATA_DIR", "TF_CLI_ARGS"))}
    env.update({
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_CONFIG_FILE": str(scratch / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(scratch / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "TF_IN_AUTOMATION": "1",
        "CHECKPOINT_DISABLE": "1",
    })
    env.update(extra)
    return env


def _copy_tree(scratch: Path) -> Path:
    root = scratch / "repo"
    shutil.copytree(TERRAFORM_DIR, root / "terraform", symlinks=True,
                    ignore=shutil.ignore_patterns(".terraform", "*.tfstate", "*.tfstate.*", ".terraform.lock.hcl",
                                                  "*_override.tf", "backend.hcl", "tfplan"))
    # The envs find their zips at <repo>/dist/{local,lambda} by default.
    (root / "dist").symlink_to(DIST, target_is_directory=True)
    return root / "terraform"


class Lab:
    """The moto server plus every Terraform run of the session, started together in the background.

    An apply spends most of its minute waiting on SQS, so the plans and the validation runs share
    the time instead of queueing behind it.
    """

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.tree = _copy_tree(scratch)
        self.emulator = _start_moto(LOG_DIR / "moto.log")
        self.pool = ThreadPoolExecutor(max_workers=PARALLEL_RUNS, thread_name_prefix="terraform")
        emulator_env = _hermetic_env({"AWS_ENDPOINT_URL": self.emulator.endpoint}, scratch)
        envs = self.tree / "envs"

        # Pristine dev and prod, planned only: what would go to AWS, checked statically.
        shutil.copytree(envs / "dev", envs / "dev-plan")
        for name in ("dev-plan", "prod"):
            (envs / name / "backend_override.tf").write_text(BACKEND_OVERRIDE, encoding="utf-8")
        # dev applied to the emulator through the documented override.
        shutil.copyfile(envs / "dev" / "emulator_override.tf.example", envs / "dev" / "emulator_override.tf")
        # local pointed at a dist directory without zips.
        shutil.copytree(envs / "local", envs / "local-nozip")
        (scratch / "empty-dist").mkdir()
        # The vendored example: planned as it is, and applied with the emulator's two exceptions.
        examples = self.tree / "examples"
        shutil.copytree(examples / "vendored", examples / "vendored-apply")
        (examples / "vendored-apply" / "emulator_override.tf").write_text(VENDORED_OVERRIDE, encoding="utf-8")
        self.vendored_inputs = vendored_inputs(self.emulator.client, REGION, DIST)

        ws = self.workspaces = {
            # local gets schedules and an allow-list (dev does not): the emulator holds both cases.
            "local": Workspace("envs/local", envs / "local", emulator_env, {
                "endpoint": self.emulator.endpoint, "schedules": json.dumps(LOCAL_SCHEDULES),
                "workflow_access": json.dumps(LOCAL_WORKFLOW_ACCESS)}),
            # dev publishes status-change events (local does not): the emulator holds both cases.
            "dev": Workspace("envs/dev (emulator override)", envs / "dev", emulator_env,
                             {"status_events": "{enabled=true}"}),
            "dev-plan": Workspace("envs/dev (plan)", envs / "dev-plan", emulator_env, background=True),
            "prod-plan": Workspace("envs/prod (plan)", envs / "prod", emulator_env, background=True),
            "single-variable": self._checks("single-variable", SINGLE_VARIABLE_CASES, emulator_env),
            "cross-variable": self._checks("cross-variable", CROSS_VARIABLE_CASES, emulator_env),
            "local-nozip": Workspace("envs/local (no zips)", envs / "local-nozip", emulator_env,
                                     {"endpoint": self.emulator.endpoint, "dist_dir": str(scratch / "empty-dist")},
                                     background=True),
            "disabled-plan": Workspace("examples/disabled", self.tree / "examples" / "disabled", emulator_env,
                                       background=True),
            "status-events-plan": Workspace("examples/status-events", self.tree / "examples" / "status-events",
                                            emulator_env, background=True),
            "existing-bus-plan": self._checks("existing-bus", EXISTING_BUS_CASES, emulator_env),
            "vendored": Workspace("examples/vendored (applied)", examples / "vendored-apply", emulator_env,
                                  self.vendored_inputs),
            "vendored-plan": Workspace("examples/vendored (plan)", examples / "vendored", emulator_env,
                                       self.vendored_inputs, background=True),
        }
        submit = self.pool.submit
        self.applies: dict[str, Future[Applied]] = {env: submit(ws[env].apply) for env in APPLIED}
        self.plans: dict[str, Future[dict[str, Any]]] = {
            env: submit(ws[f"{env}-plan"].plan_json)
            for env in ("dev", "prod", "disabled", "status-events", "existing-bus", "vendored")}
        self.failures: dict[str, Future[str]] = {
            "single-variable": submit(ws["single-variable"].failure, "validate"),
            "cross-variable": submit(ws["cross-variable"].failure, "plan", "-input=false"),
            "local-nozip": submit(ws["local-nozip"].failure, "plan", "-input=false", *ws["local-nozip"].var_args()),
        }
        self.destroyed = False

    def _checks(self, name: str, cases: str, env: dict[str, str]) -> Workspace:
        path = self.tree / "checks" / name
        path.mkdir(parents=True)
        (path / "main.tf").write_text(cases.format(dist=DIST) + OFFLINE_PROVIDER, encoding="utf-8")
        return Workspace(f"checks/{name}", path, env, background=True)

    def applied(self, env: str) -> Applied:
        return self.applies[env].result(timeout=3 * RUN_TIMEOUT_S)

    def outputs(self, env: str) -> dict[str, Any]:
        return self.applied(env).outputs

    def plan(self, env: str) -> dict[str, Any]:
        return self.plans[env].result(timeout=3 * RUN_TIMEOUT_S)

    def failure(self, name: str) -> str:
        return self.failures[name].result(timeout=3 * RUN_TIMEOUT_S)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        _stop(self.emulator.process)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    _require_inputs()
    shutil.rmtree(LOG_DIR, ignore_errors=True)
    LOG_DIR.mkdir(parents=True)
    scratch = Path(tempfile.mkdtemp(prefix="loom-tf-"))
    lab = Lab(scratch)
    try:
        yield lab
    finally:
        lab.close()
        shutil.rmtree(scratch, ignore_errors=True)


# Function-scoped on purpose: a module-scoped parametrized fixture would let pytest reorder tests. The
# applies themselves happen once per session (see Lab).
@pytest.fixture(params=sorted(SPECS))
def deployed(request: pytest.FixtureRequest, lab: Any) -> Deployed:
    spec = SPECS[request.param]
    if lab.destroyed:
        pytest.fail("the environments were already destroyed: conftest runs test_destroy_leaves_nothing last")
    return Deployed(spec, lab.outputs(spec.key), lab.emulator)


@pytest.fixture(scope="session")
def emulator(lab: Lab) -> Emulator:
    return lab.emulator


def _code_sha256(path: Path) -> str:
    """Lambda's CodeSha256 of a zip (base64 of the raw digest), as filebase64sha256() computes it."""
    return base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()


@pytest.fixture(scope="session")
def code_sha256() -> Any:
    return _code_sha256


@pytest.fixture(scope="session")
def dist() -> Path:
    return DIST


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_destroy_leaves_nothing destroys every apply of the session: run it after everything else,
    whatever the files' order."""
    last = [i for i in items if i.name == "test_destroy_leaves_nothing"]
    items[:] = [i for i in items if i not in last] + last
