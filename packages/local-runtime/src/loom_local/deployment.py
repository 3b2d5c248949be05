"""Read what Terraform deployed from the emulator, and match each function to the zip that is its code.

Nothing here is configured by hand: the worker is the function an SQS event source mapping feeds,
the sweeper the target of a schedule rule, the control plane the function with a URL. Handler,
environment, timeout, memory, batch size, batching window, response types, concurrency, the
queue's visibility timeout and redrive policy, and the schedule all come from the emulator.

The code cannot be fetched from the emulator (``Code.Location`` points at AWS), so the runtime runs a
local zip, and only one whose SHA-256 (base64, as Lambda reports it) equals the deployed
``CodeSha256``: what runs is what was deployed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .calls import ACCESS_KEYS
from .esm import MappingConfig
from .function_url import UrlConfig
from .schedule import RuleConfig

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_SESSION_TOKEN": "testing"}


class DeploymentError(Exception):
    """The emulator's deployment cannot be run locally; the message says what to do."""


def code_sha256(path: str | Path) -> str:
    """Lambda's ``CodeSha256``: the base64 of the zip file's SHA-256 digest."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode()


@dataclass(frozen=True)
class DeployedFunction:
    role: str
    name: str
    arn: str
    handler: str
    runtime: str
    timeout_s: float
    memory_mb: int
    environment: dict[str, str]
    code_sha256: str
    zip_path: Path | None = None


@dataclass(frozen=True)
class QueueConfig:
    url: str
    arn: str
    visibility_timeout_s: int
    max_receive_count: int | None
    dlq_arn: str | None
    dlq_url: str | None


@dataclass
class Deployment:
    region: str
    account: str
    functions: dict[str, DeployedFunction] = field(default_factory=dict)
    mapping: MappingConfig | None = None
    mapping_state: str = ""
    queue: QueueConfig | None = None
    rule: RuleConfig | None = None
    url: UrlConfig | None = None

    @property
    def worker(self) -> DeployedFunction:
        return self.functions["worker"]

    @property
    def sweeper(self) -> DeployedFunction:
        return self.functions["sweeper"]

    @property
    def control_plane(self) -> DeployedFunction:
        return self.functions["control-plane"]

    def summary(self) -> dict[str, Any]:
        return {
            "functions": {role: {"name": f.name, "handler": f.handler, "runtime": f.runtime,
                                 "timeout_s": f.timeout_s, "zip": str(f.zip_path)} for role, f in self.functions.items()},
            "queue": None if self.queue is None else {"url": self.queue.url, "visibility_timeout_s":
                                                      self.queue.visibility_timeout_s,
                                                      "max_receive_count": self.queue.max_receive_count,
                                                      "dlq_url": self.queue.dlq_url},
            "mapping": None if self.mapping is None else {
                "batch_size": self.mapping.batch_size, "batching_window_s": self.mapping.batching_window_s,
                "report_batch_item_failures": self.mapping.report_batch_item_failures,
                "max_concurrency": self.mapping.max_concurrency, "state_in_emulator": self.mapping_state},
            "schedule": None if self.rule is None else {"rule": self.rule.name, "expression": self.rule.expression},
        }


def _arn_parts(arn: str) -> tuple[str, str, str]:
    parts = arn.split(":")
    if len(parts) < 6:
        raise DeploymentError(f"malformed ARN {arn!r} in the emulator's deployment")
    return parts[3], parts[4], parts[5]


def _function_name(arn_or_name: str) -> str:
    if arn_or_name.startswith("arn:"):
        parts = arn_or_name.split(":")
        return parts[6] if len(parts) > 6 else parts[-1]
    return arn_or_name


def read(clients: Any, region: str, name_prefix: str = "") -> Deployment:
    """Discover the deployment. ``clients(service)`` returns a boto3 client for the emulator."""
    lam, sqs, events = clients("lambda"), clients("sqs"), clients("events")
    configs = []
    for page in lam.get_paginator("list_functions").paginate():
        configs.extend(c for c in page["Functions"] if c["FunctionName"].startswith(name_prefix))
    if not configs:
        raise DeploymentError(
            "the emulator has no Lambda functions" + (f" named {name_prefix}*" if name_prefix else "") +
            ": terraform/envs/local is not applied to it. `make up` (or `make demo`) starts the emulator "
            "and applies it")
    by_arn: dict[str, dict[str, Any]] = {}
    for c in configs:
        full = lam.get_function(FunctionName=c["FunctionName"])
        by_arn[full["Configuration"]["FunctionArn"]] = full["Configuration"]
    account = _arn_parts(next(iter(by_arn)))[1]
    deployment = Deployment(region=region, account=account)

    def add(role: str, arn: str) -> None:
        name = _function_name(arn)
        conf = next((c for a, c in by_arn.items() if c["FunctionName"] == name), None)
        if conf is None:
            raise DeploymentError(f"the {role} points at function {arn}, which the emulator does not have")
        if role in deployment.functions and deployment.functions[role].name != name:
            raise DeploymentError(f"two functions look like the {role} ({deployment.functions[role].name} and {name}); "
                                  "the local runtime expects one Loom deployment per emulator")
        deployment.functions[role] = DeployedFunction(
            role=role, name=name, arn=conf["FunctionArn"], handler=conf.get("Handler", ""),
            runtime=conf.get("Runtime", ""), timeout_s=float(conf.get("Timeout", 3)),
            memory_mb=int(conf.get("MemorySize", 128)),
            environment=dict((conf.get("Environment") or {}).get("Variables") or {}),
            code_sha256=conf.get("CodeSha256", ""))

    # The worker: fed by an SQS event source mapping.
    mappings = [m for m in lam.list_event_source_mappings().get("EventSourceMappings", [])
                if m.get("EventSourceArn", "").startswith("arn:aws:sqs:") and m.get("FunctionArn") in by_arn]
    if not mappings:
        raise DeploymentError("no SQS event source mapping in the emulator feeds a Lambda function: the worker "
                              "cannot be found. Re-apply terraform/envs/local (`make up`)")
    # A create that the provider retried after a slow answer can leave a second mapping of the same queue to
    # the same function (AWS refuses that pair twice; the emulator does not): the same mapping, for polling.
    pairs = {(m["FunctionArn"], m["EventSourceArn"]) for m in mappings}
    if len(pairs) > 1:
        raise DeploymentError(f"{len(pairs)} SQS event source mappings feed functions "
                              f"({', '.join(sorted(f'{_function_name(f)} <- {_arn_parts(q)[2]}' for f, q in pairs))}); "
                              "expected one (the worker's): one Loom deployment per emulator (`make down && make up`)")
    m = min(mappings, key=lambda mapping: mapping.get("UUID", ""))
    add("worker", m["FunctionArn"])
    queue_arn = m["EventSourceArn"]
    q_region, q_account, q_name = _arn_parts(queue_arn)
    queue_url = sqs.get_queue_url(QueueName=q_name, QueueOwnerAWSAccountId=q_account)["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    redrive = json.loads(attrs["RedrivePolicy"]) if attrs.get("RedrivePolicy") else {}
    dlq_arn = redrive.get("deadLetterTargetArn")
    dlq_url = None
    if dlq_arn:
        _, d_account, d_name = _arn_parts(dlq_arn)
        dlq_url = sqs.get_queue_url(QueueName=d_name, QueueOwnerAWSAccountId=d_account)["QueueUrl"]
    deployment.queue = QueueConfig(url=queue_url, arn=queue_arn, visibility_timeout_s=int(attrs.get("VisibilityTimeout", 30)),
                                   max_receive_count=int(redrive["maxReceiveCount"]) if redrive.get("maxReceiveCount") else None,
                                   dlq_arn=dlq_arn, dlq_url=dlq_url)
    scaling = (m.get("ScalingConfig") or {}).get("MaximumConcurrency")
    deployment.mapping = MappingConfig(
        uuid=m.get("UUID", ""), queue_url=queue_url, queue_arn=queue_arn, region=q_region,
        batch_size=int(m.get("BatchSize") or 10),
        batching_window_s=float(m.get("MaximumBatchingWindowInSeconds") or 0),
        report_batch_item_failures="ReportBatchItemFailures" in (m.get("FunctionResponseTypes") or []),
        max_concurrency=int(scaling) if scaling else 5,
        enabled_in_emulator=m.get("State") in ("Enabled", "Enabling"))
    deployment.mapping_state = m.get("State", "")

    # The control plane: the function with a URL.
    for arn, conf in by_arn.items():
        try:
            url = lam.get_function_url_config(FunctionName=conf["FunctionName"])
        except lam.exceptions.ResourceNotFoundException:
            continue
        add("control-plane", arn)
        host = url["FunctionUrl"].split("//", 1)[-1].split("/", 1)[0]
        deployment.url = UrlConfig(url_id=host.split(".", 1)[0], region=region, account=account,
                                   auth_type=url.get("AuthType", "AWS_IAM"))
    if deployment.url is None:
        raise DeploymentError("no function in the emulator has a Function URL: the control plane cannot be found. "
                              "Re-apply terraform/envs/local (`make up`)")

    # The sweeper: the target of a schedule rule.
    for page in events.get_paginator("list_rules").paginate():
        for rule in page["Rules"]:
            if not rule.get("ScheduleExpression"):
                continue
            for target in events.list_targets_by_rule(Rule=rule["Name"]).get("Targets", []):
                if target["Arn"] in by_arn or _function_name(target["Arn"]) in {c["FunctionName"] for c in by_arn.values()}:
                    add("sweeper", target["Arn"])
                    deployment.rule = RuleConfig(name=rule["Name"], arn=rule["Arn"],
                                                 expression=rule["ScheduleExpression"], account=account,
                                                 region=region, target_input=target.get("Input"))
    if deployment.rule is None:
        raise DeploymentError("no EventBridge schedule rule in the emulator targets a Lambda function: the sweeper "
                              "cannot be found. Re-apply terraform/envs/local (`make up`)")
    return deployment


def match_zips(deployment: Deployment, zip_dir: str | Path) -> Deployment:
    """Pair every deployed function with the local zip whose SHA-256 is its ``CodeSha256``; refuse otherwise."""
    zip_dir = Path(zip_dir)
    zips = {code_sha256(p): p for p in sorted(zip_dir.glob("*.zip"))} if zip_dir.is_dir() else {}
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for role, f in list(deployment.functions.items()):
        path = zips.get(f.code_sha256)
        if path is None:
            have = ", ".join(f"{p.name}={sha}" for sha, p in zips.items()) or f"no zips in {zip_dir}"
            raise DeploymentError(
                f"the deployed {role} function {f.name} has CodeSha256 {f.code_sha256}, and no local zip has that "
                f"hash ({have}). The zip that would run is not the one deployed: it was rebuilt (or deleted) "
                "after the apply. Rebuild and re-apply together: `make down && make up` (or `make demo`)")
        if f.runtime and f.runtime != python:
            raise DeploymentError(
                f"the deployed {role} function {f.name} declares runtime {f.runtime}, but this machine runs "
                f"{python}: the local zips are built for this machine's Python (`make build-local`), so the local "
                f"environment must deploy them as {python}")
        deployment.functions[role] = DeployedFunction(**{**f.__dict__, "zip_path": path})
    return deployment


def extract(zip_path: Path, code_sha: str, root: Path) -> Path:
    """Unpack a zip once per hash (read-only afterwards, like /var/task)."""
    safe = hashlib.sha256(code_sha.encode()).hexdigest()[:16]
    target = root / f"{zip_path.stem}-{safe}"
    stamp = target / ".loom-code-sha256"
    if stamp.exists() and stamp.read_text() == code_sha:
        return target
    staging = root / f".{target.name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        for info in z.infolist():
            dest = (staging / info.filename).resolve()
            if not str(dest).startswith(str(staging.resolve())):
                raise DeploymentError(f"{zip_path} contains a path outside its root ({info.filename!r}); refusing it")
        z.extractall(staging)
    (staging / stamp.name).write_text(code_sha)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def lambda_environment(f: DeployedFunction, code_dir: Path, region: str, endpoint: str,
                       extra: dict[str, str] | None = None) -> dict[str, str]:
    """The process environment: the deployed variables plus what the Lambda service injects.

    ``AWS_ENDPOINT_URL`` points every boto3 client in the function at the emulator (boto3 reads it
    natively); credentials are dummies the emulator accepts, with the access key id of the function's
    role (:data:`loom_local.calls.ACCESS_KEYS`), so the emulator knows whose call it serves.
    """
    reserved = {
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{f.runtime or 'python'}",
        "AWS_LAMBDA_FUNCTION_NAME": f.name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(f.memory_mb),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{f.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": f"local/[$LATEST]{hashlib.sha256(f.arn.encode()).hexdigest()[:32]}",
        "LAMBDA_TASK_ROOT": str(code_dir),
        "_HANDLER": f.handler,
        **DUMMY_CREDENTIALS,
        "AWS_ACCESS_KEY_ID": ACCESS_KEYS.get(f.role, DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"]),
    }
    clash = sorted(set(f.environment) & set(reserved))
    if clash:
        raise DeploymentError(f"function {f.name} sets reserved variables {', '.join(clash)} in its environment; "
                              "Lambda rejects that at deploy time, so the local runtime does too")
    defaults = {"LANG": "en_US.UTF-8", "TZ": ":UTC", "PATH": "/usr/local/bin:/usr/bin:/bin"}
    return {**defaults, **f.environment, **(extra or {}), **reserved, "AWS_ENDPOINT_URL": endpoint}
