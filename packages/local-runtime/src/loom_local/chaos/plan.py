"""The load plan: which executions start when, with which inputs, and which faults each one meets.

Everything is drawn from ``random.Random(seed)``: the same seed and count give the same plan (only
the tokens carry the run's own ``nonce``, so a second run on the same stack starts executions of
its own). Worker kills go first to one execution per crash point (``catalog.COVERAGE``), then to
executions at random, each at a crash point its variant reaches; an execution meets at most one
worker kill.

Example:
    >>> plan = make_plan(profile("faults", count=20, seed=3), nonce="a1b2")
    >>> sum(1 for p in plan.executions if p.kill)
    4
"""

from __future__ import annotations

import random
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from . import catalog
from .config import ChaosConfig

_CONTROL_KILLABLE = ("flaky_greeting/plain", "defaults_tour/plain", "order_fulfillment/plain")


def execution_id_for(token: str) -> str:
    """The id the engine gives a start with this idempotency token (so a kill can be armed before the start)."""
    from engine_core.engine import _TOKEN_NAMESPACE

    return str(uuid.uuid5(_TOKEN_NAMESPACE, token))


@dataclass(frozen=True)
class Kill:
    point: str
    match: dict[str, Any]
    """What the arm matches, the execution's id included."""
    how: str
    """``each point`` (the crash-point coverage) or ``random``."""
    label: str


@dataclass(frozen=True)
class Planned:
    index: int
    token: str
    execution_id: str
    variant: str
    input: dict[str, Any]
    start_at_s: float
    kill: Kill | None = None
    control_kill: bool = False
    duplicate: bool = False
    replay: bool = False
    restart: bool = False

    @property
    def workflow(self) -> str:
        return self.variant.split("/", 1)[0]


@dataclass(frozen=True)
class Plan:
    config: ChaosConfig
    nonce: str
    executions: tuple[Planned, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "nonce": self.nonce,
                "executions": [asdict(p) for p in self.executions]}


def _variants(config: ChaosConfig, rng: random.Random) -> tuple[list[catalog.Variant], dict[int, int]]:
    """``count`` variants: one per worker kill of the coverage, one of each variant, the rest by weight; and
    which of them (by position) meets which coverage kill."""
    pool = [v for v in catalog.variants(config.cancels) if not config.variants or v.key in config.variants]
    if not pool:
        raise ValueError(f"no variant of the catalog is allowed (asked for {', '.join(config.variants)}; known: "
                         f"{', '.join(catalog.BY_KEY)})")
    allowed = {v.key for v in pool}
    chosen: list[catalog.Variant] = []
    covered: dict[int, int] = {}
    entries = [n for n, (key, _, _) in enumerate(catalog.COVERAGE) if key in allowed][:config.worker_kills]
    for n in entries[:config.count]:
        covered[len(chosen)] = n
        chosen.append(catalog.BY_KEY[catalog.COVERAGE[n][0]])
    for v in pool:
        if len(chosen) < config.count and v not in chosen:
            chosen.append(v)
    while len(chosen) < config.count:
        chosen.append(rng.choices(pool, weights=[v.weight for v in pool])[0])
    return chosen, covered


def make_plan(config: ChaosConfig, nonce: str) -> Plan:
    """The run's executions, in start order, with the faults and actions each one meets."""
    rng = random.Random(config.seed)
    chosen, covered = _variants(config, rng)
    order = list(range(len(chosen)))
    rng.shuffle(order)  # the coverage executions land all over the window, not first
    step_s = config.start_window_s / max(1, config.count)
    plans: list[dict[str, Any]] = []
    for slot, i in enumerate(order):
        v = chosen[i]
        token = f"chaos-{nonce}-{slot:04d}"
        plans.append({"index": slot, "token": token, "execution_id": execution_id_for(token), "variant": v.key,
                      "input": v.make_input(rng, f"{nonce}-{slot}"), "start_at_s": round(slot * step_s, 3),
                      "_coverage": covered.get(i)})
    _assign_kills(config, rng, plans)
    free = [p for p in plans if p.get("kill") is None]
    for p in rng.sample([p for p in free if p["variant"] in _CONTROL_KILLABLE] or free,
                        min(config.control_kills, len(free))):
        p["control_kill"] = True
    for flag, n in (("duplicate", config.duplicates), ("replay", config.replays), ("restart", config.restarts)):
        for p in rng.sample(plans, min(n, len(plans))):
            p[flag] = True
    executions = []
    for p in plans:
        p.pop("_coverage")
        executions.append(Planned(**p))
    return Plan(config, nonce, tuple(executions))


def _assign_kills(config: ChaosConfig, rng: random.Random, plans: list[dict[str, Any]]) -> None:
    left = config.worker_kills
    for p in plans:
        if p["_coverage"] is not None:
            key, point, match = catalog.COVERAGE[p["_coverage"]]
            p["kill"] = Kill(point, {"execution_id": p["execution_id"], **match}, "each point", f"{point} in {key}")
            left -= 1
    candidates = [p for p in plans if p.get("kill") is None and catalog.BY_KEY[p["variant"]].sites]
    for p in rng.sample(candidates, min(left, len(candidates))):
        site = rng.choice(catalog.BY_KEY[p["variant"]].sites)
        p["kill"] = Kill(site.point, {"execution_id": p["execution_id"], **site.match}, "random",
                         f"{site.point} at the {site.label} of {p['variant']}")
