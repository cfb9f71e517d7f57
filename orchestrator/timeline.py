"""Wall-clock events of a command and its sweep: where the seconds go (``bench/overhead.py`` per
trial, ``bench/first_trial.py`` for the command's own start and end).

``ORCHESTRATE_TIMELINE=/path/events.jsonl`` makes the orchestrator append one JSON line per event
(``{"t": <time.time()>, "cpu": <this process's CPU seconds>, "event": "ask_end", "trial": 3}``);
the trial process records its own phases in its result file (``result["timeline"]``, the marks
of ``harness/marks.py``). Unset (always, outside the benchmarks) an event costs one dictionary
lookup, like ``faultpoints``.

The command's own marks (``COMMAND``), in the order a one-slot sweep from an empty folder reaches
them; several overlap by design (the probe, the imports and the stores run side by side), so
their order can differ:

- ``process_start``: the process was started (Linux: ``/proc/self/stat``; recorded by the CLI);
- ``cli_start``: Python and ``orchestrator.cli`` are imported, the command's code begins;
- ``probe_start``: the experiment probe is asked for (a fork server's child, or a process);
- ``imports_done``: MLflow and Optuna (and what their stores need) are imported, beside the probe;
- ``probe_answered``: the experiment is imported and checked, the device resolved;
- ``smoke_answered``: the smoke step (one training step) passed;
- ``stores_opened``: the study and the MLflow experiment exist (``created``: they were made now);
- ``loop_start``; ``start`` (trial 0): the first trial's process is forked or given its
  configuration; ``told`` (the last one): the last result is in the study;
- ``trials_stopped`` (where the verdict found trials in flight to end, and on every Ctrl-C or
  SIGTERM): every slot's trial process killed and reaped; ``loop_end``: the loop has nothing left
  to run;
- ``stores_closed``: MLflow has every record it takes (``converge.settle``), the parent run closed;
- ``summary_printed``: the summary is on stdout;
- ``exit``: the command is done; what is left is the interpreter's exit.
"""

from __future__ import annotations

import json
import os
import threading
import time

_lock = threading.Lock()

COMMAND = ("process_start", "cli_start", "probe_start", "imports_done", "probe_answered", "smoke_answered",
           "stores_opened", "loop_start", "start", "told", "trials_stopped", "loop_end", "stores_closed",
           "summary_printed", "exit")
"""The command's own marks (see the module); ``start`` and ``told`` are per trial."""


def event(name: str, trial: int | None = None, at: float | None = None, **extra: object) -> None:
    """Append one event (``at``: its wall-clock time, when not now)."""
    path = os.environ.get("ORCHESTRATE_TIMELINE")
    if not path:
        return
    line = json.dumps({"t": time.time() if at is None else at, "cpu": round(time.process_time(), 3),
                       "event": name, "trial": trial, **extra}) + "\n"
    with _lock, open(path, "a") as f:  # a writer thread records MLflow events: one line at a time
        f.write(line)


def process_started() -> float | None:
    """When this process was started (wall clock), from ``/proc`` (None elsewhere)."""
    try:
        ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def command_started() -> None:
    """The CLI's first marks: the process's start and now (imports done)."""
    if not os.environ.get("ORCHESTRATE_TIMELINE"):
        return
    started = process_started()
    if started is not None:
        event("process_start", at=started)
    event("cli_start")
