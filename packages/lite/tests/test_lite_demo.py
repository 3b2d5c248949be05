"""``make demo-lite`` does what it says: a retry, the runtime process SIGKILLed inside the charge and a new one
resuming it, a durable sleep, the order completed and charged once (the payment ledger, not the engine, says
so)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_lite_runs_the_order_through_a_retry_a_sigkill_and_a_sleep_and_charges_once(tmp_path):
    # when
    done = subprocess.run([sys.executable, "-m", "loom_lite.demo", "--dir", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    # then
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "reserve_inventory: attempt 1 failed (RuntimeError: inventory service timed out" in out
    assert "was killed (signal 9) inside charge_payment" in out and "a new runtime process" in out
    assert "charge_payment: succeeded on attempt 2" in out and "durable sleep until" in out
    assert "execution COMPLETED" in out and "1 charge(s) for order" in out
    charges = [json.loads(x) for x in (tmp_path / "ledger.jsonl").read_text().splitlines() if x.strip()]
    assert len(charges) == 1 and charges[0]["idempotency_key"].endswith(":1")
