"""docs/benchmarks.md: tables of the measured figures and sentences that word ``findings``.

Every verdict, comparison and count a sentence states comes from ``findings``; the typed prose here
is method (how a figure is measured) and explanation that holds whatever the figures are.
"""

from __future__ import annotations

from typing import Any

from .. import analysis, prices
from ..analysis import TARGET_REQUESTS, TARGET_USD_PER_MILLION, TARGET_WRITE_UNITS
from . import coldstart_findings, findings, lite
from ._fmt import Write, api_table, calls, cmd, fmt, met, steps_count, usd, verdict
from .findings import Check


def targets(w: Write, results: dict[str, Any]) -> None:
    w("## Targets\n")
    w("Reported against honestly, not asserted in tests. Details in the sections below.\n")
    w("| Target | Measured | Verdict |")
    w("|---|---|---|")
    steps = results.get("steps")
    if steps:
        for c in findings.request_checks(steps):
            p = steps["sizes"][c.subject]["per_step"]
            w(f"| At most {fmt(c.limit)} AWS requests per step ({c.subject} results) | {fmt(c.value)} "
              f"DynamoDB + SQS requests (+ {fmt(analysis.worker_invocations(p))} Lambda invocation) | {verdict(c.ok)} |")
        for c in findings.write_unit_checks(steps):
            p = steps["sizes"][c.subject]["per_step"]
            w(f"| At most {fmt(c.limit)} write units per step ({c.subject} results) | {fmt(c.value)} "
              f"({fmt(p['wcu_table'])} table + {fmt(p['wcu_gsi'])} index) | {verdict(c.ok)} |")
    sweep = results.get("sweep")
    if sweep:
        s = findings.sweep(sweep)
        rows, due = sweep["by_table_size"], sweep["by_due"]
        w(f"| Sweeper reads proportional to due work | index items read: "
          f"{', '.join(fmt(r['index_items_read']) for r in rows)} for {', '.join(fmt(r['sleeping']) for r in rows)} "
          f"sleeping ({fmt(rows[0]['due'])} due); {', '.join(fmt(r['index_items_read']) for r in due)} for "
          f"{', '.join(fmt(r['due']) for r in due)} due | {verdict(s.ok)} |")
    if steps and (c := findings.usd_check(steps)):
        w(f"| Under ${c.limit:g} per million steps at list price ({c.subject} results) | {usd(c.value)} | "
          f"{verdict(c.ok)} |")
    cold = results.get("coldstart")
    if cold:
        for c in coldstart_findings.import_checks(cold):
            w(f"| Handler import under {c.limit:g} ms on this machine ({c.subject}, dev venv) | "
              f"{fmt(c.value, 0)} ms | {verdict(c.ok)} |")
        for c in coldstart_findings.floor_checks(cold):
            w(f"| Handler import within {c.limit:g} ms of the floor, boto3 and its clients ({c.subject}, dev venv) | "
              f"{c.value:+.0f} ms | {verdict(c.ok)} |")
        for c in coldstart_findings.zip_floor_checks(cold):
            w(f"| Handler init within {c.limit:g} ms of the floor, boto3 and its clients, in the zip as Lambda loads it "
              f"({c.subject}) | {c.value:+.0f} ms | {verdict(c.ok)} |")
    if results.get("code"):
        spans, ok = findings.code_first(results["code"])
        w(f"| Code-first per step within {findings.CODE_TOLERANCE:.0%} of the step list (requests, write units, engine "
          f"CPU; instructions) | {', '.join(f'{k} {v}' for k, v in spans.items())} | {verdict(ok)} |")
    if results.get("lite"):
        lite.target_row(w, results["lite"])
    w("")


def _against(w: Write, what: str, checks: list[Check], rest: str) -> None:
    figures = ", ".join(f"{fmt(c.value)} at {c.subject}" for c in checks)
    w(f"**Against the target ({what}): {met(findings.all_met(checks))}, {figures}.** {rest}\n")


def requests_section(w: Write, steps: dict[str, Any]) -> None:
    w("## Requests per step, by AWS API\n")
    w(f"Command: {cmd('steps')}. Figure: `docs/bench/requests_per_step.png`.\n")
    w("**How it is measured (in-process).** The real `Engine` on `DynamoStore` + `SqsQueue` against moto "
      "(`mock_aws`), every boto3 call counted on the wire with botocore's `before-call`/`after-call` events. A "
      "poller in `bench/steps.py` plays Lambda's SQS event source mapping: `ReceiveMessage` (batch size 1 here), "
      "one worker invocation per non-empty batch, one `DeleteMessageBatch` for the handled messages (AWS does not "
      "document the poller's exact calls; either delete form is one billed request per batch). Per-step figures "
      f"are marginal: (a {steps['n_steps']}-step execution - a 1-step one) / {steps['n_steps'] - 1}, so they "
      "include each step's share of the completion pass and exclude what an execution pays once. Runs: "
      f"{steps['repeats']} of each, median reported; every run gave identical counts: "
      f"{'yes' if findings.runs_identical(steps) else 'no'}.\n")
    ref = findings.reference_size(steps)
    one_kb = steps["sizes"][ref]
    small = steps["sizes"].get("100 B") or one_kb
    cols = [(f"happy path, {'100 B' if small is not one_kb else ref}", small["per_step"]),
            (f"happy path, {ref}", one_kb["per_step"]),
            (f"a step that fails once, then succeeds ({ref})", one_kb["per_step_with_one_retry"]),
            (f"once per execution ({ref})", one_kb["per_execution_fixed"])]
    api_table(w, cols)
    w("")
    r = findings.requests(steps)
    w(f"*Once per execution* (its start, first delivery and end; {r.label}): {calls(r.per_execution)}, and "
      f"{fmt(r.execution_invocations)} Lambda invocations.\n")
    w(f"Lambda invocations per step: {fmt(r.worker_invocations)} worker invocations at batch size 1 (a step that "
      f"fails once: {fmt(r.retry_invocations)}); each execution adds {fmt(r.execution_invocations)}. The sweeper's "
      f"{prices.SWEEPER_TICKS_PER_MONTH:,} invocations a month do not depend on steps (see Dollars).\n")
    trace = steps["traces"].get(ref) or next(iter(steps["traces"].values()), {})
    rows = trace.get("happy", [])
    if rows:
        w(f"**One step on the wire** (step 1 of the {ref} run; item sizes are the stored items, before -> after, "
          "in bytes):\n")
        w("| # | Call | Items touched (sort key: before -> after) | Write units (table + index) | Read units | moto says |")
        w("|---:|---|---|---:|---:|---:|")
        for i, row in enumerate(rows, 1):
            items = "; ".join(f"{k}: {b} -> {a}" for k, b, a in row["items"]) or (
                f"message body {row['sqs_payload']} B" if row["sqs_payload"] else "")
            moto = "-" if row["moto"] is None else fmt(row["moto"])
            w(f"| {i} | {row['api']} | {items} | {fmt(row['wcu'])} + {fmt(row['gsi_wcu'])} | {fmt(row['rcu'])} | {moto} |")
        residual = findings.trace_residual_units(steps)
        if abs(residual) > 1e-9:
            w(f"| | not in this step's own calls (its share of the execution's other calls) | | {fmt(residual)} | | |")
        w("")
    else:
        w(f"**One step on the wire:** no call of the {ref} run was made while handling step 1's own message: "
          "the first delivery runs the steps as one chain, so the per-step figures above (marginal, from whole "
          "executions) are the only per-step split.\n")
    conc = steps.get("concurrency")
    if conc:
        w(f"**Batching.** With {conc['executions']} executions in flight and ESM batch size {conc['batch_size']}, "
          f"the poller's share is {fmt(conc['receives_per_step'])} `ReceiveMessage` and "
          f"{fmt(conc['deletes_per_step'])} `DeleteMessageBatch` per step, and worker invocations "
          f"{fmt(conc['worker_invocations_per_step'])} per step ({fmt(conc['aws_requests_per_step'])} DynamoDB + SQS "
          "requests per step, starts and completions included); one sequential execution pays "
          f"{fmt(r.receives_per_step)} `ReceiveMessage` and {fmt(r.worker_invocations)} worker invocations per step "
          "beyond its first delivery.\n")
    extra = f"; a step that fails once adds {calls(r.retry_extra)}" if r.retry_extra else ""
    _against(w, f"at most {TARGET_REQUESTS} requests per step for results up to 1 KB", findings.request_checks(steps),
             f"A step on the happy path ({r.label}) makes {calls(r.per_step)}{extra}; the once-per-execution "
             "calls (the last column) are shared by every step of the execution.")


def capacity_section(w: Write, steps: dict[str, Any]) -> None:
    w("## Capacity per step\n")
    w(f"Command: {cmd('steps')}. Figure: `docs/bench/capacity_per_step.png`.\n")
    w("Write units (WCU, = on-demand write request units) and read units (RCU; on-demand read request units "
      "are the same arithmetic) per step, computed from the items stored before and after each call by the "
      "documented rules (`bench/capacity.py`). A step result of N bytes is the encoded result blob; the step "
      "returns the same key each time, so the execution's context holds one result.\n")
    w("| Step result | Write units per step (table + GSI1) | Read units per step | moto's reported units (not faithful) "
      "| With one retry: write / read units | SQS bytes per message |")
    w("|---|---:|---:|---:|---:|---:|")
    for label, s in steps["sizes"].items():
        p, r = s["per_step"], s["per_step_with_one_retry"]
        bpm = steps["traces"].get(label, {}).get("sqs_bytes_per_message", 0)
        w(f"| {label} | {fmt(p['write_units'])} ({fmt(p['wcu_table'])} + {fmt(p['wcu_gsi'])}) | {fmt(p['rcu'])} | "
          f"{fmt(p['moto_units'])} | {fmt(r['write_units'])} / {fmt(r['rcu'])} | {fmt(bpm, 0)} |")
    w("")
    c = findings.capacity(steps)
    low, high = c.message_bytes
    if abs(high - low) < 1e-9:
        w(f"An SQS message is {fmt(high, 0)} bytes whatever the step result's size (identifiers only: "
          f"`{{execution_id, step, version}}`): {c.message_chunks} billed 64 KB chunk each.\n")
    else:
        w(f"SQS messages grow from {fmt(low, 0)} to {fmt(high, 0)} bytes with the step result "
          f"({c.message_chunks} billed 64 KB chunk(s) at the largest).\n")
    growth = ""
    if c.units_per_result_kb is not None:
        growth = (f" Each further KB of result adds {c.units_per_result_kb:.2f} write units per step "
                  f"({'the result is written once' if round(c.units_per_result_kb) == 1 else 'per KB of result'}).")
    w(f"**Where the write units go ({c.label} results): {fmt(c.write_units)} per step**, {fmt(c.table_units)} on "
      f"the table and {fmt(c.index_units)} on the indexes; an execution's start and end add "
      f"{fmt(c.execution_index_units)} index units once.{growth}\n")
    checks = findings.write_unit_checks(steps)
    _against(w, f"at most {TARGET_WRITE_UNITS} write units per step for results up to 1 KB", checks,
             "The section *The step path v2 against v1* puts every figure beside the protocol's earlier one.")


def dollars_section(w: Write, steps: dict[str, Any]) -> None:
    w("## Dollars per million steps\n")
    w(f"Command: {cmd('steps')} (counts) with the prices below. Figure: `docs/bench/cost_per_million.png`.\n")
    w(f"Prices checked {prices.PRICES_CHECKED} against the sources in `shared/reference/peers.md` (sections 2a, 2c):\n")
    w("| Price | USD | Unit | Source | Verified |")
    w("|---|---:|---|---|---|")
    for p in prices.AWS_PRICES + prices.PEER_PRICES:
        w(f"| {p.name} | {p.usd:g} | {p.unit} | {p.source} | {'yes' if p.verified else 'no: ' + p.note} |")
    w("")
    w(f"Assumed, not measured: worker Lambda at {prices.ASSUMED_WORKER_MEMORY_MB} MB, {prices.ASSUMED_WORKER_BILLED_MS} "
      "ms billed per invocation (x86). Replace with the p50 `Duration` from CloudWatch once deployed; the "
      "sensitivity columns show 50 and 200 ms. Free tiers are not deducted here.\n")
    w("| Step result | Lambda requests | Lambda duration | DynamoDB writes | DynamoDB reads | SQS | **Total per 1M "
      f"steps** | at 50 ms | at 200 ms | all-in, {analysis.EXECUTION_STEPS_FOR_ALL_IN}-step executions |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, s in steps["sizes"].items():
        cost = analysis.step_cost(s["per_step"])
        b = cost.breakdown_usd_per_million()
        allin = analysis.step_cost(analysis.all_in(s["per_step"], s["per_execution_fixed"])).usd_per_million()
        w(f"| {label} | {usd(b['Lambda requests'])} | {usd(b['Lambda duration'])} | {usd(b['DynamoDB writes'])} | "
          f"{usd(b['DynamoDB reads'])} | {usd(b['SQS requests'])} | **{usd(cost.usd_per_million())}** | "
          f"{usd(analysis.step_cost(s['per_step'], 50).usd_per_million())} | "
          f"{usd(analysis.step_cost(s['per_step'], 200).usd_per_million())} | {usd(allin)} |")
    w("")
    d = findings.dollars(steps)
    if d is None:
        return
    w("**Beside the peers** (per million steps, list price, one billed unit per step for each peer, which "
      "flatters them: a Step Functions Task state still pays for the Lambda it calls, a Lambda durable "
      "function pays compute and storage on top of operations, Temporal counts more than one action for "
      "some steps):\n")
    w("| System | USD per 1M steps | Basis | Verified |")
    w("|---|---:|---|---|")
    for row in analysis.peer_rows(d.usd):
        w(f"| {row['system']} | {usd(row['usd_per_million_steps'])} | {row['basis']} | "
          f"{'yes' if row['verified'] else 'no'}{': ' + row['note'] if row.get('note') else ''} |")
    w("")
    if d.sqs_per_step < 1e-9 and d.invocations_per_step < 1e-9:
        why = "a step on the happy path sends no SQS request and needs no Lambda invocation of its own"
    else:
        why = (f"a step makes {fmt(d.sqs_per_step)} SQS requests and {fmt(d.invocations_per_step)} worker "
               "invocations")
    if d.peer_ratio >= 1:
        versus_peer = f"{d.peer_ratio:.1f}x less than"
    else:
        versus_peer = f"{1 / d.peer_ratio:.1f}x more than"
    c = findings.usd_check(steps)
    w(f"**Against the target (under ${TARGET_USD_PER_MILLION:g} per million steps): {met(c.ok)}, {usd(d.usd)}.** "
      f"DynamoDB writes are {d.write_share:.0%} of it ({why}); each write unit per step is "
      f"${d.usd_per_write_unit:g} per million steps on demand. On provisioned capacity at "
      f"{findings.PROVISIONED_UTILIZATION:.0%} utilisation (${prices.DYNAMODB_PROVISIONED_WCU_HOUR.usd:g} per "
      f"WCU-hour, an unverified third-party price) the same step costs {usd(d.provisioned_usd)}. A Loom step costs "
      f"{versus_peer} one on the cheapest peer above, {d.cheapest_peer.name} (${d.cheapest_peer.usd:g} "
      f"{d.cheapest_peer.unit}, one per step).\n")
    fixed = analysis.fixed_monthly()
    w("**Fixed monthly cost, independent of steps** (assumptions named): sweeper "
      f"{prices.SWEEPER_TICKS_PER_MONTH:,} invocations/month ({prices.ASSUMED_SWEEPER_MEMORY_MB} MB, "
      f"{prices.ASSUMED_SWEEPER_BILLED_MS} ms) and {analysis.DEFAULT_SHARDS} Queries per tick "
      f"({analysis.sweeper_idle_rcu_per_tick(1):g} read unit each when idle); idle ESM long polls: "
      f"{prices.ASSUMED_ESM_IDLE_POLLERS} pollers x one {prices.ESM_LONG_POLL_S} s poll = "
      f"{fixed.sqs_requests:,.0f} ReceiveMessage/month (the poller count on an idle queue is not published: "
      f"an assumption). Total {usd(fixed.usd())}/month at list price.\n")
    _free_tier(w, steps)


def _free_tier(w: Write, steps: dict[str, Any]) -> None:
    w("### Steps per month inside the always-free allowances\n")
    w(f"Allowances (peers.md 2c, \"Always-free\"; {prices.FREE_SOURCE}): Lambda "
      f"{prices.FREE_LAMBDA_REQUESTS / 1e6:g}M requests + {prices.FREE_LAMBDA_GB_SECONDS:,} GB-s; DynamoDB "
      f"{prices.FREE_DYNAMODB_WCU} WCU + {prices.FREE_DYNAMODB_RCU} RCU of *provisioned* capacity, a rate (units per "
      f"second sustained x {prices.SECONDS_PER_MONTH:,} s in a 30-day month, and only for perfectly even load; the "
      "free tier does not cover on-demand requests, so this means running the table provisioned); SQS "
      f"{prices.FREE_SQS_REQUESTS / 1e6:g}M requests. Fixed monthly usage (above) is deducted first.\n")
    w("| Step result | Lambda requests | Lambda GB-s | DynamoDB 25 WCU | DynamoDB 25 RCU | SQS 1M requests | "
      "**Fits** (binding) |")
    w("|---|---:|---:|---:|---:|---:|---|")
    fixed = analysis.fixed_monthly()
    for label, s in steps["sizes"].items():
        fit = analysis.free_tier(s["per_step"], fixed)
        name, n = fit.binding()
        w(f"| {label} | " + " | ".join(steps_count(v) for v in fit.as_dict().values())
          + f" | **{steps_count(n)}** ({findings.allowance_name(name)}) |")
    w("")
    f = findings.free_tier(steps)
    if f is None:
        return
    if f.binding != f.binding_without_idle_polls:
        polls = (f"{f.binding} binds because of the idle long polls ({f.idle_receives_per_month:,.0f} ReceiveMessage "
                 f"a month); without them a {f.label} workload fits {steps_count(f.steps_without_idle_polls)} "
                 f"steps/month ({f.binding_without_idle_polls}).")
    else:
        polls = (f"{f.binding} binds for a {f.label} workload, idle long polls or not "
                 f"({steps_count(f.steps)} steps/month with them, {steps_count(f.steps_without_idle_polls)} "
                 "without).")
    w(f"{polls} DynamoDB's {FREE_WCU} WCU is a ceiling on the *rate*: at {fmt(f.write_units)} units per "
      f"{f.label} step, {FREE_WCU} WCU sustain {f.steps_per_s_on_free_wcu:.1f} steps/s; a burst above that "
      "throttles.\n")


FREE_WCU = prices.FREE_DYNAMODB_WCU
