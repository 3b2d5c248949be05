"""A fake payment provider that honours idempotency keys, as real ones do.

A step body runs at least once: a worker can crash after charging and before the checkpoint, and
the redelivered message runs the body again. Passing ``ctx.idempotency_key`` to the provider is
what keeps that second run from charging twice. This ledger behaves like such a provider.

By default it lives in memory (one process: tests, one warm Lambda container). Set
``LOOM_EXAMPLES_LEDGER_PATH`` to a file to share it between processes (the local demo), with an
advisory lock around each charge.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

LEDGER_PATH_ENV = "LOOM_EXAMPLES_LEDGER_PATH"


@dataclass(frozen=True)
class Charge:
    charge_id: str
    idempotency_key: str
    order_id: str
    amount_cents: int


@dataclass(frozen=True)
class Refund:
    charge_id: str
    idempotency_key: str
    """The charge's own key: a charge is refunded at most once, however often the refund is asked for."""
    amount_cents: int


class IdempotencyKeyReusedError(ValueError):
    """The same key was sent with a different order or amount: a bug in the caller, never retried away."""


class PaymentLedger:
    """Charges keyed by idempotency key: a repeated key returns the first charge and moves no money.

    Example:
        >>> ledger = PaymentLedger()
        >>> first = ledger.charge("exec-1:1", order_id="o-1", amount_cents=1200)
        >>> ledger.charge("exec-1:1", order_id="o-1", amount_cents=1200) == first
        True
    """

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path) if path else None
        self._charges: dict[str, Charge] = {}
        self._refunds: dict[str, Refund] = {}
        self._lock = threading.Lock()
        self.requests = 0
        """Charge calls seen by this process, repeats included (tests compare it with the charges)."""

    @classmethod
    def from_env(cls) -> PaymentLedger:
        return cls(os.environ.get(LEDGER_PATH_ENV) or None)

    def charge(self, idempotency_key: str, *, order_id: str, amount_cents: int) -> Charge:
        with self._locked():
            self.requests += 1
            charges = self._load()
            existing = charges.get(idempotency_key)
            if existing is not None:
                if (existing.order_id, existing.amount_cents) != (order_id, amount_cents):
                    raise IdempotencyKeyReusedError(
                        f"idempotency key {idempotency_key!r} already charged order {existing.order_id} "
                        f"{existing.amount_cents} cents; refusing order {order_id} {amount_cents} cents"
                    )
                return existing
            charge = Charge(f"ch_{len(charges) + 1:06d}", idempotency_key, order_id, amount_cents)
            self._store(charge)
            return charge

    def refund(self, idempotency_key: str) -> Refund:
        """Refund the charge made under ``idempotency_key``; a repeat returns the first refund."""
        with self._locked():
            self.requests += 1
            charges = self._load()
            charge = charges.get(idempotency_key)
            if charge is None:
                raise KeyError(f"no charge under idempotency key {idempotency_key!r} to refund")
            refunds = self._load_refunds()
            if idempotency_key in refunds:
                return refunds[idempotency_key]
            refund = Refund(charge.charge_id, idempotency_key, charge.amount_cents)
            self._store(refund, refunds=True)
            return refund

    def refunds(self) -> list[Refund]:
        with self._locked():
            return list(self._load_refunds().values())

    def charges(self) -> list[Charge]:
        with self._locked():
            return list(self._load().values())

    def reset(self) -> None:
        with self._locked():
            self._charges.clear()
            self._refunds.clear()
            self.requests = 0
            for path in (self.path, self._refund_path):
                if path is not None and path.exists():
                    path.unlink()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if self.path is None:
                yield
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path.with_suffix(self.path.suffix + ".lock"), "a") as lock_file:
                fcntl.flock(lock_file, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _load(self) -> dict[str, Charge]:
        if self.path is None:
            return self._charges
        if not self.path.exists():
            return {}
        lines = self.path.read_text(encoding="utf-8").splitlines()
        charges = (Charge(**json.loads(line)) for line in lines if line.strip())
        return {c.idempotency_key: c for c in charges}

    @property
    def _refund_path(self) -> Path | None:
        return None if self.path is None else self.path.with_suffix(self.path.suffix + ".refunds")

    def _load_refunds(self) -> dict[str, Refund]:
        if self._refund_path is None:
            return self._refunds
        if not self._refund_path.exists():
            return {}
        lines = self._refund_path.read_text(encoding="utf-8").splitlines()
        refunds = (Refund(**json.loads(line)) for line in lines if line.strip())
        return {r.idempotency_key: r for r in refunds}

    def _store(self, charge: Charge | Refund, refunds: bool = False) -> None:
        if self.path is None:
            (self._refunds if refunds else self._charges)[charge.idempotency_key] = charge  # type: ignore[index]
            return
        path = self._refund_path if refunds else self.path
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(charge), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())


LEDGER = PaymentLedger.from_env()
"""The ledger the order_fulfillment workflow charges (tests inspect and reset it)."""
