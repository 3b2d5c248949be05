"""The composition simulation's configuration: one seed fixes the engine settings, the fault mix, the
generated workflows and the rates of each operation."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from engine_core import EngineSettings

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
            f"  faults ({self.profile}): {self.fx.describe() or 'none'}",
        ]
        lines += [f"  {wf.describe()}" for wf in self.workflows]
        return "\n".join(lines)


PROFILES = ("mixed", "sigstop", "crashy", "lossy")


def make_config(seed: int, **overrides: Any) -> CompConfig:
    rng = random.Random(f"loomsim-composition-config:{seed}")

    def rate(hi: float, off: float = 0.2) -> float:
        return 0.0 if rng.random() < off else round(rng.uniform(0, hi), 3)

    settings = EngineSettings(
        shards=rng.choice([1, 1, 2]), lease_s=rng.choice([60.0, 120.0, 300.0, 900.0]),
        max_queue_delay_s=rng.choice([900, 900, 60, 0]), time_margin_ms=rng.choice([0, 3000]),
        sweep_max_items=rng.choice([3, 500, 500]), max_chain_steps=rng.choice([1, 2, 100, 100]),
        index_slack_s=rng.choice([0.0, 30.0, 300.0]), history_grace_s=rng.choice([86400.0, 0.0]))
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
    workflows = [generate(rng, 0, reliable=True)] + [generate(rng, i) for i in range(1, rng.randint(2, 4))]
    need = max(wf.timeout(i) for wf in workflows for i in range(len(wf.steps))) + settings.time_margin_ms / 1000
    config = CompConfig(seed=seed, settings=settings, visibility_s=rng.choice([30.0, 120.0, 360.0]),
                        max_receives=rng.choice([3, 5, 10]), page_size=rng.choice([1, 100]),
                        fault_ops=rng.randint(60, 140), n_execs=rng.randint(2, 5), workflows=workflows, fx=fx,
                        profile=profile, invocation_s=round(need * rng.choice([1.0, 1.5, 3.0]) + 1.0, 3),
                        body_time=rng.choice([0.0, 0.1, 0.5]), event_rate=rng.choice([0.04, 0.08, 0.15]),
                        cancel_rate=rng.choice([0.0, 0.004, 0.01, 0.02]), redrive_rate=rng.choice([0.0, 0.02, 0.05]))
    for key, value in overrides.items():
        setattr(config, key, value)
    return config
