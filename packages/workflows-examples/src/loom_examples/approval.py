"""``expense_approval``: ask for an approval, wait for it (WAITING, costing nothing), then pay or not.

The first step hands a callback token (``ctx.callback_token("approved")``) to the approver: a real
workflow would email a link or post to a chat; this one returns it, so ``loom status`` shows it
(``approval_callback``). The approver answers with either

    loom send <execution_id> approved --data '{"approved": true, "approver": "ana"}'
    curl -X POST "$URL/callbacks/<approval_callback>" -d '{"data": {"approved": true}}'

An answer sent before the execution reaches the wait is kept and used when it gets there. With no
answer within ``APPROVAL_TIMEOUT_S`` the request is declined by default. The answer lands in the context
under the wait's name (``ctx["approval"]``), validated by ``ApprovalAnswer``: a sender cannot touch the
amount or any other key, and an answer without a boolean ``approved`` is refused when it is sent.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from engine_core import PermanentStepError, StepContext, wait_for_event, workflow

APPROVAL_TIMEOUT_S = 24 * 3600


class ExpenseInput(BaseModel):
    expense_id: str = Field(min_length=1)
    amount_cents: int = Field(gt=0)
    approver: str = Field(default="finance@example.com", description="Who is asked")


def request_approval(ctx: StepContext) -> dict[str, Any]:
    return {"approval_callback": ctx.callback_token("approved"), "asked": ctx["approver"]}


class ApprovalAnswer(BaseModel):
    """What an approver sends (``loom send ... approved --data ...``, or the callback link)."""

    approved: bool
    approver: str | None = None


def settle_expense(ctx: StepContext) -> dict[str, Any]:
    approved = ctx["approval"].get("approved")
    if not isinstance(approved, bool):
        raise PermanentStepError("the approval event needs a boolean 'approved'")
    return {"paid_cents": ctx["amount_cents"] if approved else 0, "decision": "paid" if approved else "declined",
            "approved_by": ctx["approval"].get("approver")}


@workflow("expense_approval")
class ExpenseApproval:
    steps = [
        request_approval,
        wait_for_event("approved", timeout=APPROVAL_TIMEOUT_S, default={"approved": False, "approver": None},
                       name="approval", model=ApprovalAnswer),
        settle_expense,
    ]
    input_model = ExpenseInput
    step_timeout_s = 10
