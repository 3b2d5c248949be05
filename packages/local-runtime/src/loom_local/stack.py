"""The whole local stack: emulator, Terraform apply, and the Lambda service's three roles.

    with LocalStack(StackOptions(repo=Path("."), run_dir=Path(".loom"))) as stack:
        print(stack.url)                     # the control plane's Function URL, on 127.0.0.1
        stack.faults.arm("worker.after_checkpoint")

``stop()`` (also on Ctrl-C, SIGTERM, or an error while starting) stops the URL, the schedule and the
pollers, kills every function process, stops the emulator and closes the logs: no process, no port
left behind.

With ``state_file`` set (``make up``), the Loom table's items are restored from it into the freshly
applied table before anything runs, and saved to it by ``stop()`` before the emulator goes
(:mod:`loom_local.state`).

Each stack writes its logs, crash points and call records into a directory of its own,
``run_dir/runs/<run id>/`` (:mod:`loom_local.runs`), so one run's files are never read as another's;
``logs/invocations.jsonl`` and ``logs/steps.jsonl`` say what each invocation held and how it ended, and
which step bodies ran (:mod:`loom_local.invocations`).
Every function calls AWS under its own role's access key id, the worker's queue poller under the
worker's, and the emulator records those calls in ``calls/`` (:mod:`loom_local.calls`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from . import deployment as deploy
from . import runs, runtime_libs, terraform
from . import state as table_state
from .calls import ACCESS_KEYS, OPERATOR, OPERATOR_ACCESS_KEY, CallLog
from .esm import QueuePoller
from .faults import FaultControl
from .function_url import FunctionUrlServer
from .functions import Function, FunctionSpec
from .invocations import FILE as INVOCATIONS_FILE
from .invocations import STEPS_FILE, InvocationLog
from .logs import LogSink
from .schedule import Scheduler
from .scheduler import SchedulePlayer, read_schedules

REGION = "us-east-1"
Observer = Callable[[str, dict[str, Any]], None]


class StackError(Exception):
    pass


@dataclass
class StackOptions:
    repo: Path
    """The monorepo root (terraform/envs/local, dist/local live under it)."""
    run_dir: Path
    """Where the stack keeps its files: runs/<run id>/ (logs, faults, calls, terraform.tfstate, moto.port),
    current (the newest run), code/ (unpacked zips), state/ (the kept table)."""
    run_id: str | None = None
    """This run's directory name under run_dir/runs (default: the UTC start time and the pid)."""
    zip_dir: Path | None = None
    env_dir: Path | None = None
    runtime_libs_dir: Path | None = None
    tf_cli_config: Path | None = None
    tf_vars: dict[str, str] = field(default_factory=dict)
    endpoint_var: str = "endpoint"
    """The local environment's variable for the emulator's URL."""
    sweep_every_s: float | None = None
    """Override the schedule's period (the deployed rule says once a minute)."""
    url_port: int = 0
    max_concurrency: int | None = None
    """Cap on concurrent worker batches (default: the mapping's maximum concurrency, at most 2 here)."""
    extra_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per role (worker, sweeper, control-plane): local additions to the deployed environment."""
    function_env: dict[str, str] = field(default_factory=dict)
    """Variables every function needs in this run (the example ledger's path, say). Deployed through the
    environment's ``extra_environment_variables`` when it declares one, else added by the runtime."""
    echo_logs: bool = False
    observer: Observer | None = None
    progress: Callable[[str], None] | None = None
    region: str = REGION
    provision: Callable[[LocalStack], None] | None = None
    """Deploy into the fresh emulator some other way than Terraform (the runtime's own tests)."""
    schedule_clock_start: Any = None
    """A datetime: EventBridge Scheduler's schedules fire on a manual clock starting there, moved by
    ``stack.schedules.advance_to(...)`` (tests). None: they fire at their times on the wall clock."""
    state_file: Path | None = None
    """Keep the Loom table across runs: restore its items from this file before anything runs, save them
    to it on stop (``make up`` sets it; the demo and the tests run on a fresh table and leave it alone)."""


def _say(opts: StackOptions, message: str) -> None:
    if opts.progress is not None:
        opts.progress(message)


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the current directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class Emulator:
    """The moto server child process (``python -m loom_local.emulator``)."""

    def __init__(self, run_dir: Path, log_path: Path, calls_dir: Path | None = None):
        self.run_dir, self.log_path, self.calls_dir = run_dir, log_path, calls_dir
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        ready = self.run_dir / "moto.port"
        ready.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a", encoding="utf-8")
        env = {**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "false"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loom_local.emulator", "--port", "0", "--ready-file", str(ready),
             "--parent", str(os.getpid()), *(["--calls-dir", str(self.calls_dir)] if self.calls_dir else [])],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while not ready.exists():
            if self.proc.poll() is not None:
                raise StackError(f"the emulator (moto) exited with status {self.proc.returncode} while starting; "
                                 f"see {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise StackError(f"the emulator (moto) did not start within {timeout_s:g} s; see {self.log_path}")
            time.sleep(0.05)
        self.port = int(ready.read_text())

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class LocalStack:
    def __init__(self, options: StackOptions):
        self.opts = options
        repo = options.repo.resolve()
        self.run_dir = options.run_dir.resolve()
        self.zip_dir = (options.zip_dir or repo / "dist" / "local").resolve()
        self.env_dir = (options.env_dir or repo / "terraform" / "envs" / "local").resolve()
        self.libs_dir = (options.runtime_libs_dir or repo / "build" / "runtime-libs").resolve()
        self.stack_dir = runs.start_run(self.run_dir, options.run_id)
        self.log_dir = self.stack_dir / "logs"
        self.fault_dir = self.stack_dir / "faults"
        self.calls_dir = self.stack_dir / "calls"
        self.emulator = Emulator(self.stack_dir, self.log_dir / "moto.log", self.calls_dir)
        self.logs: LogSink | None = None
        self.invocations: InvocationLog | None = None
        self.deployment: deploy.Deployment | None = None
        self.functions: dict[str, Function] = {}
        self.poller: QueuePoller | None = None
        self.scheduler: Scheduler | None = None
        self.schedules: SchedulePlayer | None = None
        """EventBridge Scheduler's schedules (``loom_local.scheduler``), fired at the control plane."""
        self.url_server: FunctionUrlServer | None = None
        self.faults = FaultControl(self.fault_dir)
        self._stopped = threading.Event()
        self._started = False
        self._deployed_function_env = False
        self._keep_table: str | None = None
        """The table to save on stop: set only once a restore finished (or there was nothing to restore)."""

    # -- clients for the emulator -------------------------------------------------------------------------
    def client(self, service: str, principal: str | None = None):
        """A client for the emulator; ``principal`` (a role, or ``operator``) signs as that Loom principal,
        so its calls are recorded and checked (none: the runtime's own, unrecorded)."""
        key = OPERATOR_ACCESS_KEY if principal == OPERATOR else ACCESS_KEYS.get(principal or "", "testing")
        return boto3.client(service, endpoint_url=self.emulator.endpoint, region_name=self.opts.region,
                            aws_access_key_id=key, aws_secret_access_key="testing",
                            config=Config(retries={"max_attempts": 3, "mode": "standard"},
                                          connect_timeout=5, read_timeout=30))

    @property
    def url(self) -> str:
        assert self.url_server is not None, "the stack is not started"
        return self.url_server.url

    @property
    def endpoint(self) -> str:
        return self.emulator.endpoint

    def _observe(self, kind: str, details: dict[str, Any]) -> None:
        if self.opts.observer is not None:
            self.opts.observer(kind, details)

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> LocalStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        opts = self.opts
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.logs = LogSink(self.log_dir, sys.stderr if opts.echo_logs else None)
        self.invocations = InvocationLog(self.log_dir / INVOCATIONS_FILE)
        if not self.zip_dir.is_dir() or not list(self.zip_dir.glob("*.zip")):
            raise StackError(f"no Lambda zips in {self.zip_dir}: run `make build-local` first (`make up` and "
                             "`make demo` do it for you)")
        _say(opts, f"runtime-provided libraries (boto3) in {self.libs_dir}")
        runtime_libs.ensure(self.libs_dir)

        _say(opts, "starting the emulator (moto) on 127.0.0.1")
        self.emulator.start()
        _say(opts, f"emulator listening on {self.emulator.endpoint}")

        if opts.provision is not None:
            opts.provision(self)
        else:
            _say(opts, "applying terraform/envs/local to the emulator (about a minute: the AWS provider waits "
                       "~25 s after creating each SQS queue)")
            self._apply()

        _say(opts, "reading the deployed configuration from the emulator")
        d = deploy.read(self.client, opts.region)
        d = deploy.match_zips(d, self.zip_dir)
        self.deployment = d
        if opts.state_file is not None:
            self._restore_table(opts.state_file)
        service_calls = CallLog(self.calls_dir, "runtime")
        for role, f in d.functions.items():
            spec = self._spec(role, f)
            concurrency = {"worker": self._worker_concurrency(), "sweeper": 2, "control-plane": 4}[role]
            self.functions[role] = Function(spec, self.libs_dir, self.logs, fault_dir=self.fault_dir,
                                            max_concurrency=concurrency, observer=self._observe,
                                            calls=service_calls, principal=role, invocations=self.invocations,
                                            trace=self.log_dir / STEPS_FILE)
        assert d.mapping is not None and d.rule is not None and d.url is not None
        mapping = d.mapping
        if opts.max_concurrency is not None or mapping.max_concurrency > 2:
            from dataclasses import replace

            mapping = replace(mapping, max_concurrency=self._worker_concurrency())
        # The event source mapping polls with the function's role, as Lambda's pollers do.
        self.poller = QueuePoller(mapping, self.functions["worker"], lambda: self.client("sqs", "worker"), self._observe)
        self.scheduler = Scheduler(d.rule, self.functions["sweeper"], every_s=opts.sweep_every_s,
                                   observer=self._observe)
        self.url_server = FunctionUrlServer(d.url, self.functions["control-plane"], port=opts.url_port,
                                            observer=self._observe, calls=service_calls)
        targets = {f.arn for f in d.functions.values()}
        self.schedules = SchedulePlayer(read_schedules(self.client("scheduler"), targets), self.functions["control-plane"],
                                        manual_start=opts.schedule_clock_start, observer=self._observe)
        self.poller.start()
        self.scheduler.start()
        self.schedules.start()
        self.url_server.start()
        self._started = True
        _say(opts, f"control plane Function URL: {self.url_server.url}")

    def _apply(self, refresh: bool = True) -> None:
        """``terraform apply`` of the environment to the emulator, deploying the zips in ``self.zip_dir``."""
        opts = self.opts
        variables = {opts.endpoint_var: self.emulator.endpoint, **opts.tf_vars}
        declared = terraform.declared_variables(self.env_dir)
        if "dist_dir" in declared:
            variables["dist_dir"] = str(self.zip_dir)  # deploy the very zips the runtime checks
        if opts.function_env and "extra_environment_variables" in declared:
            variables["extra_environment_variables"] = json.dumps(opts.function_env)
            self._deployed_function_env = True
        terraform.apply(self.env_dir, self.stack_dir / "terraform.tfstate", variables, self.log_dir / "terraform.log",
                        cli_config=terraform.cli_config(opts.repo.resolve(), opts.tf_cli_config),
                        progress=opts.progress, refresh=refresh)

    def _spec(self, role: str, f: deploy.DeployedFunction) -> FunctionSpec:
        """What the runtime runs for a deployed function: its zip unpacked once per hash, its environment."""
        assert f.zip_path is not None
        code_dir = deploy.extract(f.zip_path, f.code_sha256, self.run_dir / "code")
        extra = dict(self.opts.extra_env.get(role) or {})
        if self.opts.function_env and not self._deployed_function_env:
            extra = {**self.opts.function_env, **extra}
        env = deploy.lambda_environment(f, code_dir, self.opts.region, self.emulator.endpoint, extra)
        return FunctionSpec(name=f.name, arn=f.arn, handler=f.handler, timeout_s=f.timeout_s,
                            memory_mb=f.memory_mb, code_dir=code_dir, environment=env, role=role)

    def redeploy(self, zip_dir: str | Path, via: str = "terraform") -> deploy.Deployment:
        """Deploy the zips in ``zip_dir`` to the running stack, as ``make build`` then ``terraform apply`` does.

        The apply changes the functions' code and nothing else (the table, the queues, the messages in them and
        the schedules stay). As on Lambda, an invocation in flight finishes on the code it started with and
        every invocation after the update runs the new code in a new environment. ``via="api"`` updates each
        function's code with Lambda's UpdateFunctionCode instead (what ``aws lambda update-function-code`` does:
        a second or two, where an apply spends some 20 CPU-seconds loading the AWS provider; Terraform's state
        then still names the code it applied).
        """
        if via not in ("terraform", "api"):
            raise StackError(f"redeploy via {via!r}: use 'terraform' (an apply) or 'api' (UpdateFunctionCode)")
        if not self._started:
            raise StackError("redeploy needs a started stack: call start() first")
        if self.opts.provision is not None and via == "terraform":
            raise StackError("redeploy applies terraform; this stack was provisioned by hand (StackOptions.provision): "
                             "redeploy it with via='api'")
        new_dir = Path(zip_dir).resolve()
        if not new_dir.is_dir() or not list(new_dir.glob("*.zip")):
            raise StackError(f"no Lambda zips in {new_dir}: build them first (`make build-local`)")
        previous, self.zip_dir = self.zip_dir, new_dir
        how = "terraform apply: only the functions' code changes" if via == "terraform" else "UpdateFunctionCode"
        _say(self.opts, f"deploying the zips in {_shown(new_dir)} ({how})")
        try:
            if via == "terraform":
                self._apply(refresh=False)  # only this runtime changes the emulator's resources
            else:
                self._update_code(new_dir)
            d = deploy.match_zips(deploy.read(self.client, self.opts.region), new_dir)
        except BaseException:
            self.zip_dir = previous
            raise
        for role, f in d.functions.items():
            self.functions[role].update_code(self._spec(role, f))
        self.deployment = d
        self._observe("redeployed", {"zip_dir": str(new_dir),
                                     "code_sha256": {role: f.code_sha256 for role, f in d.functions.items()}})
        return d

    def _update_code(self, zip_dir: Path) -> None:
        """UpdateFunctionCode of each deployed function with its zip of the same name in ``zip_dir``."""
        assert self.deployment is not None
        paths = {}
        for role, f in self.deployment.functions.items():
            assert f.zip_path is not None
            paths[f.name] = path = zip_dir / f.zip_path.name
            if not path.is_file():  # checked for every function before any changes
                raise StackError(f"no {path.name} in {_shown(zip_dir)} for the {role} function {f.name}: a redeploy "
                                 "replaces every function's code, so the directory needs all of them")
        client = self.client("lambda")
        for name, path in paths.items():
            client.update_function_code(FunctionName=name, ZipFile=path.read_bytes())

    # -- the table across runs ----------------------------------------------------------------------------
    def _table_name(self) -> str | None:
        assert self.deployment is not None
        return self.deployment.worker.environment.get("LOOM_TABLE_NAME")

    def _restore_table(self, path: Path) -> None:
        opts, table = self.opts, self._table_name()
        if not table:
            _say(opts, "the worker has no LOOM_TABLE_NAME: there is no table to keep across runs")
            return
        shown = _shown(path)
        if not path.exists():
            _say(opts, f"no saved table in {shown}: starting with an empty table (`make down` saves it)")
            self._keep_table = table
            return
        client = self.client("dynamodb")
        try:
            snap = table_state.load(path)
        except table_state.StateFileError as exc:
            aside = table_state.set_aside(path)
            _say(opts, f"WARNING: the saved table {shown} is unreadable: {exc}. Moved it to {_shown(aside)} and "
                       f"started with an empty table. To restore it once fixed: `make down`, move it back to "
                       f"{shown}, `make up`")
            self._keep_table = table
            return
        try:
            n = table_state.restore(client, table, snap.items)
        except Exception as exc:  # noqa: BLE001 - e.g. items that do not fit the table's key schema
            aside = table_state.set_aside(path)
            try:
                table_state.clear(client, table)
            except Exception as clear_exc:  # noqa: BLE001
                raise StackError(f"restoring {shown} into table {table} failed ({exc}), and so did emptying the "
                                 f"table again ({clear_exc}); the file is now {_shown(aside)}") from exc
            _say(opts, f"WARNING: could not restore {shown} into table {table}: {exc}. Moved it to {_shown(aside)} "
                       f"and started with an empty table. To try again: `make down`, move it back to {shown}, "
                       "`make up`")
            self._keep_table = table
            return
        other = f" (saved from table {snap.table})" if snap.table and snap.table != table else ""
        _say(opts, f"restored {n} items from {shown} (saved {snap.saved_at}){other}; SQS messages are not kept: the "
                   "sweeper re-drives each live execution when its lease or timer runs out")
        self._keep_table = table

    def _save_table(self) -> None:
        path, table = self.opts.state_file, self._keep_table
        if path is None or table is None or self.emulator.proc is None or self.emulator.proc.poll() is not None:
            return
        try:
            snap = table_state.save(self.client("dynamodb"), table, path)
        except Exception as exc:  # noqa: BLE001 - stopping goes on; the previous save is intact (atomic writes)
            print(f"WARNING: could not save table {table} to {_shown(path)}: {exc}. The previous save (if any) is "
                  "kept", file=sys.stderr, flush=True)
            return
        _say(self.opts, f"saved {len(snap.items)} items of table {table} to {_shown(path)} (`make up` restores them, "
                        "`make reset` deletes them)")

    def _worker_concurrency(self) -> int:
        assert self.deployment is not None and self.deployment.mapping is not None
        if self.opts.max_concurrency is not None:
            return self.opts.max_concurrency
        return max(1, min(2, self.deployment.mapping.max_concurrency))

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.url_server is not None:
            self.url_server.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.schedules is not None:
            self.schedules.stop()
        if self.poller is not None:
            self.poller.stop(timeout_s=0.1)
        for fn in self.functions.values():
            fn.close()  # kills in-flight invocations too; their messages come back after the visibility timeout
        self._save_table()  # nothing writes any more (a poller still in its long poll invokes nothing: all closed)
        self.emulator.stop()
        if self.poller is not None:
            self.poller.stop(timeout_s=5)  # their long polls end with the emulator
        if self.logs is not None:
            self.logs.close()
        if self.invocations is not None:
            self.invocations.close()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def pids(self) -> dict[str, Any]:
        return {"runtime": os.getpid(), "emulator": self.emulator.proc.pid if self.emulator.proc else None,
                "functions": {role: fn.pids() for role, fn in self.functions.items()}}

    def wait(self, tick: Callable[[], None] | None = None, every_s: float = 2.0) -> None:
        """Block until stop() is called (from a signal handler, say), calling ``tick`` every ``every_s``."""
        while not self._stopped.wait(every_s if tick is not None else 0.5):
            if tick is not None:
                tick()


def install_signal_handlers(stack: LocalStack) -> None:
    """SIGTERM and SIGINT stop the stack (once); a second Ctrl-C while stopping is ignored."""

    def handler(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
