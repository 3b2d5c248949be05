"""Step kinds: what one position in a workflow does when the execution reaches it.

Each kind is one module with one class behind the small protocol below. The engine reads and claims
the execution, then hands the step to its kind; the kind runs it and ends in one of the engine's
moves (advance, retry, sleep, fail). Adding a kind adds a module here and a marker in the registry,
not branches across the engine, the fingerprint, ``describe``, the timers and the sweeper.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..outcome import Outcome
    from ..step_run import StepRun


class StepKind(Protocol):
    kind: str
    """The name in ``describe`` and the history (``task``, ``sleep``)."""

    def shape(self) -> list[Any]:
        """What the workflow fingerprint includes of this step (changing it changes the fingerprint)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Extra keys for ``GET /workflows``."""
        ...

    def needs_invocation_time(self) -> bool:
        """True when running it needs the step's timeout budget inside the invocation."""
        ...

    def run(self, run: StepRun) -> Outcome:
        """Run the step at ``run.execution.current_step`` and end in one of ``run``'s moves."""
        ...


from .fanout import FanOutKind  # noqa: E402
from .sleep import SleepKind  # noqa: E402
from .task import TaskKind  # noqa: E402
from .wait import WaitKind  # noqa: E402

__all__ = ["FanOutKind", "SleepKind", "StepKind", "TaskKind", "WaitKind"]
