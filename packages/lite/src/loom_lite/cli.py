"""``python -m loom_lite`` (and ``loom dev``, the same arguments: ``loom_cli.dev``): serve a package of
workflows on one SQLite file until Ctrl-C or SIGTERM.

Exit status: 0 after a clean stop, 2 when it cannot start (the message says what to change).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import logging
import os
import signal
import sys
from pathlib import Path

from engine_core import REGISTRY, Outcome, Registry
from engine_core.code_step import code_fingerprint
from engine_core.errors import RegistrationError, StorageError
from engine_core.settings import ConfigurationError
from loom_cli.dev import DESCRIPTION, add_arguments

from .config import LiteConfig
from .runtime import LiteRuntime

log = logging.getLogger("loom_lite")
UP_LINE = "Loom is up on SQLite:"
"""How a started runtime announces itself (``make demo-lite`` reads the URL after it)."""


def _decorator(registry: Registry, name: str) -> str:
    """How the versions of ``name`` served here are declared (``@durable`` for a function, ``@workflow`` for a
    step list); a workflow this process serves no version of could be either (the due index does not say)."""
    styles = {registry.get(name, v).fingerprint == code_fingerprint(name) for v in registry.versions(name)}
    if styles == {True}:
        return "@durable"
    return "@workflow" if styles == {False} else "@workflow or @durable"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loom_lite", description=DESCRIPTION)
    add_arguments(p)
    return serve(p.parse_args(argv))


def load_workflows(modules: list[str], entry_points: bool = True, registry: Registry = REGISTRY) -> Registry:
    """Import each module (a name importable from the current directory, or a .py file), then the installed
    ``loom.workflows`` packages; their ``@workflow`` classes register in ``registry``."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    for name in modules:
        before, fresh = registry.registrations, name.endswith(".py") or name not in sys.modules
        try:
            if name.endswith(".py"):
                path = Path(name).resolve()
                spec = importlib.util.spec_from_file_location(path.stem, path)
                if spec is None or spec.loader is None or not path.is_file():
                    raise FileNotFoundError(f"no file {path}")
                module = importlib.util.module_from_spec(spec)
                sys.modules[path.stem] = module
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(name)
        except RegistrationError:
            raise
        except Exception as exc:
            missing = isinstance(exc, FileNotFoundError) or (  # not found, as opposed to found and broken
                isinstance(exc, ModuleNotFoundError) and exc.name is not None and name.startswith(exc.name))
            hint = f" (a module importable from {here}, or a .py file)" if missing else (
                ": the module was found, and importing it raised this; fix it and start again")
            raise ConfigurationError(f"cannot import workflow module {name!r}: {type(exc).__name__}: {exc}{hint}") from exc
        registry.include(module)  # ``registry = Registry()`` at its top level: served as well
        if fresh and registry.registrations == before:  # (an earlier import registered what a module has)
            raise ConfigurationError(
                f"workflow module {name!r} registered no workflows: decorate them with @workflow(...) or "
                "@durable(...), on the default registry or on a Registry() at the module's top level")
    if entry_points:
        registry.load_entry_points()
    if not registry.all():
        raise ConfigurationError("no workflows are registered: name a module that defines some (loom dev myflows), or "
                                 "install a package with a loom.workflows entry point")
    return registry


def _printer(outcome: Outcome) -> None:
    steps = f", {outcome.steps_run} step(s) run" if outcome.steps_run else ""
    detail = f": {outcome.detail}" if outcome.detail else ""
    log.info("%s step %s %s%s%s", outcome.execution_id, outcome.step, outcome.kind, steps, detail)


_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class FieldsFormatter(logging.Formatter):
    """A warning or an error with its fields: the engine puts the cause of a failure in the record's fields
    (``extra=``, a JSON key on Lambda), which the plain format would drop."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno < logging.WARNING:
            return text
        fields = [f"{k}={v}" for k, v in vars(record).items() if k not in _RECORD_FIELDS and v is not None]
        return f"{text} ({', '.join(fields)})" if fields else text


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:  # basicConfig's (not a test's capture)
            handler.setFormatter(FieldsFormatter("%(asctime)s %(name)s %(message)s"))
    logging.getLogger("engine_core").setLevel(logging.WARNING)
    try:
        if args.db and Path(args.db).is_dir():
            raise ConfigurationError(f"--db {args.db} is a directory; name the SQLite file to use, for example "
                                     f"--db {Path(args.db) / 'loom.db'}")
        registry = load_workflows(args.modules, entry_points=not args.no_entry_points)
        config = LiteConfig.from_env(db=Path(args.db) if args.db else None, port=args.port,
                                     sweep_every_s=args.sweep_every, record=not args.no_record)
        made = not config.db.exists()
        runtime = LiteRuntime(config, registry, on_outcome=None if args.quiet else _printer)
    except (ConfigurationError, RegistrationError, StorageError) as exc:  # StorageError: the file cannot be opened
        print(f"loom dev: error: {exc}", file=sys.stderr)
        return 2

    def graceful(signum: int, frame: object) -> None:  # SIGTERM: finish the message in hand, then stop
        runtime.stop_event.set()
        runtime.queue.sent.set()

    try:
        runtime.start()
    except OSError as exc:
        runtime.stop()
        if made:  # the store file this start created for nothing: the next start, on a free port, makes it
            for suffix in ("", "-wal", "-shm"):
                config.db.with_name(config.db.name + suffix).unlink(missing_ok=True)
        if exc.errno != errno.EADDRINUSE:
            raise
        print(f"loom dev: error: port {config.port} on 127.0.0.1 is already in use (another loom dev, or another "
              "server): pass --port with a free one, or leave --port out to have one picked", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, graceful)
    try:
        names = ", ".join(registry.names())
        print(f"{UP_LINE} {runtime.url}  store {config.db}  workflows: {names}  (Ctrl-C stops it)", flush=True)
        for d in runtime.stranded():
            what = f"workflow {d.workflow!r}, which" if d.workflow_gone else f"version {d.version} of workflow {d.workflow!r}, which"
            print(f"loom dev: warning: {d.live} live execution(s) run on {what} this process does not serve: each fails "
                  "at its next delivery (workflow_version_missing); "
                  f"serve version {d.version} beside the new one (keep its {_decorator(registry, d.workflow)}"
                  f"({d.workflow!r}, version={d.version}) registered), or redrive each failed one onto a version served "
                  "here (loom redrive ID --to-version N)",
                  file=sys.stderr, flush=True)
        dead = runtime.queue.depth()["dead_letters"]
        if dead:
            print(f"loom dev: {dead} dead letter(s) kept in this file (failure notices, and step messages received "
                  f"{config.max_receives} times): loom dlq list shows them, loom dlq redrive returns the step messages "
                  "to the queue", file=sys.stderr, flush=True)
        if len(config.schedules):
            fired = ", ".join(f"{d.name} ({d.expression}{'' if d.enabled else ', disabled'})" for d in config.schedules)
            print(f"loom dev: firing {len(config.schedules)} schedule(s) of LOOM_SCHEDULES while it runs: {fired} "
                  "(loom schedules shows each one's next and last firing)", file=sys.stderr, flush=True)
        runtime.run_worker()
    except KeyboardInterrupt:
        print("stopping: worker, sweeper and API", file=sys.stderr, flush=True)
    finally:
        runtime.stop()
        signal.signal(signal.SIGTERM, previous)
    return 0
