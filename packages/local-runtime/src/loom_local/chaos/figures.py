"""The numbers of a chaos run, each counted from its record (what the stack wrote, what the API answered).

- executions by status, and time to end (``created_at`` to the ending's ``updated_at``);
- deliveries: every message a worker invocation was handed, joined by (request id, message id) to what
  the worker logged for it; the *stale share* is the share that found nothing to do (a stale copy);
- re-drives by the sweeper's own reason (its log), each split by whether something died holding that
  execution since its previous re-drive (a killed or timed-out invocation held its message, or a kill
  fired on it) or nothing did (a message not claimed within its lease: a re-send);
- kills: what fired, what each killed invocation held, and for a kill that interrupted a claimed step
  (at ``worker.after_claim``, ``step.enter``, ``step.return``) the time to that step's next body start,
  beside the design's bound (the killed invocation's deadline + 5 s + one sweeper tick).
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import Counter, defaultdict
from typing import Any

from .config import ENDED, RERUN_MARGIN_S
from .invariants import NOTHING_TO_DO

CLAIMED = ("worker.after_claim", "step.enter", "step.return")
"""Kill points at which the killed invocation held a claimed step (its re-run can be timed)."""
DIED = ("crashed", "timeout", "init_error")
"""How an invocation ends when it dies holding its messages (killed, out of time, or its cold start failed)."""
WASTE = ("early", "released", "raised", "lost with its invocation", "no outcome logged")


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()


def spread(values: list[float]) -> dict[str, Any]:
    """n, median, 90th percentile and max (None when empty)."""
    if not values:
        return {"n": 0, "median": None, "p90": None, "max": None}
    ordered = sorted(values)
    return {"n": len(ordered), "median": round(statistics.median(ordered), 2),
            "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2), "max": round(ordered[-1], 2)}


def _invocations(record: dict[str, Any]) -> tuple[dict[str, dict], dict[str, dict], list[dict]]:
    starts, ends, held = {}, {}, []
    for r in record["runtime"]["invocations"]:
        if r["kind"] == "start":
            starts[r["request_id"]] = r
        elif r["kind"] == "end":
            ends[r["request_id"]] = r
        elif r["kind"] == "held":
            held.append(r)
    return starts, ends, held


def deliveries(record: dict[str, Any]) -> dict[str, Any]:
    _, ends, held = _invocations(record)
    outcome = {(d["request_id"], d["message_id"]): d["outcome"] for d in record["runtime"]["deliveries"]}
    kinds: Counter = Counter()
    category: Counter = Counter()
    for r in held:
        died = ends.get(r["request_id"], {}).get("status") in DIED
        for m in r["messages"]:
            got = outcome.get((r["request_id"], m["message_id"]))
            if got is None:
                got = "lost with its invocation" if died else "no outcome logged"
            kinds[got] += 1
            category["stale copy" if got in NOTHING_TO_DO else got if got in WASTE else "work"] += 1
    total = sum(kinds.values())
    return {"total": total, "by_outcome": dict(kinds.most_common()), "by_category": dict(category.most_common()),
            "stale": category["stale copy"], "stale_share": round(category["stale copy"] / total, 4) if total else None,
            "redelivered": sum(1 for r in held for m in r["messages"] if m["receive_count"] > 1)}


def _deaths(record: dict[str, Any]) -> dict[str, list[float]]:
    """When something died holding each execution: a killed or timed-out worker invocation that held one of its
    messages, or a kill (sweeper, control plane) that fired on it."""
    _, ends, held = _invocations(record)
    out: dict[str, list[float]] = defaultdict(list)
    for r in held:
        end = ends.get(r["request_id"])
        if end is not None and end["status"] in DIED:
            for m in r["messages"]:
                out[m["execution_id"]].append(end["at"])
    for arm in record["faults"]["arms"]:
        eid = (arm.get("info") or {}).get("execution_id")
        if arm["fired"] and arm["kind"] != "worker" and eid:
            out[eid].append(arm["fired_at"])
    return out


def redrives(record: dict[str, Any]) -> dict[str, Any]:
    deaths = _deaths(record)
    by: Counter = Counter()
    previous: dict[str, float] = {}
    for r in sorted(record["runtime"]["redrives"], key=lambda r: r["at"]):
        eid, since = r["execution_id"], previous.get(r["execution_id"], 0.0)
        after_kill = any(since < k < r["at"] for k in deaths.get(eid, []))
        by[(r["reason"], "after a kill" if after_kill else "nothing died")] += 1
        previous[eid] = r["at"]
    starts, ends, _ = _invocations(record)
    sweeps = Counter(ends[rid]["status"] for rid, s in starts.items() if s.get("role") == "sweeper" and rid in ends)
    return {"total": sum(by.values()), "by_reason": [{"reason": k[0], "cause": k[1], "n": n} for k, n in sorted(by.items())],
            "sweeper_invocations": dict(sweeps)}


def kills(record: dict[str, Any]) -> dict[str, Any]:
    starts, ends, held = _invocations(record)
    by_request = {r["request_id"]: r for r in held}
    tick = record["settings"]["sweep_every_s"]
    bodies = sorted(record["runtime"]["steps"], key=lambda s: s["at"])
    redriven = sorted(record["runtime"]["redrives"], key=lambda r: r["at"])
    fired = [a for a in record["faults"]["arms"] if a["fired"]]
    out: dict[str, Any] = {"armed": Counter(a["kind"] for a in record["faults"]["arms"]),
                           "fired": Counter(a["kind"] for a in fired),
                           "worker_points": Counter(a["point"] for a in fired if a["kind"] == "worker"),
                           "never_fired": [a.get("label") or a["point"] for a in record["faults"]["arms"] if not a["fired"]],
                           "interrupted": [], "reruns": []}
    for arm in sorted((a for a in fired if a["kind"] == "worker"), key=lambda a: a["fired_at"]):
        rid = next((rid for rid, s in starts.items() if s["pid"] == arm["pid"] and s["at"] <= arm["fired_at"]
                    and ends.get(rid, {}).get("at", float("inf")) >= arm["fired_at"]), None)
        held_msgs = by_request.get(rid, {}).get("messages", []) if rid else []
        out["interrupted"].append({"point": arm["point"], "execution_id": arm["info"].get("execution_id"),
                                   "request_id": rid, "held": [{k: m[k] for k in ("message_id", "execution_id", "step",
                                                                                  "version", "branch", "receive_count")}
                                                              for m in held_msgs]})
        if arm["point"] not in CLAIMED or rid is None:
            continue
        info = arm["info"]
        who = (info.get("execution_id"), info.get("step"), info.get("branch"), bool(info.get("compensation")))
        rerun = next((b for b in bodies if b["at"] > arm["fired_at"] and (
            b["execution_id"], b["step"], b.get("branch"), bool(b.get("compensation"))) == who), None)
        bound = starts[rid]["deadline_at"] + RERUN_MARGIN_S + tick - arm["fired_at"]
        redrive = next((r for r in redriven if r["execution_id"] == who[0] and r["at"] > arm["fired_at"]), None)
        # A second fault on the same recovery: the sweeper that claimed its re-drive was killed before sending it.
        until = float("inf") if rerun is None else rerun["at"]
        sweeper_killed = any(a["kind"] == "sweeper" and (a.get("info") or {}).get("execution_id") == who[0]
                             and arm["fired_at"] < a["fired_at"] < until for a in fired)
        out["reruns"].append({"point": arm["point"], "execution_id": who[0], "step": who[1], "branch": who[2],
                              "compensation": who[3], "bound_s": round(bound, 2), "sweeper_killed": sweeper_killed,
                              "rerun_s": None if rerun is None else round(rerun["at"] - arm["fired_at"], 2),
                              "redriven_s": None if redrive is None else round(redrive["at"] - arm["fired_at"], 2)})
    timed = [r for r in out["reruns"] if r["rerun_s"] is not None]
    out["rerun"] = spread([r["rerun_s"] for r in timed])
    out["rerun_bound"] = spread([r["bound_s"] for r in out["reruns"]])
    out["redriven"] = spread([r["redriven_s"] for r in out["reruns"] if r["redriven_s"] is not None])
    out["within_bound"] = sum(1 for r in timed if r["rerun_s"] <= r["bound_s"])
    # The bound is a single fault's: a recovery whose re-driving sweeper was killed too is counted apart.
    out["single_fault"] = sum(1 for r in out["reruns"] if not r["sweeper_killed"])
    out["single_fault_within_bound"] = sum(1 for r in timed if not r["sweeper_killed"] and r["rerun_s"] <= r["bound_s"])
    out["held_by_killed"] = sum(len(i["held"]) for i in out["interrupted"])
    for key in ("armed", "fired", "worker_points"):
        out[key] = dict(out[key])
    return out


def measure(record: dict[str, Any]) -> dict[str, Any]:
    """Every figure of one run."""
    plans = {p["execution_id"]: p for p in record["plan"]["executions"]}
    statuses: Counter = Counter()
    by_workflow: dict[str, Counter] = defaultdict(Counter)
    to_end: list[float] = []
    to_end_by: dict[str, list[float]] = defaultdict(list)
    for eid, p in plans.items():
        final = record["finals"].get(eid)
        status = "never started" if final is None else final.get("status", "unreadable")
        statuses[status] += 1
        by_workflow[p["variant"].split("/")[0]][status] += 1
        if final and status in ENDED:
            took = _ts(final["updated_at"]) - _ts(final["created_at"])
            to_end.append(took)
            to_end_by[p["variant"].split("/")[0]].append(took)
    answered = [s["at"] for s in record["starts"].values() if "answer" in s]
    window = record["window"]
    return {"profile": record["plan"]["config"]["profile"], "seed": record["plan"]["config"]["seed"],
            "executions": len(plans), "settings": record["settings"],
            "started_over_s": round(max(answered) - window["t0"], 1) if answered else None,
            "load_s": round(window["load_done"] - window["t0"], 1), "timed_out": window["timed_out"],
            "left_on_queue": window["left_on_queue"], "by_status": dict(statuses.most_common()),
            "by_workflow": {w: dict(c) for w, c in sorted(by_workflow.items())},
            "time_to_end": spread(to_end), "time_to_end_by_workflow": {w: spread(v) for w, v in sorted(to_end_by.items())},
            "deliveries": deliveries(record), "redrives": redrives(record), "kills": kills(record),
            "injected": dict(Counter(i["kind"] for i in record["faults"]["injected"])),
            "actions": dict(Counter(a["op"] for acts in record["actions"].values() for a in acts))}
