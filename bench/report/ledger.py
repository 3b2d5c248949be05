"""The cost ledger section: each execution's ledger against the wire, and what the ledger itself costs."""

from __future__ import annotations

from typing import Any

from ._fmt import Write, cmd


def _pct(x: float) -> str:
    return "exact" if x == 0 else f"{x * 100:+.1f}%"


def ledger_section(w: Write, r: dict[str, Any]) -> None:
    w("## The cost ledger against the wire\n")
    w(f"Command: {cmd('ledger')}.\n")
    w(f"{r['executions']} executions of {r['n_steps']} steps each per case, through the real engine on DynamoDB and "
      "SQS over moto, with the bench's ESM poller. Each execution's ledger (`cost` on `GET /executions/{id}`, read "
      "from its item) is summed and set beside what the wire recorder saw the same deliveries do: DynamoDB calls, "
      "the `ConsumedCapacity` the service returned for them, and the step messages sent. The check passes when "
      f"each is within {r['tolerance'] * 100:g}%.\n")
    w("| Case | deliveries | requests: ledger / wire | units: ledger / reported on the wire | messages: ledger / "
      "sent | within 5% |")
    w("|---|---:|---|---|---|---|")
    for name, c in r["cases"].items():
        led, wire, off = c["ledger"], c["wire"], c["off_by"]
        w(f"| {name} | {c['deliveries']} | {led['requests']} / {wire['requests']} ({_pct(off['requests'])}) | "
          f"{led['units']:g} / {wire['units']:g} ({_pct(off['units'])}) | {led['messages']} / {wire['messages']} "
          f"({_pct(off['messages'])}) | {'yes' if c['within_tolerance'] else '**no**'} |")
    w("")
    first = next(iter(r["cases"].values()))
    w(f"The ledger carries the units DynamoDB returns. moto's are not faithful (see the top of this page): the "
      f"units the bench computes from item sizes for the same calls are {first['wire']['units_by_size_rules']:g} "
      f"in the first case, where moto reported {first['wire']['units']:g}. On AWS the returned units are the "
      "billed ones.\n")
    bytes_ = r["item_bytes"]
    cpu = r["cpu"]
    w("What the ledger costs:\n")
    w("| | without the ledger | with it | added |")
    w("|---|---:|---:|---:|")
    for label, b in bytes_.items():
        w(f"| execution item, {label} (bytes, DynamoDB's size rules) | {b['without']} | {b['with']} | {b['added']} |")
    w(f"| engine CPU per step, {cpu['steps']}-step execution on the memory store (us, median of {cpu['repeats']} "
      f"interleaved runs) | {cpu['off_us']:.0f} | {cpu['on_us']:.0f} | {cpu['added_us']:+.0f} |")
    if "min_on_us" in cpu:
        w(f"| the same, fastest run of each | {cpu['min_off_us']:.0f} | {cpu['min_on_us']:.0f} | "
          f"{cpu['min_added_us']:+.0f} |")
    w("")
    w(f"Runs (us per step), ledger off: {', '.join(str(x) for x in cpu['runs_off_us'])}; on: "
      f"{', '.join(str(x) for x in cpu['runs_on_us'])}. The ledger makes no request of its own: its counts ride on "
      "the execution item's writes (tests: `test_ledger_on_or_off_makes_the_same_store_writes`, "
      "`test_ledger_on_dynamodb_adds_no_request_of_its_own`).\n")
