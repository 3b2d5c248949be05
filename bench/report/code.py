"""The report's section on code-first workflows beside step lists (``bench/code.py``)."""

from __future__ import annotations

from typing import Any

from ._fmt import Write, cmd


def code_section(w: Write, results: dict[str, Any]) -> None:
    from ..code import verdict

    w("## Code-first beside step lists\n")
    w(f"Command: {cmd('code')}. The same steps ({results['result_bytes']:,} B results) written both ways: a "
      "`@workflow` step list and an `engine_core.durable` function. On the wire: the real engine on DynamoDB and "
      "SQS over moto, marginal figures per step (5 steps minus 1, divided by 4). Engine CPU: the memory store, "
      "`time.process_time` per step, median of the runs.\n")
    w("| per step | step list | code-first | code-first / step list |")
    w("|---|---:|---:|---:|")
    for name, v in verdict(results).items():
        unit = " us" if name.startswith("cpu") else ""
        w(f"| {name.replace('aws_requests', 'AWS requests').replace('write_units', 'write units').replace('rcu', 'read units')} "
          f"| {v['steps']:.2f}{unit} | {v['code']:.2f}{unit} | {v['ratio']:.2f}x{'' if v['within'] else ' (over 10%)'} |")
    w("")
    w("Requests, write units and messages per step are the same by construction (a step's record, then one "
      "conditional write that moves on and claims the next call), and `functional/test_durable_faults.py` "
      "checks it. CPU differs where a delivery starts: a code-first delivery reads its whole history and "
      "replays every recorded call (decoding its value) before it runs the next, so the more steps each "
      "delivery finds already recorded (long histories, or one step a delivery), the more it costs; a step "
      "list reads from its latest checkpoint. Chained deliveries (100 steps each by default) keep replays "
      "rare.\n")
