"""The harness protocol: every line that crosses the boundary between the orchestrator
(``orchestrator/launch``) and a trial process (``child.py``, ``forkserver.py``) is written and read
here, and nowhere else. Standard library only: the orchestrator imports it and never imports
torch.

A trial process is ``python -m orchestrator.harness`` with one of these first arguments:
``CONFIG.json`` (one trial, cold), ``--serve EXPERIMENT`` (a pre-started interpreter) or
``--fork-server EXPERIMENT`` (Linux: one import, a forked process per trial). It is started with
``ORCHESTRATE_STATUS_FD`` (the write end of its status pipe), ``ORCHESTRATE_PARENT_PID`` (the
process whose death it must not outlive: ``child.watch_parent``), on a CPU slot,
``ORCHESTRATE_CPU_CORES``, and for a pre-started process ``ORCHESTRATE_PRELOAD`` (the sweep's fixed
parameters, for the experiment's ``preload`` hook). Two channels then:

- *Orders*, one line each on the process's stdin, from the orchestrator. A ``--serve`` interpreter
  reads the path of its trial's configuration, then ``go`` (it may open its timed window). A fork
  server reads JSON: ``{"fork": CONFIG, "log": LOG}`` (fork a trial; its stdout and stderr go to
  LOG), ``{"probe": REQUEST, "log": LOG}`` (fork the experiment's probe: ``probe.py``; it writes
  its answers beside REQUEST, ``probe_answer``) and ``{"go": PID}``, which it passes on to that
  trial as ``go``; and, for a trial prepared ahead (``harness/prepared.py``), ``{"prepare": DEVICE}``
  (fork a process that initialises DEVICE, says ``PID ready`` and waits, its output the server's;
  with ``"context": false`` only DEVICE's driver, and ``{"context": PID}``, passed on to that
  process as ``{"context": true}``, makes the context later: it says ``PID ready`` again)
  then ``{"give": PID, "config": CONFIG, "log": LOG}``, which it passes on to that process as the
  line ``{"run": CONFIG, "log": LOG}``: its configuration, and the file its output goes to from
  then on. An empty line (or EOF) means leave.
- *Status lines*, on the status pipe, from the process: ``ready`` (its imports are done),
  ``window`` (its warm-up is done; it waits for ``go``), ``measured`` (its timed window is over
  and its figures are read from the device; the slot's next process may be prepared while it
  writes its result and exits), ``result`` (its result file is written).
  A fork server says ``ready`` for itself, then ``PID forked`` per trial (or probe); a prepared
  process says ``PID ready`` once its device is initialised; its trials
  say ``PID window``, ``PID measured`` and ``PID result`` (a probe: ``PID result`` after each
  answer file); and once it has reaped one (its memory is free) the server
  says ``PID exited CODE MAXRSS_KIB``: the exit code as ``os.waitstatus_to_exitcode`` gives it
  (negative: killed by that signal) and the peak RSS as ``wait4`` reports it (KiB on Linux).

Two files besides, in the trial's folder (``orchestrator/trialdir.py``): the orchestrator writes
the trial's configuration (``TrialConfig``, ``config.json``) and the trial writes its result
(``TrialResult``, ``result.json``). Each is a dataclass here with its ``encode_`` and ``decode_``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SERVE_FLAG = "--serve"
FORK_SERVER_FLAG = "--fork-server"
STATUS_FD_ENV = "ORCHESTRATE_STATUS_FD"
PARENT_PID_ENV = "ORCHESTRATE_PARENT_PID"
CPU_CORES_ENV = "ORCHESTRATE_CPU_CORES"
PRELOAD_ENV = "ORCHESTRATE_PRELOAD"
"""A pre-started process's fixed parameters (JSON), for the experiment's own ``preload`` hook
(``child.preload``): what every trial of the sweep will import, imported once per process."""


class Word(Enum):
    """What a status line says."""

    READY = "ready"
    WINDOW = "window"
    MEASURED = "measured"
    RESULT = "result"
    FORKED = "forked"
    EXITED = "exited"


ALONE = (Word.READY, Word.WINDOW, Word.MEASURED, Word.RESULT)
"""The words a process says of itself."""
TAGGED = (Word.FORKED, Word.READY, Word.WINDOW, Word.MEASURED, Word.RESULT, Word.EXITED)
"""The words said of a forked trial, after its pid (``ready``: a prepared one's device is initialised)."""


@dataclass(frozen=True)
class StatusLine:
    """One line on a status pipe."""

    word: Word
    pid: int | None = None
    """The forked trial the line is about; None: the process that writes it."""
    code: int | None = None
    """``EXITED``: the trial's exit code (negative: the signal that killed it)."""
    maxrss_kib: int | None = None
    """``EXITED``: the trial's peak resident set size, as the server's ``wait4`` gives it."""


def encode_status(status: StatusLine) -> str:
    """The line for ``status``, with its newline."""
    tag = "" if status.pid is None else f"{status.pid} "
    tail = f" {status.code} {status.maxrss_kib}" if status.word is Word.EXITED else ""
    return f"{tag}{status.word.value}{tail}\n"


def decode_status(line: str) -> StatusLine | None:
    """What a status line says; None for a line that is no status (the launcher ignores it)."""
    parts = line.split()
    pid = int(parts.pop(0)) if parts and parts[0].isdigit() else None
    word = next((w for w in (ALONE if pid is None else TAGGED) if parts and parts[0] == w.value), None)
    if word is None:
        return None
    args = parts[1:]
    if word is not Word.EXITED:
        return None if args else StatusLine(word, pid)
    if len(args) != 2 or not all(a.lstrip("-").isdigit() for a in args):
        return None
    return StatusLine(word, pid, int(args[0]), int(args[1]))


class Kind(Enum):
    """What an order asks for."""

    RUN = "run"
    """Run the trial whose configuration is at ``config`` (a fork server: fork it)."""
    PROBE = "probe"
    """A fork server: fork the experiment's probe, whose request is at ``config``."""
    GO = "go"
    """Open the timed window."""
    PREPARE = "prepare"
    """A fork server: fork a process for the next trial now, which initialises ``device`` (with
    ``context`` false, only its driver) and waits for its configuration (a ``RUN`` order with its
    ``pid``). With a ``pid``, to a fork server, or to a prepared process: make the context now."""
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
    """``GO``, to a fork server: the trial that may open its window; ``RUN``: the prepared process
    that runs it (None: fork one)."""
    device: str | None = None
    """``PREPARE``: the device the prepared process initialises (as a trial's ``device`` param)."""
    context: bool = True
    """``PREPARE``: the device's context too (on CUDA its memory), not only its driver."""


GO = Order(Kind.GO)
LEAVE = Order(Kind.LEAVE)


def encode_order(order: Order, server: bool = False) -> str:
    """The line for ``order``, with its newline; ``server``: to a fork server (JSON), else to a
    ``--serve`` interpreter or a forked trial."""
    if order.kind is Kind.LEAVE:
        return "\n"
    if not server:
        if order.kind is Kind.RUN and order.log is not None:  # to a prepared process: its log too
            return json.dumps({"run": order.config, "log": order.log}) + "\n"
        if order.kind is Kind.PREPARE:  # to a prepared process that started only the driver
            return json.dumps({"context": True}) + "\n"
        return f"{order.config}\n" if order.kind is Kind.RUN else "go\n"
    if order.kind is Kind.RUN and order.pid is not None:
        return json.dumps({"give": order.pid, "config": order.config, "log": order.log}) + "\n"
    if order.kind is Kind.RUN:
        return json.dumps({"fork": order.config, "log": order.log}) + "\n"
    if order.kind is Kind.PREPARE and order.pid is not None:
        return json.dumps({"context": order.pid}) + "\n"
    if order.kind is Kind.PREPARE:
        return json.dumps({"prepare": order.device, **({} if order.context else {"context": False})}) + "\n"
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
        if text.startswith("{"):  # to a prepared process: its context, or its configuration and its log
            handed = json.loads(text)
            if handed == {"context": True}:
                return Order(Kind.PREPARE)
            return Order(Kind.RUN, config=str(handed["run"]), log=str(handed["log"]))
        return GO if text == "go" else Order(Kind.RUN, config=text)
    order = json.loads(text)
    if isinstance(order, dict) and isinstance(order.get("go"), int):
        return Order(Kind.GO, pid=order["go"])
    if isinstance(order, dict) and isinstance(order.get("give"), int) and isinstance(order.get("config"), str) \
            and isinstance(order.get("log"), str):
        return Order(Kind.RUN, config=order["config"], log=order["log"], pid=order["give"])
    if isinstance(order, dict) and isinstance(order.get("context"), int) and not isinstance(order["context"], bool):
        return Order(Kind.PREPARE, pid=order["context"])
    if isinstance(order, dict) and isinstance(order.get("prepare"), str):
        return Order(Kind.PREPARE, device=order["prepare"], context=order.get("context") is not False)
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


# -- the trial's two files ---------------------------------------------------------------------


@dataclass(frozen=True)
class TrialSteps:
    """How long the trial measures (the spec's ``trial`` section)."""

    warmup_steps: int
    """Steps run, unmeasured, before the timed window."""
    measure_steps: int
    """The timed window's least number of steps."""
    min_measure_s: float
    """The timed window's least length, in seconds."""
    precision: float | None = None
    """Close the window before ``measure_steps`` once its ``throughput_ci95`` is at most this
    (the spec's ``trial.precision``); None: it holds ``measure_steps``."""


@dataclass(frozen=True)
class ScriptCall:
    """A training script run unchanged (``harness/script.py``), instead of an experiment module."""

    path: str
    """The script's file (absolute)."""
    argv: list[str]
    """Its arguments, placeholders filled (``sys.argv[1:]``)."""
    samples_per_step: float | None = None
    """Samples per optimizer step, from the spec; None: counted from its DataLoaders' batches."""


@dataclass(frozen=True)
class TrialConfig:
    """What a trial process is given to run (``config.json``)."""

    experiment: str
    """The experiment's module (``build(params, device)``: ``harness/workload.py``)."""
    params: dict[str, Any]
    """Every parameter the trial runs with, fixed and searched, ``device`` resolved."""
    trial: TrialSteps
    trial_number: int | None = None
    """The study's trial number (None: a trial outside a study, e.g. ``doctor --check``'s)."""
    not_applied: dict[str, str] = field(default_factory=dict)
    """Knobs that do not apply on this device, and why (the trial adds those it finds itself)."""
    allow_swap: bool = False
    """A trial that swapped in its window keeps ``ok`` (else it is ``swapped``)."""
    result_path: str | None = None
    """Where the trial writes its ``TrialResult`` (the launcher sets it beside the config)."""
    watch_parent: bool = True
    """A cold trial (``python -m orchestrator.harness CONFIG.json``) dies with its parent."""
    script: ScriptCall | None = None
    """A script trial: the script run in place of ``experiment``'s ``build`` (which then names
    the script's file)."""
    compile_cache: str | None = None
    """Where ``compile: true`` keeps Inductor's caches (the study's, ``harness/compiled.py``);
    None: where torch keeps them by default, or where the user's environment says."""
    temp_dir: str | None = None
    """multiprocessing's folder for the trial and the processes it forks (the sockets by which
    DataLoader workers pass tensors), which the launcher removes once the process has exited
    (``trialdir.multiprocessing_folder``). Their own would be left behind: a trial ends at its
    window's end, its workers killed before they remove theirs."""


def encode_config(config: TrialConfig) -> str:
    """``config.json``'s text: the keys in the order the launcher has always written them."""
    data: dict[str, Any] = {"experiment": config.experiment}
    if config.trial_number is not None:
        data["trial_number"] = config.trial_number
    data.update(params=config.params, not_applied=config.not_applied, allow_swap=config.allow_swap,
                trial={"warmup_steps": config.trial.warmup_steps, "measure_steps": config.trial.measure_steps,
                       "min_measure_s": config.trial.min_measure_s})
    if config.trial.precision is not None:
        data["trial"]["precision"] = config.trial.precision
    if config.result_path is not None:
        data["result_path"] = config.result_path
    if not config.watch_parent:
        data["watch_parent"] = False
    if config.script is not None:
        data["script"] = {"path": config.script.path, "argv": list(config.script.argv),
                          "samples_per_step": config.script.samples_per_step}
    if config.compile_cache is not None:
        data["compile_cache"] = config.compile_cache
    if config.temp_dir is not None:
        data["temp_dir"] = config.temp_dir
    return json.dumps(data, indent=1, default=str)


def config_of(data: dict[str, Any]) -> TrialConfig:
    """A ``TrialConfig`` from ``config.json``'s parsed JSON (or a dict written as it is)."""
    steps = data["trial"]
    script = data.get("script")
    return TrialConfig(data["experiment"], dict(data["params"]),
                       TrialSteps(steps["warmup_steps"], steps["measure_steps"], steps["min_measure_s"],
                                  steps.get("precision")),
                       data.get("trial_number"), dict(data.get("not_applied") or {}),
                       bool(data.get("allow_swap", False)), data.get("result_path"),
                       bool(data.get("watch_parent", True)),
                       None if script is None else ScriptCall(script["path"], [str(a) for a in script["argv"]],
                                                              script.get("samples_per_step")),
                       data.get("compile_cache"), data.get("temp_dir"))


def decode_config(text: str) -> TrialConfig:
    """``config.json``'s text as a ``TrialConfig``."""
    return config_of(json.loads(text))


@dataclass
class TrialResult:
    """What a trial process leaves in ``result.json``: a status and what it measured, or where it
    failed. The process exits 0 whenever it wrote one; ``outcome.classify`` reads it."""

    status: str
    """``ok``, ``oom``, ``swapped``, ``error`` or ``diverged`` (``outcome.CHILD_STATUSES``)."""
    detail: str | None = None
    """One line on what went wrong (or why it swapped)."""
    metrics: dict[str, Any] | None = None
    """A measured trial's figures (``metrics.py``'s names); None: it failed before them."""
    applied: dict[str, Any] | None = None
    """A measured trial: the knobs as really used."""
    not_applied: dict[str, str] | None = None
    """A measured trial: the knobs that did not apply, and why."""
    info: dict[str, Any] | None = None
    """A measured trial: what the experiment reported about itself."""
    phase: str | None = None
    """A failed trial: the phase it failed in (``setup``, ``build``, ``compile``, ``warmup``, ``measure``)."""
    step: int | None = None
    """A failed trial: the step of that phase."""
    memory_at_failure: dict[str, Any] | None = None
    """An out-of-memory trial: the device's memory when it failed."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """The device, torch and machine it ran on (``backend.describe``), or ``{"error": ...}``."""
    placement: dict[str, Any] = field(default_factory=dict)
    """The GPU it was given and the cores it could use."""
    process_peak_rss_gib: float | None = None
    """The process's own peak resident set, read as it wrote the result."""
    timeline: dict[str, float] = field(default_factory=dict)
    """Wall-clock marks of its life (``harness/marks.py``)."""

    @property
    def measured(self) -> bool:
        return self.metrics is not None


_MEASURED = ("status", "metrics", "applied", "not_applied", "info", "detail")
_FAILED = ("status", "detail", "phase", "step", "memory_at_failure")
_TAIL = ("provenance", "placement", "process_peak_rss_gib", "timeline")


def encode_result(result: TrialResult) -> str:
    """``result.json``'s text: a measured trial's keys, or a failed one's, in the order the trial
    has always written them (a key whose value is None is left out, but for the tail's)."""
    head = _MEASURED if result.measured else _FAILED
    data = {k: getattr(result, k) for k in head if getattr(result, k) is not None}
    data.update({k: getattr(result, k) for k in _TAIL})
    return json.dumps(data, indent=1, default=str)


def decode_result(text: str) -> TrialResult:
    """``result.json``'s text as a ``TrialResult``; ``ValueError`` for text that is no result."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("status"), str):
        raise ValueError("a trial's result is a JSON object with a status")
    known = set(_MEASURED + _FAILED + _TAIL)
    return TrialResult(**{k: v for k, v in data.items() if k in known})
