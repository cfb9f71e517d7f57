"""Turn what a trial process left behind into exactly one status. Pure function, table-tested."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "oom", "timeout", "crashed", "error", "diverged", "interrupted")
CHILD_STATUSES = ("ok", "oom", "error", "diverged")


@dataclass
class Outcome:
    status: str
    detail: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> dict[str, float]:
        return {k: v for k, v in self.result.get("metrics", {}).items() if isinstance(v, (int, float))}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def classify(returncode: int | None, result_text: str | None, *, timed_out: bool = False,
             interrupted: bool = False, timeout_s: float | None = None,
             log_tail: str | None = None) -> Outcome:
    """``returncode`` is negative for a signal, as ``subprocess`` reports it."""
    if interrupted:
        return Outcome("interrupted", "the orchestrator was stopped during this trial")
    if timed_out:
        return Outcome("timeout", f"no result within timeout_s={timeout_s:g}; process group killed"
                       if timeout_s is not None else "timed out; process group killed")
    if result_text is not None:
        try:
            result = json.loads(result_text)
        except ValueError as exc:
            return Outcome("error", f"the trial wrote an unreadable result file ({exc.__class__.__name__}: {exc})")
        if not isinstance(result, dict) or result.get("status") not in CHILD_STATUSES:
            got = result.get("status") if isinstance(result, dict) else type(result).__name__
            return Outcome("error", f"the trial's result file has no valid status (got {got!r})")
        return Outcome(result["status"], result.get("detail"), result)
    if returncode is not None and returncode < 0:
        name = signal_name(-returncode)
        hint = " (on macOS usually the memory killer; on Linux possibly the OOM killer)" \
            if -returncode == signal.SIGKILL else ""
        return Outcome("crashed", f"killed by {name}{hint}", {"signal": name})
    if returncode:
        tail = f": {log_tail}" if log_tail else ""
        return Outcome("error", f"exited with code {returncode} without a result{tail}")
    return Outcome("error", "exited without writing a result")
