"""The harness protocol: every line that crosses the boundary between the orchestrator
(``orchestrator/launch``) and a trial process (``child.py``, ``forkserver.py``) is written and read
here, and nowhere else. Standard library only: the orchestrator imports it and never imports
torch.

A trial process is ``python -m orchestrator.harness`` with one of these first arguments:
``CONFIG.json`` (one trial, cold), ``--serve EXPERIMENT`` (a pre-started interpreter) or
``--fork-server EXPERIMENT`` (Linux: one import, a forked process per trial). It is started with
``ORCHESTRATE_STATUS_FD`` (the write end of its status pipe), ``ORCHESTRATE_PARENT_PID`` (the
process whose death it must not outlive: ``child.watch_parent``) and, on a CPU slot,
``ORCHESTRATE_CPU_CORES``. Two channels then:

- *Orders*, one line each on the process's stdin, from the orchestrator. A ``--serve`` interpreter
  reads the path of its trial's configuration, then ``go`` (it may open its timed window). A fork
  server reads JSON: ``{"fork": CONFIG, "log": LOG}`` (fork a trial; its stdout and stderr go to
  LOG), ``{"probe": REQUEST, "log": LOG}`` (fork the experiment's probe: ``probe.py``; it writes
  its answers beside REQUEST, ``probe_answer``) and ``{"go": PID}``, which it passes on to that
  trial as ``go``. An empty line (or EOF) means leave.
- *Status lines*, on the status pipe, from the process: ``ready`` (its imports are done),
  ``window`` (its warm-up is done; it waits for ``go``), ``result`` (its result file is written).
  A fork server says ``ready`` for itself, then ``PID forked`` per trial (or probe); its trials
  say ``PID window`` and ``PID result`` (a probe: ``PID result`` after each answer file); and once
  it has reaped one (its memory is free) the server
  says ``PID exited CODE MAXRSS_KIB``: the exit code as ``os.waitstatus_to_exitcode`` gives it
  (negative: killed by that signal) and the peak RSS as ``wait4`` reports it (KiB on Linux).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

SERVE_FLAG = "--serve"
FORK_SERVER_FLAG = "--fork-server"
STATUS_FD_ENV = "ORCHESTRATE_STATUS_FD"
PARENT_PID_ENV = "ORCHESTRATE_PARENT_PID"
CPU_CORES_ENV = "ORCHESTRATE_CPU_CORES"


class Word(Enum):
    """What a status line says."""

    READY = "ready"
    WINDOW = "window"
    RESULT = "result"
    FORKED = "forked"
    EXITED = "exited"


ALONE = (Word.READY, Word.WINDOW, Word.RESULT)
"""The words a process says of itself."""
TAGGED = (Word.FORKED, Word.WINDOW, Word.RESULT, Word.EXITED)
"""The words said of a forked trial, after its pid."""


@dataclass(frozen=True)
class Status:
    """One line on a status pipe."""

    word: Word
    pid: int | None = None
    """The forked trial the line is about; None: the process that writes it."""
    code: int | None = None
    """``EXITED``: the trial's exit code (negative: the signal that killed it)."""
    maxrss_kib: int | None = None
    """``EXITED``: the trial's peak resident set size, as the server's ``wait4`` gives it."""


def encode_status(status: Status) -> str:
    """The line for ``status``, with its newline."""
    tag = "" if status.pid is None else f"{status.pid} "
    tail = f" {status.code} {status.maxrss_kib}" if status.word is Word.EXITED else ""
    return f"{tag}{status.word.value}{tail}\n"


def decode_status(line: str) -> Status | None:
    """What a status line says; None for a line that is no status (the launcher ignores it)."""
    parts = line.split()
    pid = int(parts.pop(0)) if parts and parts[0].isdigit() else None
    word = next((w for w in (ALONE if pid is None else TAGGED) if parts and parts[0] == w.value), None)
    if word is None:
        return None
    args = parts[1:]
    if word is not Word.EXITED:
        return None if args else Status(word, pid)
    if len(args) != 2 or not all(a.lstrip("-").isdigit() for a in args):
        return None
    return Status(word, pid, int(args[0]), int(args[1]))


class Kind(Enum):
    """What an order asks for."""

    RUN = "run"
    """Run the trial whose configuration is at ``config`` (a fork server: fork it)."""
    PROBE = "probe"
    """A fork server: fork the experiment's probe, whose request is at ``config``."""
    GO = "go"
    """Open the timed window."""
    LEAVE = "leave"
    """Exit (a fork server: without waiting for its trials)."""


@dataclass(frozen=True)
class Order:
    """One line on a trial process's stdin."""

    kind: Kind
    config: str | None = None
    """``RUN``: the path of the trial's configuration file; ``PROBE``: of the probe's request."""
    log: str | None = None
    """``RUN`` and ``PROBE``, to a fork server: the file the forked process's stdout and stderr go to."""
    pid: int | None = None
    """``GO``, to a fork server: the trial that may open its window."""


GO = Order(Kind.GO)
LEAVE = Order(Kind.LEAVE)


def encode_order(order: Order, server: bool = False) -> str:
    """The line for ``order``, with its newline; ``server``: to a fork server (JSON), else to a
    ``--serve`` interpreter or a forked trial."""
    if order.kind is Kind.LEAVE:
        return "\n"
    if not server:
        return f"{order.config}\n" if order.kind is Kind.RUN else "go\n"
    if order.kind is Kind.RUN:
        return json.dumps({"fork": order.config, "log": order.log}) + "\n"
    if order.kind is Kind.PROBE:
        return json.dumps({"probe": order.config, "log": order.log}) + "\n"
    return json.dumps({"go": order.pid}) + "\n"


def decode_order(line: str, server: bool = False) -> Order:
    """The order a line of stdin gives (``server``: as a fork server reads it). EOF (``""``) and
    an empty line mean leave. A fork server's line that is no order raises ``ValueError``."""
    text = line.strip()
    if not text:
        return LEAVE
    if not server:
        return GO if text == "go" else Order(Kind.RUN, config=text)
    order = json.loads(text)
    if isinstance(order, dict) and isinstance(order.get("go"), int):
        return Order(Kind.GO, pid=order["go"])
    for key, kind in (("fork", Kind.RUN), ("probe", Kind.PROBE)):
        if isinstance(order, dict) and isinstance(order.get(key), str) and isinstance(order.get("log"), str):
            return Order(kind, config=order[key], log=order["log"])
    raise ValueError(f"not an order for a fork server: {text!r}")


PROBE_ANSWERS = ("probe", "smoke")
"""A forked probe's answers, in the order it writes them: the experiment checked and the device
resolved (``harness/probe.py``'s ``probe``), then, when asked for, the smoke step's."""


def probe_answer(request: str, name: str) -> str:
    """Where a forked probe writes its answer ``name`` (one of ``PROBE_ANSWERS``), as JSON, for
    the request at ``request``: beside it (written under another name, then renamed)."""
    assert name in PROBE_ANSWERS, name
    return f"{request}.{name}.json"
