"""The composition simulation's configuration: one seed fixes the engine settings, the fault mix, the
generated workflows and the rates of each operation."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from engine_core import EngineSettings

from . import composition_code
from .composition_workflows import CWorkflow, generate
from .sim import FaultMix

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")


@dataclass
class CompConfig:
    seed: int
    settings: EngineSettings
    visibility_s: float
    max_receives: int
    page_size: int
    fault_ops: int
    n_execs: int
    workflows: list[CWorkflow]
    fx: FaultMix
    profile: str = "mixed"
    invocation_s: float = 900.0
    body_time: float = 0.0
    event_rate: float = 0.08
    cancel_rate: float = 0.01
    redrive_rate: float = 0.02
    deadline_rate: float = 1.0
    """Every delivery has an invocation deadline (see the module docstring)."""
    ttl: bool = False
    """The TTL theme: retention of minutes to hours (``settings.retention_days``), items reaped as they
    expire, tokens started again once their execution expired, waits, sleeps and fan-outs outliving
    retention while live."""
    action_rate: float = 0.08
    """Share of fault-phase operations that are one of ``ACTIONS`` (wakes, callbacks, reserved event ids,
    token re-use, the clock past an ended execution's retention, TTL deletions, the clock past retention
    while executions live)."""
    action_weights: tuple[float, ...] = (3, 4, 1, 0, 0, 0, 0)
    redeploy_at: int | None = None
    """The fault-phase operation at which one workflow's step list is redeployed under its name."""
    compatible_redeploy: bool = False
    """That redeploy keeps every step where it stood and retunes its sleeps (or appends a step): the same-version
    redeploy runs in flight go on under, each sleep they had begun kept, each one ahead of them a mismatch."""

    def describe(self) -> str:
        s = self.settings
        lines = [
            f"composition seed {self.seed}: {self.n_execs} executions, {self.fault_ops} fault-phase operations",
            f"  settings: shards={s.shards} lease_s={s.lease_s:g} max_queue_delay_s={s.max_queue_delay_s} "
            f"time_margin_ms={s.time_margin_ms} sweep_max_items={s.sweep_max_items} "
            f"max_chain_steps={s.max_chain_steps} index_slack_s={s.index_slack_s:g}",
            f"  invocations {self.invocation_s:g}s; bodies take up to {self.body_time:.0%} of their budget; "
            f"events on {self.event_rate:.0%} of operations, cancels on {self.cancel_rate:.0%}",
            f"  queue: visibility={self.visibility_s:g}s max_receives={self.max_receives}; sweeper page_size={self.page_size}",
            f"  retention {s.retention_days:g} days, history grace {s.history_grace_s:g}s; actions on "
            f"{self.action_rate:.0%} of operations "
            f"({', '.join(f'{a}={w:g}' for a, w in zip(ACTIONS, self.action_weights) if w)})"
            + (f"; a {'compatible ' if self.compatible_redeploy else ''}redeploy at operation {self.redeploy_at}"
               if self.redeploy_at is not None else ""),
            f"  faults ({self.profile}): {self.fx.describe() or 'none'}",
        ]
        lines += [f"  {wf.describe()}" for wf in self.workflows]
        return "\n".join(lines)


PROFILES = ("mixed", "sigstop", "crashy", "lossy")
ACTIONS = ("wake", "callback", "reserved_id", "restart", "expire", "reap", "outlive")
RETENTION_DAYS = (0.01, 1 / 24, 0.125, 0.5)
"""TTL seeds: 14.4 minutes, 1 hour, 3 hours, 12 hours."""
def make_config(seed: int, **overrides: Any) -> CompConfig:
    rng = random.Random(f"loomsim-composition-config:{seed}")

    def rate(hi: float, off: float = 0.2) -> float:
        return 0.0 if rng.random() < off else round(rng.uniform(0, hi), 3)

    ttl = rng.random() < 0.5
    retention = {"retention_days": rng.choice(RETENTION_DAYS)} if ttl else {}
    leases = [60.0, 120.0, 300.0, 900.0]
    shards, lease_s = rng.choice([1, 1, 2]), rng.choice(leases)
    queue_delay, margin_ms = rng.choice([900, 900, 60, 0]), rng.choice([0, 3000])
    sweep_items, chain, slack = rng.choice([3, 500, 500]), rng.choice([1, 2, 100, 100]), rng.choice([0.0, 30.0, 300.0])
    grace = rng.choice([0.0, 0.0, 600.0, 86400.0] if ttl else [86400.0, 0.0])
    settings = EngineSettings(shards=shards, lease_s=lease_s, max_queue_delay_s=queue_delay, time_margin_ms=margin_ms,
                              sweep_max_items=sweep_items, max_chain_steps=chain, index_slack_s=slack,
                              history_grace_s=grace,
                              checkpoint_records=random.Random(f"loomsim-checkpoint:{seed}").choice([1, 2, 3, 100]),
                              **retention)
    profile = rng.choices(PROFILES, weights=[55, 15, 20, 10])[0]
    u = rng.uniform
    if profile == "mixed":
        fx = FaultMix(crash=rate(0.3), error=rate(0.08), pause=rate(0.2), body_crash=rate(0.2), body_pause=rate(0.15),
                      body_overrun=rate(0.05, 0.5), lose_ack=rate(0.05, 0.5), dup=rate(0.3), drop=rate(0.15),
                      extra_delay=rng.choice([0.0, 5.0, 120.0]), stale=rate(0.5), tick_skip=rate(0.2, 0.5),
                      tick_double=rate(0.2, 0.5))
    elif profile == "sigstop":
        fx = FaultMix(crash=u(0.1, 0.3), pause=u(0.1, 0.3), body_pause=u(0.2, 0.5), dup=rate(0.2), stale=rate(0.3),
                      body_crash=rate(0.05))
    elif profile == "crashy":
        fx = FaultMix(crash=u(0.25, 0.5), error=u(0.0, 0.1), body_crash=u(0.1, 0.3), lose_ack=rate(0.1),
                      pause=rate(0.1))
    else:
        fx = FaultMix(drop=u(0.1, 0.3), dup=u(0.2, 0.5), extra_delay=120.0, lose_ack=u(0.0, 0.1),
                      tick_skip=u(0.1, 0.4), tick_double=u(0.1, 0.4), crash=rate(0.1))
    fx = FaultMix(**{k: round(v, 3) for k, v in fx.__dict__.items()})
    # waits, sleeps and fan-outs outliving retention (only where that is hours: the fan-out's reconcile runs
    # every lease period meanwhile)
    long_s = settings.retention_days * 86400 + settings.history_grace_s
    long_s = long_s if ttl and long_s <= 4 * 3600 else None
    workflows = [generate(rng, 0, reliable=True, long_s=long_s)] + [generate(rng, i, long_s=long_s)
                                                                     for i in range(1, rng.randint(2, 4))]
    composition_code.pick(seed, workflows)  # its own draw: a share of the seeds runs one of them as a function
    need = max(wf.timeout(i) for wf in workflows for i in range(len(wf.steps))) + settings.time_margin_ms / 1000
    config = CompConfig(seed=seed, settings=settings, visibility_s=rng.choice([30.0, 120.0, 360.0]),
                        max_receives=rng.choice([3, 5, 10]), page_size=rng.choice([1, 100]),
                        fault_ops=rng.randint(60, 140), n_execs=rng.randint(2, 5), workflows=workflows, fx=fx,
                        profile=profile, invocation_s=round(need * rng.choice([1.0, 1.5, 3.0]) + 1.0, 3),
                        body_time=rng.choice([0.0, 0.1, 0.5]), event_rate=rng.choice([0.04, 0.08, 0.15]),
                        cancel_rate=rng.choice([0.0, 0.004, 0.01, 0.02]), redrive_rate=rng.choice([0.0, 0.02, 0.05]),
                        ttl=ttl, action_rate=rng.choice([0.04, 0.08, 0.15]),
                        action_weights=(3, 4, 1, 3, 2, 3, 2) if ttl else (3, 4, 1, 1, 0, 0, 0))
    if rng.random() < 0.12:
        config.redeploy_at = rng.randrange(max(1, config.fault_ops))
        config.compatible_redeploy = random.Random(f"loomsim-compatible-redeploy:{seed}").random() < 0.5
    for key, value in overrides.items():
        setattr(config, key, value)
    return config
