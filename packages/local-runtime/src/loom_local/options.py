"""The stack's command-line options, shared by ``run``/``up`` (cli.py) and ``demo`` (demo.py)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .stack import StackOptions


def parse_kv(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def parse_role_kv(text: str) -> tuple[str, str, str]:
    role, sep, rest = text.partition(":")
    if not sep or role not in ("worker", "sweeper", "control-plane"):
        raise argparse.ArgumentTypeError(f"expected ROLE:NAME=VALUE with ROLE worker, sweeper or control-plane, got {text!r}")
    name, value = parse_kv(rest)
    return role, name, value


def stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", type=Path, default=Path.cwd(), help="monorepo root (default: the current directory)")
    p.add_argument("--run-dir", type=Path, default=None, help="state, logs and faults directory (default: REPO/.loom)")
    p.add_argument("--env-dir", type=Path, default=None,
                   help="the Terraform environment to apply (default: REPO/terraform/envs/local)")
    p.add_argument("--zip-dir", type=Path, default=None, help="where the local zips are (default: REPO/dist/local)")
    p.add_argument("--sweep-every", type=float, default=None, metavar="SECONDS",
                   help="fire the sweeper this often instead of the deployed schedule (rate(1 minute))")
    p.add_argument("--port", type=int, default=0, help="local Function URL port (default: a free one)")
    p.add_argument("--worker-concurrency", type=int, default=None, help="concurrent worker batches (default 2)")
    p.add_argument("--tf-var", type=parse_kv, action="append", default=[], metavar="NAME=VALUE",
                   help="extra variable for terraform/envs/local")
    p.add_argument("--tf-cli-config", type=Path, default=None,
                   help="Terraform CLI configuration (provider mirror); default $TF_CLI_CONFIG_FILE, then "
                        "build/terraform/terraformrc")
    p.add_argument("--endpoint-var", default="endpoint", help="the local environment's emulator URL variable")
    p.add_argument("--env", type=parse_role_kv, action="append", default=[], metavar="ROLE:NAME=VALUE",
                   help="local addition to a function's deployed environment")
    p.add_argument("--echo-logs", action="store_true", help="also print function logs to the console")
    p.add_argument("--run-id", default=None, help="this run's directory name under RUN_DIR/runs (default: the start "
                                                   "time and pid)")


def options_from(args: argparse.Namespace, **overrides: Any) -> StackOptions:
    repo = args.repo.resolve()
    extra: dict[str, dict[str, str]] = {}
    for role, name, value in args.env:
        extra.setdefault(role, {})[name] = value
    opts = StackOptions(
        repo=repo, run_dir=(args.run_dir or repo / ".loom").resolve(), sweep_every_s=args.sweep_every,
        env_dir=args.env_dir.resolve() if args.env_dir else None,
        zip_dir=args.zip_dir.resolve() if args.zip_dir else None,
        url_port=args.port, max_concurrency=args.worker_concurrency, tf_vars=dict(args.tf_var),
        tf_cli_config=args.tf_cli_config.resolve() if args.tf_cli_config else None, endpoint_var=args.endpoint_var,
        extra_env=extra, echo_logs=args.echo_logs, progress=_progress(), run_id=args.run_id)
    for k, v in overrides.items():
        setattr(opts, k, v)
    return opts


def examples_environment(ledger: Path) -> dict[str, str]:
    """What the example workflows need to behave as one system across the functions' processes.

    Each function process would otherwise keep a payment ledger of its own (order_saga's refund would
    not find the charge another worker made) and look for fixed feeds in its own default place. The
    names are workflows-examples' own (loom_examples.ledger, loom_examples.fragile_import). The fixes
    directory is the examples' default, spelled out: where the README's `touch` puts a fix.
    """
    return {"LOOM_EXAMPLES_LEDGER_PATH": str(ledger),
            "LOOM_EXAMPLES_FIXES_DIR": str(Path(tempfile.gettempdir()) / "loom-fixes")}


def _progress():
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    return say
