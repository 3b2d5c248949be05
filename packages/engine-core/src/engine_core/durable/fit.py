"""Whether a code-first call can ever run, judged before any attempt: a call no delivery can run fails the
execution at once, naming the call and the numbers, instead of being put back on the queue at every delivery.

- ``unfit_call``: its budget (``timeout_s``, or the decorator's ``step_timeout_s``) and the time margin are
  over the worker's timeout, whatever comes before it.
- ``never_fits``: the budget fits the worker's timeout, but not after the function's own code before the call.
  A step list's delivery reaches its step a few milliseconds in; a function reaches its call after the code
  before it (the replay of the recorded calls and the code between them), which runs again in every delivery.
  When the stretch of that code since the last call the engine ran (or since the delivery's run began), plus
  the budget and the margin, is over the worker's timeout, no delivery has that much time: the check is asked
  once a delivery found too little time left, and only with the system clock (the stretch is real time). A
  ``parallel``/``map`` is checked with its branches' budget, each branch's delivery replaying the function to it
  first: the fan-out asks (``StepOps.branch_room``, ``CodeRun.branch_room`` here) before it begins and at each
  reconcile of its step, while branches are left to run, and so does a branch's delivery that finds too little
  time left after its replay to the fan-out.
- ``undo_never_fits``: the same for an undo, after the replay that says what to undo.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from ..clock import SystemClock
from ..model import ErrorInfo
from ..settings import UNFIT_REMEDY, unfit_budget
from ..steps import StepDef
from . import _current

CODE_BEFORE_REMEDY = ("Move the slow code before the call into a step (a step's time is its own, not the next call's), "
                      "lower the step's timeout_s, or raise the worker's timeout (Terraform: worker_timeout_s); "
                      "then redrive")


def unfit_call(run: Any, d: StepDef) -> ErrorInfo | None:
    """A call of ``run`` (a ``CodeRun``) whose budget no delivery can fit (``timeout_s`` or ``step_timeout_s``
    over the worker's timeout), or None."""
    if not d.kind.runs_bodies():
        return None
    why = unfit_budget(run.settings, run.life.budget(run.wf, d))
    if why is None:
        return None
    return ErrorInfo(code="step_timeout_too_long", step_index=d.index, step_name=d.name, message=(
        f"position {d.index}, {d.kind.kind} {d.name!r}, has {why}, and the worker's timeout is "
        f"{run.settings.function_timeout_s:g} s (LOOM_FUNCTION_TIMEOUT_S): no delivery can run it. {UNFIT_REMEDY}; "
        "then redrive"))


def never_fits(run: Any, timeout_s: float, branches: bool = False) -> ErrorInfo | None:
    """The current call of ``run``, which this delivery has too little time left for, when no delivery could
    have enough: the function's own code before it, its ``timeout_s`` budget and the margin are more than the
    worker's timeout (``branches``: its branches', each delivered after a replay to it). None when a fresh
    delivery may run it (or nothing says: no system clock, no timeout known, not the function's own run)."""
    replay, ceiling = _current.RUN.get(), run.settings.function_timeout_s
    if ceiling is None or run.execution.compensating or not isinstance(run.life.clock, SystemClock):
        return None
    if replay is not None and replay.stop_at is None:
        code_s = replay.own_code_s()
    elif replay is None and branches and run.reached_s is not None:
        code_s = run.reached_s  # a branch's delivery, after its replay to the fan-out
    else:
        return None
    margin_s = run.settings.time_margin_ms / 1000
    needed = code_s + timeout_s + margin_s
    if needed <= ceiling:
        return None
    d = run.step
    whose, it = ("its branches'", "a branch of it") if branches else ("its", "it")
    return ErrorInfo(code="step_timeout_too_long", step_index=d.index, step_name=d.name, message=(
        f"position {d.index}, {d.kind.kind} {d.name!r}, comes after {code_s:.1f} s of the function's own code "
        f"(what ran since the call before it, the replay included); with {whose} {timeout_s:g} s budget and the "
        f"{margin_s:g} s margin it needs {needed:.1f} s, and the worker's timeout is {ceiling:g} s "
        f"(LOOM_FUNCTION_TIMEOUT_S): no delivery can run {it}. {CODE_BEFORE_REMEDY}"))


UNDO_REMEDY = ("move the slow code into a step(), or lower the step's timeout_s (its undo's budget), or raise the worker's "
               "timeout (Terraform: worker_timeout_s), and deploy; then a redrive goes on undoing them")


def undo_never_fits(run: Any, replay: Any) -> str | None:
    """What is wrong when the undo at the current position of ``run`` (compensating) cannot fit any delivery after
    ``replay``, the replay that just said what to undo (the function's own code up to the failed position runs
    again in every delivery that undoes); None when it may fit (or nothing says, as for ``never_fits``)."""
    ceiling = run.settings.function_timeout_s
    d = run.plan.called(run.execution.current_step)
    if ceiling is None or d is None or d.compensate is None or not isinstance(run.life.clock, SystemClock):
        return None
    budget = d.compensate_timeout_s or run.life.budget(run.wf, d)
    replay_s, margin_s = monotonic() - replay.began, run.settings.time_margin_ms / 1000
    needed = replay_s + budget + margin_s
    if needed <= ceiling:
        return None
    return (f"the undo of position {d.index}, {d.name!r}, comes after the replay that says what to undo, {replay_s:.1f} s "
            f"of the function's own code up to position {replay.stop_at}; with the undo's {budget:g} s budget and the "
            f"{margin_s:g} s margin it needs {needed:.1f} s, and the worker's timeout is {ceiling:g} s "
            "(LOOM_FUNCTION_TIMEOUT_S): no delivery can run it")
