"""Step kinds: what one position in a workflow does when the execution reaches it, and what an
operator's action or an outside input means there.

Each kind is one module behind the protocol in ``engine_core.protocol`` (``StepKind``): task, sleep,
wait for an event, parallel/map (fan-out) and compensation. A kind imports that protocol, the model and
the definitions, never the engine, the step run, the operator, the registry or another kind. The
engine, the step run and the operator know kinds only through this table: ``current`` picks the kind
that answers for an execution now (the compensation kind while it compensates), ``ending`` is how a
final failure or a cancel ends it. Adding a kind adds a module and a line in ``KINDS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Execution
from ..protocol import Ending, StepKind
from ..steps import WorkflowDef
from .compensation import CompensationKind
from .fanout import FanOutKind
from .sleep import SleepKind
from .task import TaskKind
from .wait import WaitKind


@dataclass(frozen=True)
class KindTable:
    """Step kinds by the name a step's spec carries (``spec.kind``), plus the compensation phase."""

    kinds: dict[str, StepKind] = field(default_factory=dict)
    compensating: CompensationKind = field(default_factory=CompensationKind)

    def of_step(self, wf: WorkflowDef, index: int) -> StepKind | None:
        if not 0 <= index < len(wf.steps):
            return None
        return self.kinds.get(wf.steps[index].kind.kind)

    def current(self, wf: WorkflowDef | None, e: Execution) -> StepKind | None:
        """The kind that answers for the execution now; None when this deployment cannot say (the
        definition is not deployed, or its step list changed)."""
        if wf is None or wf.fingerprint != e.fingerprint:
            return None
        if e.compensating:
            return self.compensating
        return self.of_step(wf, e.current_step)

    @property
    def ending(self) -> Ending:
        return self.compensating


KINDS = KindTable({k.name: k for k in (TaskKind(), SleepKind(), WaitKind(), FanOutKind())})

__all__ = ["KINDS", "KindTable"]
