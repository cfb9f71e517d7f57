"""Turn what a trial process left behind into exactly one status. Pure function, table-tested."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "oom", "swapped", "timeout", "crashed", "error", "diverged", "interrupted")
CHILD_STATUSES = ("ok", "oom", "swapped", "error", "diverged")

# What each status means to the study (one place, so the loop, the report and recovery agree):
RESULT_STATUSES = ("ok", "oom", "swapped", "skipped", "timeout", "crashed", "diverged")
"""Final: they say something about the configuration, which is not run again (unless asked with
``--retry``) and counts toward ``n_trials``."""
RETRIED = ("error",)
"""Not final: the user's code or environment failed (an exception, a non-zero exit, an unreadable
result). Retried once on each later invocation; never counts toward ``n_trials``."""
RUN_AGAIN = ("interrupted",) + RETRIED
"""A configuration whose last attempt ended so runs again on the next invocation (without
``--retry``): cut off, or failed in the user's code."""
COUNTED_FAILURES = ("error", "timeout", "diverged")
"""Failures that count toward ``search.max_failures`` (with crashes other than SIGKILL, see
``counts_as_failure``); running out of memory never does."""
INFEASIBLE = ("oom", "swapped", "skipped", "crashed")
"""Told as PRUNED with a violated ``fits_in_memory`` constraint: no invented objective value."""
MEMORY_BOUNDARY = ("oom", "swapped")
"""Evidence for OOM-aware skipping: a configuration that needs at least as much memory fails too."""

# The detail of an ``interrupted`` trial, by who cut it off (both run again, ``RUN_AGAIN``):
INTERRUPTED_DETAIL = "the orchestrator was stopped during this trial"
"""Ctrl-C or SIGTERM: this orchestrator killed the trial and recorded it."""
DIED_DETAIL = "the orchestrator died during this trial; its configuration is run again"
"""A killed orchestrator left it RUNNING; the next start recorded it (``store/recovery``)."""


def counts_as_failure(status: str, result: dict[str, Any]) -> bool:
    """Whether a trial's outcome counts toward ``search.max_failures``: a SIGKILL is usually the
    memory killer (a boundary, like an OOM), any other crash is a failure."""
    return status in COUNTED_FAILURES or (status == "crashed" and result.get("signal") != "SIGKILL")


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
        return Outcome("interrupted", INTERRUPTED_DETAIL)
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
