"""The sections measured around the step: the local runtime, the sweeper, engine CPU and cold start."""

from __future__ import annotations

from typing import Any

from ..analysis import TARGET_IMPORT_MS, TARGET_OVER_FLOOR_MS
from . import coldstart_findings, findings
from ._fmt import Write, and_join, api_table, calls, cmd, fmt, met, usd


def local_section(w: Write, local: dict[str, Any], steps: dict[str, Any] | None) -> None:
    w("## Through the local runtime\n")
    if local.get("status") != "measured":
        w(f"**Pending.** {local.get('reason', '')}\n")
        return
    n = local["steps_per_execution"]
    w(f"Command: {cmd('local')} (starts moto, applies `terraform/envs/local`, runs the `dist/local` zips; "
      f"the stack took {local['stack_seconds']:.0f} s in all).\n")
    w("The deployed functions run in their own isolated processes (packages/local-runtime), so the bench counts "
      "where every request lands: moto's request recorder. Requests whose User-Agent carries "
      "`exec-env/AWS_Lambda_*` come from a function process; the rest are the runtime's SQS poller (the event "
      "source mapping) or the bench's own status reads (tagged `loom-bench`, excluded). The recorder keeps no "
      "responses, so the poller's non-empty receives are its batch count and the rest are idle long polls "
      f"(excluded, a fixed cost). Workload: `{local['workflow']}` from workflows-examples, {n} steps (the zips "
      f"carry only installed workflow packages); median of {local['repeats']} executions after a warm-up one, per "
      f"execution. The first column is what the in-process bench predicts for a {n}-step execution ({n} x per "
      "step + once per execution, 100 B results).\n")
    predicted = findings.predicted_local(steps, n) if steps else None
    cols = [(f"in-process prediction, {n} steps", predicted)] if predicted else []
    for name, run in local["runs"].items():
        cols.append((f"local runtime: {name}", {**run, "sqs_billed": float("nan")}))
    burst = local["burst"]
    cols.append((f"local runtime: {burst['executions']} in flight, per execution",
                 {**burst["per_execution"], "sqs_billed": float("nan")}))
    api_table(w, cols)
    w("")
    happy = findings.happy_run(local)
    if predicted:
        same = findings.matches_prediction(predicted, happy)
        w(f"- Happy path: {fmt(happy['aws_requests'] / n)} DynamoDB + SQS requests per step all-in for this "
          f"{n}-step workflow (start and completion included); "
          + ("the same, API by API, as the in-process prediction: the in-process model is what the deployed "
             "functions do." if same else "**differs** from the in-process prediction (see the table)."))
    w(f"- Throughput: {local['steps_per_second']:.1f} steps/s with {burst['executions']} executions started at "
      f"once ({burst['executions'] * n} steps in {burst['wall_s']:.1f} s, {local['worker_concurrency']} worker "
      f"processes, {burst['batches']} worker batches). A single execution took "
      f"{local['single_execution_wall_s']:.2f} s start to COMPLETED. This measures the local runtime (process "
      "pipes, moto's HTTP server with DynamoDB serialised), not AWS.")
    invokes = burst["per_execution"]["requests"].get("lambda:Invoke", 0)
    single = happy["requests"].get("lambda:Invoke", 0)
    if findings.invocations_are_batches_plus_starts(local):
        how = (f"{fmt(invokes)} per execution in flight: its share of the {burst['batches']} worker batches plus its "
               "one control-plane start")
    else:
        how = f"{fmt(invokes)} per execution in flight, against {burst['batches']} worker batches"
    w(f"- Lambda invocations (lambda:Invoke): {fmt(single)} for one execution alone, {how}.\n")


def sweeper_section(w: Write, sweep: dict[str, Any]) -> None:
    s = findings.sweep(sweep)
    w("## Sweeper cost against table size\n")
    w(f"Command: {cmd('sweep')}. Figure: `docs/bench/sweeper.png`.\n")
    w("DynamoStore on moto with the design's sparse, KEYS_ONLY GSI1. Sleeping executions (waking tomorrow) and "
      "due ones (woke a minute ago) are seeded with BatchWriteItem in the store's own item shape; then one "
      "`Sweeper.sweep()` runs on the wire. *Index items read* is `DuePage.read_count` (DynamoDB's ScannedCount), "
      "summed over the tick. Each count is the median of the sweeps run (re-seeding the due work each time); all "
      f"runs agreed: {'yes' if s.runs_identical else 'no'}.\n")
    w("| Sleeping executions | Due | Shards | Query calls | Index items read | Read units (Queries) | Re-driven | "
      "Requests per re-drive |")
    w("|---:|---:|---:|---:|---:|---:|---:|---:|")
    seen = set()
    for key in ("by_table_size", "by_due", "by_shards"):
        for r in sweep[key]:
            ident = (r["sleeping"], r["due"], r["shards"])
            if ident in seen:
                continue
            seen.add(ident)
            per = (r["get_items"] + r["put_items"] + r["sends"]) / max(1, r["redriven"])
            w(f"| {fmt(r['sleeping'])} | {fmt(r['due'])} | {r['shards']} | {fmt(r['queries'])} | "
              f"{fmt(r['index_items_read'])} | {fmt(r['query_rcu'])} | {fmt(r['redriven'])} | {fmt(per)} |")
    w("")
    seeds = sweep.get("seed", [])
    if seeds:
        w("Seeding time on moto in-process (BatchWriteItem, 25 items a call): " + "; ".join(
            f"{fmt(x['items'])} items in {x['seconds']:.1f} s ({x['shards']} shard(s))" for x in seeds) + ".\n")
    size = ("do not change with the table's size" if s.flat_in_table_size
            else "**change with the table's size**")
    due = "equal the due executions" if s.follows_due else "**differ from the due executions**"
    why = (" Only live executions carry GSI1 keys, and the Query's key condition (`GSI1SK <= now`) stops at the "
           "first future wake time." if s.ok else "")
    w(f"**Against the target (reads proportional to due work): {met(s.ok)}.** Index items read {size} and {due}."
      f"{why} Query calls: {fmt(s.queries_per_shard)} per shard per tick, and {fmt(s.extra_queries_at_most_due)} "
      f"more at {fmt(s.most_due)} due. Shards cost a fixed {fmt(s.rcu_per_shard)} "
      f"read unit{'' if s.rcu_per_shard == 1 else 's'} each per tick: "
      f"{s.most_shards} shards are {fmt(s.rcu_per_tick_at_most_shards)} read units a minute, "
      f"{usd(s.usd_per_month_at_most_shards)} a month on demand. Each re-drive is {calls(s.per_redrive)}.\n")
    w("moto note: moto 5.2.1 sorts the whole table on every Query; the bench swaps in an equivalent sort key for "
      "its own run (`bench/world.py:quick_moto_sort`, same order, same ScannedCount) so the 16-shard case takes "
      "seconds, not minutes.\n")


def instructions_table(w: Write, counted: dict[str, Any] | None) -> None:
    """Instructions per step under callgrind, beside the count before issue 22's step-path CPU work."""
    if not counted:
        return
    if counted.get("status") != "measured":
        w(f"Instructions per step: {counted.get('status', 'not measured')}.\n")
        return
    before = findings.instructions_before()
    layouts = counted.get("layouts", 1)
    w(f"Instructions per step, counted by `{counted['tool']}` over {counted['steps']:,} steps of the same loop "
      "(`bench/instructions.py`): other work on the machine does not move them, so they are the before-and-after "
      f"figure. Each is the mean over {layouts} memory layouts of the interpreter (`bench/layout.py`: which "
      "attribute lookups collide in CPython's type cache depends on the layout, and moves one layout's count by "
      f"a few percent). *Before*: `bench/baseline/{findings.INSTRUCTIONS_BEFORE.name}` ({before['about']})\n")
    w("| Step result | instructions per step, before | now | change | now, lowest to highest layout |")
    w("|---|---:|---:|---:|---:|")
    ranges = counted.get("range") or {}
    for size, now in counted["per_step"].items():
        old = before["per_step"].get(size)
        change = "-" if not old or now is None else f"{(now - old) / old:+.1%}"
        spread = ranges.get(size)
        spread_text = "-" if not spread else f"{spread[0]:,.0f} to {spread[1]:,.0f}"
        w(f"| {int(size):,} B | {'-' if old is None else f'{old:,.0f}'} | {'-' if now is None else f'{now:,.0f}'} "
          f"| {change} | {spread_text} |")
    w("")


def overhead_section(w: Write, overhead: dict[str, Any], local: dict[str, Any] | None) -> None:
    w("## Engine overhead\n")
    w(f"Command: {cmd('overhead')}.\n")
    w(f"CPU time (`time.process_time`) of engine-core on the memory store with a manual clock: the worker's "
      f"loop (take message, `Engine.process`, ack) over one {overhead['steps']:,}-step execution (LOOM_MAX_STEPS "
      f"caps executions at 1,000), median of {overhead['repeats']} runs (the sizes take turns, after one unmeasured run of each; the fastest run beside it). No AWS calls and no DynamoDB JSON: the "
      "floor under a worker invocation's billed duration.\n")
    w(f"| Step result | {overhead['steps']:,}-step execution, CPU | per step transition, CPU | fastest run | of which encoding the result | the rest | runs (ms) |")
    w("|---|---:|---:|---:|---:|---:|---|")
    for size, r in overhead["sizes"].items():
        enc = r.get("encode_result_us")
        enc_text, rest_text = ("-", "-") if enc is None else (f"{enc:.0f} us", f"{r['per_transition_cpu_us'] - enc:.0f} us")
        fastest = r.get("fastest_per_transition_cpu_us")
        fastest_text = "-" if fastest is None else f"{fastest:.0f} us"
        w(f"| {int(size):,} B | {r['execution_cpu_ms']:.0f} ms | {r['per_transition_cpu_us']:.0f} us | {fastest_text} | {enc_text} | "
          f"{rest_text} | {', '.join(str(x) for x in r['cpu_ms_runs'])} |")
    w("")
    w("*Encoding the result* is `codec.encode` of one step's result alone (its value walk and CPython's C `json.dumps`, "
      "median of 5 batches of 2,000): what a step costs more as its result grows, paid once per step by any engine that "
      "stores results as JSON text. *The rest* is the engine's own work per step.\n")
    instructions_table(w, overhead.get("instructions"))
    per = {int(size): r["per_transition_cpu_us"] for size, r in overhead["sizes"].items()}
    if len(per) > 1:
        low, high = min(per), max(per)
        w(f"From {low:,} B to {high:,} B results the engine's CPU per step grows "
          f"{findings.ratio(per[high], per[low]):.2f}x ({per[low]:.0f} to {per[high]:.0f} us); the target is "
          f"{findings.TARGET_CPU_US:g} us (*The step path v2 against v1*).\n")
    if not local or local.get("status") != "measured":
        w("Steps per second through the local runtime: **pending** (see *Through the local runtime*).\n")
    elif local.get("steps_per_second"):
        w(f"Steps per second through the local runtime: {local['steps_per_second']:.1f}, with "
          f"{local['burst']['executions']} executions started at once (see *Through the local runtime*).\n")


def _ms(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.0f} ms" if signed else f"{value:.0f} ms"


def zip_section(w: Write, cold: dict[str, Any]) -> None:
    """Each handler's init in the zips as Lambda loads them, beside its floor."""
    runs = cold.get("zip_runs") or []
    if not runs:
        w("(no zips measured: `make build` / `make build-local` did not run)\n")
        return
    w("In the zips, as Lambda loads them: the zip unpacked first on `sys.path`, then boto3 as Lambda's runtime "
      "provides it (compiled for that interpreter), `python -I -B` (isolated: nothing else). *Init* is the "
      "handler module's import, its boto3 clients and workflow registry included; the floor is `import boto3` "
      "plus the clients the handler creates, with the same interpreter and libraries"
      + ("" if cold.get("python312") else "; no CPython 3.12 was found here, so the `dist/lambda` zips were not "
         "imported") + ".\n")
    w("| Function | Zip | Python | Init: handler import (min) | Floor: boto3 + its clients | Over the floor | "
      "Same zip, sources only (over the floor) | Process wall (interpreter incl.) | Largest self times |")
    w("|---|---|---|---:|---:|---:|---:|---:|---|")
    for entry in runs:
        for function, r in entry["functions"].items():
            if not r.get("ok"):
                w(f"| {function} | `{r['zip']}` | {entry['python_version']} | fails: {r.get('error', '?')} | | | | | |")
                continue
            sources = (f"{r['sources_only_ms']:.0f} ms ({_ms(r.get('sources_only_over_floor_ms'), True)})"
                       if r.get("sources_only_ms") else "-")
            parts = ", ".join(f"{name} {ms:.0f} ms" for name, ms in r.get("by_package_ms", [])[:4])
            w(f"| {function} | `{r['zip']}` ({r.get('pycs', 0)} pyc) | {entry['python_version']} | "
              f"{r['import_ms']:.0f} ms ({r['import_ms_min']:.0f}) | {_ms(r.get('floor_ms'))} "
              f"({', '.join(r.get('clients', []))}) | {_ms(r.get('over_floor_ms'), True)} | {sources} | "
              f"{r['process_wall_ms']:.0f} ms | {parts} |")
    w("")
    checks = coldstart_findings.zip_floor_checks(cold)
    if checks:
        missed = [c for c in checks if not c.ok]
        result = ("met by every handler" if not missed else "missed by every handler" if len(missed) == len(checks)
                  else f"missed by {and_join(c.subject for c in missed)}")
        w(f"**Against the target (each handler's init within {checks[0].limit:g} ms of the floor, in the zip as Lambda "
          f"loads it): {result}** ({and_join(f'{c.subject}: {c.value:+.0f} ms' for c in checks)}).\n")
    split_section(w, runs, checks[0].limit if checks else None)
    rows = coldstart_findings.zip_before_after(cold, coldstart_findings.zip_coldstart_before())
    if rows:
        w("Before and after in the zips (*before* is `bench/baseline/coldstart-before-issue22.json`, this section "
          "as measured at the commit before issue 22's handler-import work; each run's floor is its own, so "
          "*over the floor* is what compares across runs on a shared machine):\n")
        w("| Function | Zips | Init before | Init now | Over the floor before | Over the floor now | Over the floor: change |")
        w("|---|---|---:|---:|---:|---:|---:|")
        for where, b in rows:
            so = f"{-b.saved_over_floor_ms:+.0f} ms" if b.saved_over_floor_ms is not None else "-"
            w(f"| {b.function} | `{where}` | {b.before_ms:.0f} ms | {b.after_ms:.0f} ms | "
              f"{_ms(b.before_over_floor_ms, True)} | {_ms(b.after_over_floor_ms, True)} | {so} |")
        w("")


def split_section(w: Write, runs: list[dict[str, Any]], limit: float | None) -> None:
    """What of each init over the floor is the libraries the handler imports, and what is Loom's own."""
    rows = [(entry, function, r) for entry in runs for function, r in entry["functions"].items()
            if r.get("ok") and r.get("libraries_over_floor_ms") is not None and r.get("own_ms") is not None]
    if not rows:
        return
    w("Where the time over the floor goes, in the zips: the *libraries* module is the floor plus what the "
      "handler imports before engine-core (its Powertools utilities, Logger and Metrics, pydantic), in the "
      "handler's order and with the collector off, as the handler runs them, and one one-field pydantic model "
      "(pydantic loads most of itself, `importlib.metadata` included, when its first model class is built) "
      "(`bench/coldstart.py`, "
      "`HANDLER_LIBRARIES`); *Loom's own* is the handler minus that module, round by round: engine-core, the "
      "handler's setup and the workflows' registry.\n")
    budget = "" if limit is None else f" | Left for Loom's own within {limit:g} ms"
    w(f"| Function | Zip | Python | Over the floor | Libraries: over the floor | Loom's own{budget} |")
    w("|---|---|---|---:|---:|---:|" + ("---:|" if limit is not None else ""))
    for entry, function, r in rows:
        left = "" if limit is None else f" | {limit - r['libraries_over_floor_ms']:+.0f} ms"
        w(f"| {function} | `{r['zip']}` | {entry['python_version']} | {_ms(r.get('over_floor_ms'), True)} | "
          f"{r['libraries_over_floor_ms']:+.0f} ms | {r['own_ms']:+.0f} ms{left} |")
    w("")


def coldstart_section(w: Write, cold: dict[str, Any]) -> None:
    w("## Cold start\n")
    w(f"Command: {cmd('coldstart')} (zips from `make build` / `make build-local`). Figure: `docs/bench/import_time.png`.\n")
    w(f"`python -X importtime -c \"import <handler>\"` in a clean subprocess with a function's environment "
      f"(LOOM_*, POWERTOOLS_*, region, dummy credentials), cumulative time of the handler's own import line, "
      f"median of {cold['runs']} interleaved rounds (each round imports every floor and every handler once, so "
      "load from other work hits them alike; the minimum is kept beside the median). *Over the floor* is the "
      "median of the per-round differences.\n")
    zip_section(w, cold)
    w(f"In the dev venv (editable installs, sources compiled ahead; Python {cold['python']}), the measure the "
      "issue-15 baseline below was taken with:\n")
    w("| Function | Handler module | Dev venv import (min) | Floor: boto3 + its clients | Over the floor | "
      "Process wall (interpreter incl.) | Largest self times (dev venv) |")
    w("|---|---|---:|---:|---:|---:|---|")
    for function, r in cold["venv"].items():
        if not r.get("ok"):
            w(f"| {function} | `{r['module']}` | fails: {r.get('error', '?')} | | | | |")
            continue
        floor = (f"{r['floor_ms']:.0f} ms ({', '.join(r.get('clients', []))})" if r.get("floor_ms") is not None
                 else "-")
        parts = ", ".join(f"{name} {ms:.0f} ms" for name, ms in r.get("by_package_ms", [])[:4])
        low = f" ({r['import_ms_min']:.0f})" if r.get("import_ms_min") else ""
        w(f"| {function} | `{r['module']}` | {r['import_ms']:.0f} ms{low} | {floor} | "
          f"{_ms(r.get('over_floor_ms'), True)} | {r['process_wall_ms']:.0f} ms | {parts} |")
    w("")
    w("| Zip | Size | Unpacked | Files |")
    w("|---|---:|---:|---:|")
    for kind in ("lambda", "local"):
        for z in cold["zips"].get(kind, []):
            w(f"| `{z['zip']}` | {z['bytes'] / 1e6:.2f} MB | {z['unpacked_bytes'] / 1e6:.1f} MB | {z['files']} |")
    if not cold["zips"].get("lambda") and not cold["zips"].get("local"):
        w("| (no zips: `make build` / `make build-local` did not run) | | | |")
    w("")
    c = coldstart_findings.cold_start(cold)
    missed = [x.subject for x in c.checks if not x.ok]
    if not c.checks:
        result = "no handler imported"
    elif missed:
        result = f"missed by {and_join(missed)}" if len(missed) < len(c.checks) else "missed by every handler"
    else:
        result = "met by every handler"
    parts = []
    if c.floor_ms:
        parts.append(f"`import boto3` plus creating the clients a handler creates at import takes {c.floor_ms:.0f} ms "
                     f"on its own here (median, same environment): {'over' if c.floor_over_budget else 'under'} "
                     "the budget by itself")
    if c.largest_self:
        parts.append("the largest self time is " + and_join(f"{pkg} in the {f} ({ms:.0f} ms)"
                                                            for f, pkg, ms in c.largest_self))
    if c.compiled_saving_ms is not None:
        parts.append(f"the zips' bytecode {'saves' if c.compiled_saving_ms > 0 else 'costs'} "
                     f"{abs(c.compiled_saving_ms):.0f} ms per init on average against the same zip's sources (Lambda's "
                     "code directory is read-only, so a zip without bytecode compiles it on every cold start)")
    w(f"**Against the target (handler import under {TARGET_IMPORT_MS:g} ms on this machine, dev venv): {result}.** "
      + ("; ".join(parts) + "." if parts else "") + "\n")
    floor_section(w, cold)
    w("Each handler runs its init with the garbage collector off and freezes what init built at its end "
      "(`engine_core.adapters.lambda_runtime.init_done`): a cold start allocates and keeps, so every collection "
      "during it was wasted work, and the frozen objects are never scanned again, so the first invocation does "
      "not pay the skipped collections instead. The floor module leaves the collector on, as any function that "
      "does nothing about it would: part of what the handlers save over it is the collections boto3's own "
      "import no longer triggers inside theirs. The handlers' boto3 clients come from one session whose "
      "loader lists only the services Loom makes clients for (`engine_core.adapters.clients`): making a "
      "client, botocore first checks that its service exists by listing every service folder it ships "
      "(400-odd, once for the model and once for the endpoint rules), which the floor's clients pay and "
      "Loom's skip. The worker answers its SQS batch and the control plane matches its routes themselves "
      "(`engine_core.adapters.sqs_records.answer_batch`, `loom_control_plane.app`): Powertools' batch "
      "utility and its resolver each load `asyncio` and every event data class (the resolver also every "
      "resolver it has: AppSync, Bedrock agents, VPC Lattice) for a loop of a few lines.\n")
    if missed or [x for x in coldstart_findings.zip_floor_checks(cold) if not x.ok]:
        w("What is left over the floor: the libraries (the *libraries* column): Powertools' Logger and "
          "Metrics load jmespath and their formatters, and pydantic's first model loads most of pydantic, its "
          "plugin loader and `importlib.metadata` with it; and Loom's own: the engine-core modules a handler "
          "runs (on Python 3.12 each frozen dataclass compiles its generated methods at import), the models its "
          "first invocation reads (the execution, its records, the step message, the settings), and the "
          "workflows' modules and input models (here the examples'). Already off the cold path: `import "
          "engine_core` loads each name on first use, a runtime builds only the parts its function uses (the "
          "sweeper's never imports the step path), the models no cold path needs (replies, requests, the "
          "operator's and the events' records, the schedules) are built on first use, the schedule expression "
          "parser loads only where schedules are deployed, and init runs with the collector off. Creating the "
          "boto3 clients on the first invocation instead would move their cost, not remove it (the init phase "
          "is billed the same), unless paired with provisioned concurrency or SnapStart. This machine is shared "
          "(2 cores): the rounds are interleaved so load hits every column alike, and the minimum is kept beside "
          "the median.\n")


def floor_section(w: Write, cold: dict[str, Any]) -> None:
    """Issue 15's target (within 100 ms of the floor) and the before/after of its changes, both computed."""
    checks = coldstart_findings.floor_checks(cold)
    if not checks:
        return
    missed = [c for c in checks if not c.ok]
    if not missed:
        result = "met by every handler"
    elif len(missed) == len(checks):
        result = "missed by every handler"
    else:
        result = f"missed by {and_join(c.subject for c in missed)}"
    limit = checks[0].limit
    w(f"**Against the target (handler import within {limit:g} ms of the floor, side by side in one run, dev venv): {result}** "
      f"(over the floor: {and_join(f'{c.subject} {c.value:+.0f} ms' for c in checks)}).\n")
    rows = coldstart_findings.before_after(cold, coldstart_findings.coldstart_before())
    if not rows:
        return
    w("Before and after (dev venv; *before* is `bench/baseline/coldstart-before-issue15.json`, the same "
      "measurement of the handlers at the commit before issue 15; *now* includes everything since, other work "
      "too; each run's floor is its own, so *over the floor* is what compares across runs on a shared machine):\n")
    w("| Function | Import before | Import now | Over the floor before | Over the floor now | Over the floor: change |")
    w("|---|---:|---:|---:|---:|---:|")
    for b in rows:
        ob = f"{b.before_over_floor_ms:+.0f} ms" if b.before_over_floor_ms is not None else "-"
        oa = f"{b.after_over_floor_ms:+.0f} ms" if b.after_over_floor_ms is not None else "-"
        so = f"{-b.saved_over_floor_ms:+.0f} ms" if b.saved_over_floor_ms is not None else "-"
        w(f"| {b.function} | {b.before_ms:.0f} ms | {b.after_ms:.0f} ms | {ob} | {oa} | {so} |")
    w("")


def method(w: Write) -> None:
    w("## Method and caveats\n")
    w("- Capacity rules (`bench/capacity.py`, checked against the DynamoDB Developer Guide: *DynamoDB item sizes "
      "and formats*, *read and write operations*, *transactions: capacity management*, *GSI provisioned "
      "throughput*): item size = attribute names + values; 1 write unit per started KB of the larger of the item "
      "before and after; a refused conditional write still costs, sized on the existing item; reads 1 unit per "
      "started 4 KB (half for eventually consistent; a Query sums the items it examined); transactions x2; a "
      "GSI costs 1 write to add or remove an item and 2 when its key changes, KEYS_ONLY entries are < 1 KB. "
      "Whether index writes caused by a transaction are doubled is not stated by AWS; they are counted once.\n"
      "- Requests are counted in the client (botocore events), so SDK retries would show as `RetryAttempts` "
      "(none occurred on moto). The side client that reads item sizes is not instrumented.\n"
      "- The in-process run uses the real `Engine`, `DynamoStore`, `SqsQueue`, and the control plane's "
      "`Engine.start`, but not the Lambda handlers; Lambda invocations are counted by the bench's poller. The "
      "local-runtime section (when measured) runs the deployed zips.\n"
      "- Dollar figures exclude data transfer, CloudWatch Logs/metrics, DynamoDB storage and the free tiers.\n"
      "- Every verdict and comparison in this report is computed from the results (`bench/report/findings.py`, `bench/report/coldstart_findings.py`); "
      "`bench/tests/test_report.py` checks that altered results change the words.\n")
