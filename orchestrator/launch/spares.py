"""A slot's spare processes: started ahead of time, matched to a trial by its environment, refilled
and discarded. Never imports torch.

A spare has Python, ``import torch``, the harness and the experiment module loaded, idle on a
pipe: on Linux a fork server (``forked.py``), which stays and forks one process per trial;
elsewhere (macOS, or ``ORCHESTRATE_FORK=0``) one pre-started ``--serve`` interpreter per trial,
refilled ``PRESTART`` at a time. A trial is given to a spare whose environment equals what the
trial needs, else to a new one, because:

*Allocator settings are read once per process*, some of them as early as ``import torch`` (torch
2.13.0 source, git cf30153c): a CUDA build's ``libc10_cuda`` reads ``PYTORCH_CUDA_ALLOC_CONF`` in
a static initializer when the library loads, to choose the allocator backend
(``c10/cuda/CUDAAllocatorConfig.h``), and parses the rest of it at the first
``CUDAAllocatorConfig::instance()``; ``CUDA_VISIBLE_DEVICES`` is read by the driver at
``cuInit``, which ``import torch`` does not call (``torch/cuda/__init__.py``, ``_lazy_init``); the
MPS allocator reads ``PYTORCH_MPS_{HIGH,LOW}_WATERMARK_RATIO`` when it is built, at the first MPS
allocation (``aten/src/ATen/mps/MPSAllocator.h``, ``init_allocator``), and
``PYTORCH_ENABLE_MPS_FALLBACK`` is read at load. Since some are read at import, a pre-started
interpreter is used only when its whole trial environment (``Interpreter.env``) equals the
trial's; anything else is discarded and a fresh process started.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from orchestrator.launch.forked import Forked, ForkServer, fork_server_usable, prepare_usable
from orchestrator.launch.process import SPARES_DIR, Interpreter, StopFlag, TrialProcess
from orchestrator.launch.trial import IMPORT_GRACE_S

PRESTART = 2
"""Interpreters started at once when a slot has none left: on a small CPU two import in
parallel, which a trial's import alone cannot use."""
PREPARE_GRACE_S = 30.0
"""A prepared process not ready this long after its fork (a CUDA context takes 0.3 s on an H100)
is given up: killed, and its trial forked as without preparing."""


class SparePool:
    """The pre-started processes of one device slot (see the module's rule)."""

    def __init__(self, experiment: str, cores: frozenset[int] | None, spare_dir: Path | None,
                 stop: StopFlag | None, prestart: int = PRESTART, fork: bool | None = None,
                 where: Path | None = None, fixed: dict[str, Any] | None = None) -> None:
        """``spare_dir``: the study's trial folder, where spares' own logs go (None until the study
        is open: only ``prewarm`` may start one before); ``fork``: keep ``ForkServer`` spares
        (default: where ``fork_server_usable``), else one pre-started interpreter per trial;
        ``where``: on every interpreter's command line (default ``spare_dir``); ``fixed``: the
        sweep's fixed parameters, given to every spare for the experiment's preload hook."""
        self.experiment, self.cores, self.spare_dir, self.stop = experiment, cores, spare_dir, stop
        self.fixed = fixed
        self.prestart, self.where = prestart, where or spare_dir
        self.fork = fork_server_usable() if fork is None else fork
        self.spares: list[Interpreter] = []
        self.pending: list[dict[str, str]] = []
        """Environments of interpreters to start once no window runs on the host."""
        self.guesses: list[dict[str, str]] = []
        """Environments the next trials are expected to need (the last ``take``'s)."""
        self.discarded = 0
        """Pre-started interpreters thrown away because a trial needed another environment."""
        self.prepare = self.fork and bool(prestart) and prepare_usable()
        """Whether the slot's next trial process is forked ahead, its device initialised
        (``prepare_next``): where there is a fork server, unless ``ORCHESTRATE_PREPARE=0``."""
        self.prepared: Forked | None = None
        """The process forked for the slot's next trial (``ForkServer.prepare``), if any."""
        self.prepare_pending: str | None = None
        """The device of a process to prepare once no window runs on the host."""
        self.context_pending = False
        """The prepared process, which started only its driver, is to make its context once no
        window runs on the host (``context_next``)."""
        self.prepared_unused = 0
        """Prepared processes thrown away (the next trial needed another environment or device)."""

    def spawn(self, env: dict[str, str], log_path: Path | None = None) -> Interpreter:
        """A trial's own interpreter (``log_path``: its trial log) or a spare. A spare's own log
        goes to the study's folder; before that is known (``prewarm``), a fork server's output is
        dropped: a spare's log is deleted when it leaves anyway, and each forked trial writes its
        own."""
        kind = ForkServer if self.fork and log_path is None else Interpreter
        if log_path is None:
            assert self.spare_dir is not None or kind is ForkServer, "a --serve spare's log becomes its trial's"
            log_path = (self.spare_dir / SPARES_DIR / f"{time.monotonic_ns()}.log" if self.spare_dir is not None
                        else Path(os.devnull))
        return kind(self.experiment, env, log_path, self.cores, self.stop, self.where, self.fixed)

    def prewarm(self, env: dict[str, str], log_path: Path | None = None) -> ForkServer | None:
        """Start a fork server before the first trial is known (at start-up, before the study's
        folder exists: it answers the experiment's probe, while the stores open), for trials that
        will need ``env``; its output to ``log_path`` (default: dropped). Fork servers only: a
        pre-started ``--serve`` interpreter's log is renamed into its trial's folder, so it must
        start in the study's folder. Returns the slot's server (None: it keeps none)."""
        if self.fork and self.prestart and not self.spares and not self.pending:
            self.spares.append(ForkServer(self.experiment, env, log_path or Path(os.devnull), self.cores,
                                          self.stop, self.where, self.fixed))
        return next((s for s in self.spares if isinstance(s, ForkServer) and s.env == env), None)

    def take(self, wanted: dict[str, str], guesses: list[dict[str, str]], log_path: Path,
             device: str | None = None) -> TrialProcess:
        """The process for a trial that needs environment ``wanted`` (its output to ``log_path``)
        on ``device``: the process prepared for it where it matches both (``prepare_next``), else
        a matching spare's (a fork server forks it; an interpreter leaves the pool), else a fresh
        one. Spares that match none of ``guesses`` (the next trials' environments) are discarded,
        and the refill is planned (``pending``)."""
        self.guesses = list(guesses)
        ready, self.prepared, self.prepare_pending, self.context_pending = self.prepared, None, None, False
        if ready is not None and (ready.env != wanted or ready.device != device or not ready.ready or ready.reap()):
            self.prepared_unused += ready.returncode is None
            ready.kill()  # its server reaps it
            ready = None
        spare = next((s for s in self.spares if s.env == wanted and not s.reap()), None)
        process: TrialProcess
        if spare is None and self.fork and self.prestart:  # one import, for this trial and the next
            spare = self.spawn(wanted)
            self.spares.append(spare)
        if ready is not None:  # forked ahead, its device initialised: given its trial's log
            ready.log_path = log_path
            process = ready
            self.guesses.append(wanted)
        elif isinstance(spare, ForkServer):  # it stays, for the trials after this one
            process = spare.fork(log_path)
            self.guesses.append(wanted)
        elif spare is not None:
            self.spares.remove(spare)
            process = spare
        else:
            process = self.spawn(wanted, log_path)
        for s in [s for s in self.spares if s.env not in self.guesses or s.reap()]:
            self.spares.remove(s)
            self.discarded += s.returncode is None
            s.discard()
        if self.fork and self.prestart:  # a server for every environment guessed
            have = [s.env for s in self.spares]
            self.pending = [g for i, g in enumerate(self.guesses) if g not in have and g not in self.guesses[:i]]
        elif not self.spares and self.prestart:  # refill: every guess, at once (see PRESTART)
            self.pending = (self.guesses * self.prestart)[:self.prestart]
        return process

    def start_pending(self) -> None:
        """Start the interpreters planned, and the process prepared for the next trial (call only
        while no window runs on the host)."""
        self.spares += [self.spawn(env) for env in self.pending]
        self.pending = []
        if self.prepare_pending is not None:
            self.prepare_now(self.prepare_pending)

    def settled(self) -> bool:
        """Whether the prepared process, if any, has said whether it can take a trial: ready, or
        gone. Until then the slot waits for it (a process forked for the trial instead would wait
        for the same server, and initialise the same device), but not for ever: one not forked
        ``IMPORT_GRACE_S`` after it was asked (its server still importing), or not ready
        ``PREPARE_GRACE_S`` after its fork, is killed, and ``take`` forks the trial."""
        ready = self.prepared
        if ready is None or ready.ready or ready.reap():
            return True
        if ready.waited_s() > (IMPORT_GRACE_S if ready.pid is None else PREPARE_GRACE_S):
            self.prepared, self.prepared_unused = None, self.prepared_unused + 1
            ready.kill()
            return True
        return False

    def prepare_next(self, device: str) -> None:
        """Plan a process for the slot's next trial on ``device`` (its current trial's window is
        over), started by ``start_pending`` once no window runs on the host: forked from the server
        of the next trial's likeliest environment, it initialises the device and waits
        (``ForkServer.prepare``). Its trial then finds the device ready: on CUDA the context (0.3 s
        on an H100) is made while the previous trial writes its result and its process exits."""
        if self.prepare and self.prepared is None:
            self.prepare_pending = device

    def prepare_now(self, device: str, context: bool = True) -> Forked | None:
        """Fork the next trial's process now (``prepare_next``; at start-up, when nothing is
        measured yet), from the fork server of the likeliest next environment; ``context``
        false: ``prepare_driver``."""
        self.prepare_pending = None
        if not self.prepare or self.prepared is not None:
            return self.prepared
        servers = [s for s in self.spares if isinstance(s, ForkServer) and not s.reap()]
        server = next((s for g in self.guesses for s in servers if s.env == g), servers[0] if servers else None)
        if server is not None:
            self.prepared = server.prepare(device, context)
        return self.prepared

    def prepare_driver(self, device: str) -> None:
        """Fork the next trial's process now, beside the slot's trial, initialising only the
        device's driver (no memory of the device; ``harness/prepared.py``): it makes the context
        later (``context_next``), else its trial's set-up does."""
        self.prepare_now(device, context=False)

    def context_next(self) -> None:
        """The slot's trial's window is over: the process prepared for its next trial, if it
        started only its driver, makes its context once no window runs on the host
        (``make_context``), unlike ``prepare_next`` without holding any window for it."""
        self.context_pending = self.prepared is not None and not self.prepared.context

    def make_context(self) -> None:
        """``context_next``, now (call only while no window runs on the host): once the process
        is ready (its driver started); not before."""
        ready = self.prepared
        if not self.context_pending or ready is None or ready.context or ready.reap():
            self.context_pending = False
        elif ready.ready:
            self.context_pending = False
            ready.make_context()

    def poll(self) -> None:
        for s in self.spares:
            s.read_status()
            s.reap()

    def fds(self) -> list[int]:
        return [s.status_fd for s in self.spares if s.status_fd is not None]

    def leave(self) -> None:
        """The end's first step for the spares, not waited for: none is started any more, and each
        is told to leave and killed (a prepared process with its server). ``gone`` says when they
        are reaped, ``forget`` closes what is left: every slot's spares leave at once, and a host
        waits once for them (``slot.end_all``)."""
        self.pending, self.prepared, self.prepare_pending, self.context_pending = [], None, None, False
        for s in self.spares:
            s.leave()

    def gone(self) -> bool:
        return all(s.reap() for s in self.spares)

    def forget(self) -> None:
        for s in self.spares:
            s.forget()
        self.spares.clear()
