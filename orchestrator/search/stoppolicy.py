"""When a sweep stops proposing: its time limit, its patience, its failure budget, and the
search's own verdict that it is done (``planner``, with ``search.stop: auto``). One object, given
every result by the sweep loop; pure apart from the clock it is handed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.clip import clip
from orchestrator.errors import FailureBudgetExceeded
from orchestrator.outcome import Outcome
from orchestrator.spec.model import SearchSettings


@dataclass
class Failures:
    """Failures of this invocation that count toward ``search.max_failures``."""

    count: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    examples: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Status -> (the first such failure's detail, its log), for the closing line."""


EXAMPLE_WIDTH = 600
"""How much of the first failure's note the closing line keeps: a library's remedy comes after
its complaint (a script tour: LightningCLI's "set save_config_kwargs={'overwrite': True}" came
after 200 characters, cut, on a run where every trial failed that way)."""


class StopPolicy:
    def __init__(self, search: SearchSettings, started: float, best: float | None, work_dir: Path) -> None:
        """``started``: the loop's clock at its start; ``best``: the best objective value already in
        the study (None: none yet, or several objectives)."""
        self.search, self.started, self.best, self.work_dir = search, started, best, work_dir
        self.since_best = 0
        self.failures = Failures()
        self.stopped_because: str | None = None
        """Why proposing stopped before the budget was used (None: it was not)."""
        self.budget_error: FailureBudgetExceeded | None = None

    def proposing(self, now: float) -> bool:
        """Whether new trials may still be proposed (the ones in flight always finish)."""
        if self.stopped_because is None and self.budget_error is None:
            timeout_min, patience = self.search.timeout_min, self.search.patience
            if timeout_min is not None and now - self.started > timeout_min * 60:
                self.stopped_because = f"search.timeout_min={timeout_min:g} reached"
            elif patience is not None and self.since_best >= patience:
                self.stopped_because = f"no improvement in {self.since_best} trials (search.patience)"
        return self.stopped_because is None and self.budget_error is None

    def record(self, outcome: Outcome, best: float | None, log: Path) -> None:
        """A trial's final outcome, and the best objective value after it."""
        self.since_best = 0 if best is not None and best != self.best else self.since_best + 1
        self.best = best
        if not outcome.counts_as_failure():
            return
        f = self.failures
        f.count += 1
        f.by_status[outcome.status] = f.by_status.get(outcome.status, 0) + 1
        f.examples.setdefault(outcome.status, (clip(outcome.detail or "", EXAMPLE_WIDTH), str(log)))
        if f.count > self.search.max_failures and self.budget_error is None:
            self.budget_error = FailureBudgetExceeded(
                f"{f.count} trials failed (error, timeout, crash or divergence; OOM not counted), more "
                f"than search.max_failures={self.search.max_failures}. The study is saved: fix the cause "
                f"(see the trial logs in {self.work_dir}) and run the same command to resume")

    def done(self, why: str | None) -> None:
        """The search has nothing more to propose: ``why`` (None: the budget is used up)."""
        if self.stopped_because is None and why:
            self.stopped_because = why
