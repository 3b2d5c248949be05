"""One local stack for the whole session: moto, terraform/envs/local applied once, the deployed functions.

Applying takes a minute or two (the AWS provider waits ~25 s after creating each SQS queue), so every
test shares it and works on executions of its own. Settings that make recovery quick here:

- the sweeper fires every two seconds instead of every minute (``SWEEP_EVERY_S``; each idle tick queries
  every shard of the due index, and a faster tick costs the whole tier CPU for little less waiting);
- the environment's ``lease_s`` is set to a few seconds, so a lost step is re-driven within the
  step's timeout budget (the engine never trusts a lease shorter than timeout + margin: 13 s for the
  example workflows) instead of the queue's 180 s visibility timeout;
- a worker timeout of a minute where the environment lets us set it, so a worker paused on purpose
  is not killed by the timeout before the test resumes it;
- three concurrent worker batches, so a paused worker does not stall the others.

Every test reads through the control plane's Function URL, as a user would; a few also look at the
queues directly. Crash points are armed per execution: its id is derived from the idempotency token
before the start, exactly as the engine derives it.

IAM, as AWS would enforce it: every function calls under its own role's key and the operator's tools
under the operator's, and the stack records each call (loom_local.calls). When the session's stack
stops, every distinct call is checked against the policies Terraform rendered for that principal (the
roles' policies as applied, the `operator_policy_json` output), and the session fails listing each call
AWS would deny. When the whole tier ran, each statement is also removed in turn: one whose removal
denies none of the tier's calls fails the run too (a statement nothing needs, or a path no test takes).
Under pytest-xdist each worker has a stack of its own; the controller checks the union of their calls.

A test that ships other code (a team's own workflow package, a second release of it) deploys its zips on this
stack in place (`Loom.deployed`, with Lambda's UpdateFunctionCode; `LocalStack.redeploy` can also apply
terraform, as a team redeploys) and the suite's own zips again when it ends, instead of starting a stack
of its own.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from loom_local import terraform
from loom_local.calls import read_calls
from loom_local.stack import LocalStack, StackOptions
from loom_test_support import iam_check

REPO = Path(__file__).resolve().parents[2]
# The tests import their shared helpers (e2e_support) by name; importlib mode does not add this directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))
SWEEP_EVERY_S = 2.0
LEASE_S = 5
WORKER_CONCURRENCY = 3
MAX_LEASE_S = 15  # lease_s above this would make every recovery in this suite slow
WORKER_TIMEOUT_S = 20  # a killed attempt's step is re-driven only after this deadline: keep recoveries quick
# Schedules deployed with the stack; they fire only when a test moves the schedule clock (test_e2e_schedules.py).
SCHEDULES = [
    {"name": "e2e-skip", "workflow": "expense_approval", "expression": "cron(0 9 * * ? *)", "overlap": "skip",
     "input": json.dumps({"expense_id": "scheduled-skip", "amount_cents": 100})},
    {"name": "e2e-allow", "workflow": "expense_approval", "expression": "cron(30 9 * * ? *)", "timezone": "Europe/Paris",
     "overlap": "allow", "input": json.dumps({"expense_id": "scheduled-allow", "amount_cents": 200})},
    {"name": "e2e-retired", "workflow": "retired_report", "expression": "cron(0 11 ? * * *)"},
]
SCHEDULE_CLOCK_START = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0)


@pytest.fixture
def schedule_clock_start() -> dt.datetime:
    """Where every stack's manual schedule clock starts (a module imports no name from a conftest)."""
    return SCHEDULE_CLOCK_START


@dataclass
class Events:
    """What the runtime saw: batches handed to the worker, invocations that died, sweeps."""

    items: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, kind: str, details: dict[str, Any]) -> None:
        with self.lock:
            self.items.append((time.time(), kind, details))

    def of(self, kind: str, since: float = 0.0) -> list[dict[str, Any]]:
        with self.lock:
            return [d for t, k, d in self.items if k == kind and t >= since]


class Loom:
    """The running stack plus the calls a test makes against it."""

    def __init__(self, stack: LocalStack, events: Events, ledger: Path, fixes: Path):
        from loom_cli.client import Client

        self.stack, self.events, self.ledger = stack, events, ledger
        self.fixes = fixes
        """Where fragile_import looks for a fixed feed (LOOM_EXAMPLES_FIXES_DIR in every function)."""
        self.url = stack.url
        self.api = Client.create(self.url, sign=False)
        self.faults = stack.faults
        self.sqs = stack.client("sqs")
        d = stack.deployment
        assert d is not None and d.queue is not None
        self.deployment = d
        self.queue_url, self.dlq_url = d.queue.url, d.queue.dlq_url

    @contextlib.contextmanager
    def deployed(self, zip_dir: Path) -> Iterator[None]:
        """The stack running the zips in ``zip_dir``, deployed in place (table, queues and executions kept),
        then this suite's own zips again, whatever happened. Both with UpdateFunctionCode: an apply costs
        some 20 CPU-seconds of the AWS provider, and the tier is CPU-bound (test_e2e_versions applies one)."""
        original = self.stack.zip_dir
        self.stack.redeploy(zip_dir, via="api")
        try:
            yield
        finally:
            self.stack.redeploy(original, via="api")

    @staticmethod
    def execution_id_for(token: str) -> str:
        """The id the engine gives a start with this idempotency token (checked at every start)."""
        from engine_core.engine import _TOKEN_NAMESPACE

        return str(uuid.uuid5(_TOKEN_NAMESPACE, token))

    def new_token(self, label: str) -> tuple[str, str]:
        token = f"it-{label}-{uuid.uuid4().hex[:12]}"
        return token, self.execution_id_for(token)

    def start(self, workflow: str, input: dict[str, Any], token: str | None = None) -> str:
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if token is not None:
            body["idempotency_token"] = token
        status, reply = self.api.request("POST", "/executions", body)
        assert status in (200, 202), reply
        if token is not None:
            assert reply["execution_id"] == self.execution_id_for(token), "the engine derives ids differently now"
        return reply["execution_id"]

    def execution(self, eid: str) -> dict[str, Any]:
        return self.api.request("GET", f"/executions/{eid}")[1]

    def history(self, eid: str) -> list[dict[str, Any]]:
        return self.api.request("GET", f"/executions/{eid}/history")[1]["steps"]

    def meta_item(self, eid: str) -> dict[str, Any]:
        """The execution's item as stored (to see its index keys), read consistently."""
        table = self.deployment.worker.environment["LOOM_TABLE_NAME"]
        return self.stack.client("dynamodb").get_item(
            TableName=table, Key={"PK": {"S": f"EXEC#{eid}"}, "SK": {"S": "#META"}}, ConsistentRead=True)["Item"]

    def wait(self, eid: str, until: tuple[str, ...] = ("COMPLETED", "FAILED"), timeout_s: float = 60.0,
             check=None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        e: dict[str, Any] = {}
        while time.monotonic() < deadline:
            e = self.execution(eid)
            if (check(e) if check is not None else e["status"] in until):
                return e
            time.sleep(0.2)
        raise AssertionError(f"execution {eid} did not reach {check or until} in {timeout_s:g} s; last seen: "
                             f"{json.dumps(e, sort_keys=True)}; history: {json.dumps(self.history(eid))}; "
                             f"function logs in {self.stack.log_dir}")

    def charges(self, key_prefix: str) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        lines = [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]
        return [c for c in lines if c["idempotency_key"].startswith(key_prefix)]

    def refunds(self, key_prefix: str) -> list[dict[str, Any]]:
        path = self.ledger.with_suffix(self.ledger.suffix + ".refunds")
        if not path.exists():
            return []
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in lines if r["idempotency_key"].startswith(key_prefix)]

    def dlq_notices(self, eid: str) -> list[dict[str, Any]]:
        """Failure notices for ``eid`` on the DLQ (received with a long visibility, so each counts once)."""
        found: list[dict[str, Any]] = []
        while True:
            msgs = self.sqs.receive_message(QueueUrl=self.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=600,
                                            WaitTimeSeconds=0).get("Messages", [])
            if not msgs:
                break
            for m in msgs:
                body = json.loads(m["Body"])
                if isinstance(body, dict) and body.get("execution_id") == eid:
                    found.append(body)
                self.sqs.change_message_visibility(QueueUrl=self.dlq_url, ReceiptHandle=m["ReceiptHandle"],
                                                   VisibilityTimeout=600)
        return found

    def set_visibility_timeout(self, seconds: int) -> None:
        """Change the step queue's visibility timeout, and wait until receives use it.

        A receive applies the value the queue had when the call began, so the pollers' long polls in
        progress still use the old one (real SQS also takes a while to propagate an attribute change).
        """
        self.sqs.set_queue_attributes(QueueUrl=self.queue_url, Attributes={"VisibilityTimeout": str(seconds)})
        time.sleep(self.stack.poller.wait_s + 1.0 if self.stack.poller else 2.0)


@pytest.fixture(scope="session")
def loom(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Loom]:
    run_dir = tmp_path_factory.mktemp("loom-local")
    env_dir = Path(os.environ.get("LOOM_LOCAL_ENV_DIR") or REPO / "terraform" / "envs" / "local")
    declared = terraform.declared_variables(env_dir)
    wanted = {"lease_s": str(LEASE_S), "worker_timeout_s": str(WORKER_TIMEOUT_S), "schedules": json.dumps(SCHEDULES)}
    tf_vars = {k: v for k, v in wanted.items() if k in declared}
    ledger = run_dir / "ledger.jsonl"
    fixes = run_dir / "fixes"
    fixes.mkdir()
    events = Events()
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[loom-local {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    stack = LocalStack(StackOptions(
        repo=REPO, run_dir=run_dir, env_dir=env_dir, tf_vars=tf_vars, sweep_every_s=SWEEP_EVERY_S,
        max_concurrency=WORKER_CONCURRENCY, schedule_clock_start=SCHEDULE_CLOCK_START,
        function_env={"LOOM_EXAMPLES_LEDGER_PATH": str(ledger), "LOOM_EXAMPLES_FIXES_DIR": str(fixes)},
        observer=events, progress=progress))
    policies = None
    try:
        stack.start()
        lease = float(stack.deployment.worker.environment.get("LOOM_LEASE_S", "900"))
        if lease > MAX_LEASE_S:
            pytest.fail(f"the local environment deploys LOOM_LEASE_S={lease:g}; these tests need at most "
                        f"{MAX_LEASE_S} s (every crash recovery waits for it). terraform/envs/local should declare "
                        f"a lease_s variable (this suite sets it to {LEASE_S})", pytrace=False)
        policies = deployed_policies(stack)
        yield Loom(stack, events, ledger, fixes)
    finally:
        stack.stop()
    if policies is not None:
        _check_iam(request.config, stack, policies)


def _check_iam(config: pytest.Config, stack: LocalStack, policies: dict[str, Any]) -> None:
    d = stack.deployment
    calls = read_calls(stack.calls_dir)
    shared = _iam_dir(config)
    shared.mkdir(parents=True, exist_ok=True)
    (shared / f"{os.getpid()}.json").write_text(json.dumps(
        {"calls": calls, "policies": policies, "region": d.region, "account": d.account}))
    result = iam_check.check(calls, policies, d.region, d.account)
    print(f"\n{result.report()}", file=sys.stderr)
    if not result.ok:
        pytest.fail(result.report(), pytrace=False)


def _iam_dir(config: pytest.Config) -> Path:
    """Where each stack leaves its calls and policies for the whole run's statement check."""
    workerinput = getattr(config, "workerinput", None)
    return Path(workerinput["loom_iam_dir"] if workerinput else config._loom_iam_dir)  # type: ignore[attr-defined]


def deployed_policies(stack: LocalStack) -> dict[str, dict[str, Any]]:
    """Each principal's policies as Terraform rendered them: the roles' as applied, the operator's output."""
    lam, iam = stack.client("lambda"), stack.client("iam")
    out: dict[str, dict[str, Any]] = {}
    for role, f in stack.deployment.functions.items():
        role_arn = lam.get_function(FunctionName=f.name)["Configuration"]["Role"]
        out[role] = iam_check.role_policies(iam, role_arn.rsplit("/", 1)[-1])
    outputs = json.loads((stack.stack_dir / "terraform.tfstate").read_text()).get("outputs", {})
    operator = (outputs.get("operator_policy_json") or {}).get("value")
    out["operator"] = {"operator_policy_json": json.loads(operator)} if operator else {}
    return out


def pytest_collection_modifyitems(items):
    # The first test also pays for the session's stack (apply: 1-2 minutes on a busy machine).
    for item in items:
        if item.path.parent == Path(__file__).resolve().parent:
            item.add_marker(pytest.mark.timeout(600))


@pytest.fixture(autouse=True)
def _no_leftover_arms(request):
    yield
    if "loom" in request.fixturenames:
        request.getfixturevalue("loom").faults.disarm_all()


# -- the whole run's IAM statement check (one process: the xdist controller, or the only one) --------
_RUN: dict[str, Any] = {}


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        import tempfile

        config._loom_iam_dir = tempfile.mkdtemp(prefix="loom-iam-")  # type: ignore[attr-defined]
        _RUN.update(config=config, passed_files=set())


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # pytest-xdist: hand each worker the shared directory
    node.workerinput["loom_iam_dir"] = node.config._loom_iam_dir


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "passed_files" in _RUN and report.when == "call" and report.passed:
        _RUN["passed_files"].add(report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not hasattr(config, "_loom_iam_dir"):
        return
    import shutil

    shared = Path(config._loom_iam_dir)
    records = [json.loads(p.read_text()) for p in sorted(shared.glob("*.json"))]
    shutil.rmtree(shared, ignore_errors=True)
    modules = {p.name for p in Path(__file__).resolve().parent.glob("test_*.py")}
    missing = sorted(modules - _RUN.get("passed_files", set()))
    if not records:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if missing or config.option.keyword or config.option.markexpr:
        reporter.write_line(f"IAM statement check not run: it needs every end-to-end module to pass "
                            f"(not passed or not run: {', '.join(missing) or 'a -k/-m selection'})")
        return
    calls = [c for r in records for c in r["calls"]]
    if os.environ.get("LOOM_E2E_IAM_RECORD"):  # refresh packages/test-support/tests/fixtures/e2e_iam.json
        unique = sorted({json.dumps(c, sort_keys=True) for c in calls})
        Path(os.environ["LOOM_E2E_IAM_RECORD"]).write_text(json.dumps(
            {**{k: records[0][k] for k in ("region", "account", "policies")},
             "calls": [json.loads(c) for c in unique]}, indent=1, sort_keys=True) + "\n")
    result = iam_check.check(calls, records[0]["policies"], records[0]["region"], records[0]["account"])
    unneeded = result.unneeded_statements()
    if unneeded:
        reporter.write_line("IAM: removing any of these statements denies none of the end-to-end tier's calls "
                            "(a statement nothing needs, or a path no test takes):\n  " + "\n  ".join(unneeded),
                            red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        n = sum(len(v) for v in result.statements.values())
        reporter.write_line(f"IAM: each of the {n} statements is needed: removing any one denies a call the "
                            "end-to-end tier made")
