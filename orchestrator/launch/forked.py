"""Linux: a fork server and the trials it forks, as the launcher holds them.

A ``ForkServer`` is an ``Interpreter`` started with ``--fork-server``
(``orchestrator/harness/forkserver.py``): it imports torch, the harness and the experiment once,
then forks one process per trial, so the import is paid once per slot and environment, not per
trial. It has touched no device, so each child builds its own allocator. It stays the slot's
spare across trials; each trial it starts is a ``Forked``. Not on macOS, where Apple's frameworks
are unsafe in a child forked without ``exec`` (``fork_server_usable``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from orchestrator.protocol import FORK_SERVER_FLAG, Kind, Order, StatusLine, Word
from orchestrator.launch.process import Interpreter, TrialProcess, Usage, is_alive, kill_group


def fork_server_usable() -> bool:
    """Trials are forked from a server only on Linux (Apple's frameworks are not safe to use in a
    child forked without ``exec``); ``ORCHESTRATE_FORK=0`` turns it off (benchmarks compare)."""
    return sys.platform.startswith("linux") and os.environ.get("ORCHESTRATE_FORK", "1") != "0"


def prepare_usable() -> bool:
    """A slot's next trial process is forked, and its device initialised, ahead of its
    configuration (``ForkServer.prepare``) wherever there is a fork server; ``ORCHESTRATE_PREPARE=0``
    turns it off (``bench/fidelity.py`` compares)."""
    return fork_server_usable() and os.environ.get("ORCHESTRATE_PREPARE", "1") != "0"


UNANSWERED_S = 30.0
"""How long a trial killed (its timeout, or its exit's grace) may go without its server saying it
exited: past it the server is taken as not answering (stopped, or deadlocked) and is killed, the
trial ended with it (``Forked.reap``), and the slot starts a new server. A dying trial that frees a
large device context can take seconds to be reaped: this waits far longer."""


class ForkServer(Interpreter):
    """Linux: an interpreter that imports once and forks a process per trial. It stays the slot's
    spare across trials; each trial it starts is a ``Forked``."""

    mode = FORK_SERVER_FLAG
    server = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trials: dict[int, Forked] = {}
        self.asked: list[Forked] = []
        """Trials asked for, in order, whose pid the server has not said yet."""
        self.early: dict[int, list[StatusLine]] = {}
        """What a child said before its server said it had forked it, by pid: the child shares the
        server's status pipe and may run first (a prepared process on the CPU says ``ready`` at
        once; a busy machine may hold the server between ``fork`` and its ``FORKED`` line). Told
        to its ``Forked`` once that line comes: dropped, a prepared process was never ready and
        was killed after ``PREPARE_GRACE_S``."""

    def fork(self, log_path: Path) -> Forked:
        return Forked(self, log_path)

    def prepare(self, device: str, context: bool = True) -> Forked:
        """A process for the slot's next trial, forked now: it initialises ``device`` (``context``
        false: only its driver) and waits for its configuration (``harness/prepared.py``);
        ``ready`` once it has. Its output is the server's until it is given a trial."""
        trial = Forked(self, Path(os.devnull), device, context)
        self.asked.append(trial)
        self.send(Order(Kind.PREPARE, device=device, context=context))
        return trial

    def _said(self, status: StatusLine) -> None:
        if status.pid is None:
            super()._said(status)
            return
        if status.word is Word.FORKED and self.asked:
            self.asked.pop(0).forked(status.pid)
            for said in self.early.pop(status.pid, []):
                self._said(said)
            return
        trial = self.trials.get(status.pid)
        if trial is not None:
            trial.heard(status)
            if status.word is Word.EXITED:
                del self.trials[status.pid]
        elif self.asked:  # a child the server has not said it forked yet (see ``early``)
            self.early.setdefault(status.pid, []).append(status)

    def leave(self) -> None:
        for trial in list(self.trials.values()) + self.asked:
            trial.kill()
        super().leave()


class Forked(TrialProcess):
    """One trial process forked by a ``ForkServer``: a ``TrialProcess`` that never imports (it
    is ``ready`` once forked). The server reaps it and says how it exited, with its peak RSS. A
    prepared one (``ForkServer.prepare``: ``device`` given) is forked before its trial is known and
    is ``ready`` once its device is initialised; ``send``'s ``RUN`` then gives it its trial."""

    status_fd = None

    def __init__(self, server: ForkServer, log_path: Path, device: str | None = None, context: bool = True) -> None:
        self.server, self.env, self.stop, self.log_path = server, server.env, server.stop, log_path
        self.device = device
        """The device a prepared process initialised (None: forked for its trial at once)."""
        self.context = context
        """A prepared process: whether it makes the device's context too, or only its driver (no
        memory of the device: it may be made beside a window, ``launch/host.py``)."""
        self.pid: int | None = None
        self.ready = self.at_window = self.measured = self.result_ready = self._kill_when_forked = False
        self.returncode: int | None = None
        self.exited_at: float | None = None
        self.rusage: Usage | None = None
        self.server_died = False
        """Its server died before saying how it exited (``reap``): it died with it, its own end unknown."""
        self.running_since: float | None = None
        """When it could first run a trial: the server forked it, or (prepared) its device was
        initialised (the server may still have been importing when it was asked)."""
        self.prepared_s: float | None = None
        """A prepared process: from its fork to its ``ready`` (the device's initialisation)."""
        self._forked_at: float | None = None
        self._asked_at = time.monotonic()
        self._given: str | None = None
        """A prepared process's configuration, given before the server said its pid."""
        self._killed_at: float | None = None
        """When it was first killed (``UNANSWERED_S``)."""

    @property
    def prepared(self) -> bool:
        return self.device is not None

    def waited_s(self) -> float:
        """Seconds since the server forked it, or (not forked yet) since it was asked for."""
        return time.monotonic() - (self._asked_at if self._forked_at is None else self._forked_at)

    def forked(self, pid: int) -> None:
        self.pid = pid
        if not self.prepared:
            self.ready, self.running_since = True, time.monotonic()
        self._forked_at = time.monotonic()
        self.server.trials[pid] = self
        if self.stop is not None:
            self.stop.pgids.add(pid)
        if self._kill_when_forked or (self.stop is not None and self.stop.tripped):
            self.kill()
        elif self._given is not None:  # its trial came before its pid
            self.send(Order(Kind.RUN, config=self._given))
            self._given = None

    def heard(self, status: StatusLine) -> None:
        """What its server said of it: at its window, its window over, its result written, or reaped."""
        if status.word is Word.READY:  # (a prepared process that started only its driver: again with its context)
            self.ready, self.running_since = True, time.monotonic()
            if self.prepared_s is None:
                self.prepared_s = self.running_since - (self._forked_at or self.running_since)
        elif status.word is Word.WINDOW:
            self.at_window = True
        elif status.word is Word.MEASURED:
            self.measured = True
        elif status.word is Word.RESULT:
            self.result_ready = True
        elif status.word is Word.EXITED:
            self.exited(status.code, status.maxrss_kib)  # type: ignore[arg-type]  # EXITED carries its code

    def exited(self, code: int, maxrss_kib: int) -> None:
        self.returncode, self.exited_at = code, time.time()
        self.rusage = SimpleNamespace(ru_maxrss=maxrss_kib)  # the server's wait4 (Linux: KiB)
        if self.pid is not None:
            kill_group(self.pid)  # grandchildren left in its group
            if self.stop is not None:
                self.stop.pgids.discard(self.pid)

    def read_status(self) -> None:
        self.server.read_status()

    def reap(self) -> bool:
        if self.returncode is None:
            self.server.read_status()
        if (self.returncode is None and self._killed_at is not None
                and time.monotonic() - self._killed_at > UNANSWERED_S):
            self.server.kill()  # it has not said the end of a trial killed long ago: not answering
        if self.returncode is None and self.server.reap():  # the server died: nobody reports it now
            self.server.read_status()  # what it said before it died (the trial's exit, if it was first)
            if self.returncode is None and (self.pid is None or not is_alive(self.pid)):
                self.server_died = True  # it ended with its server (``watch_parent``), not by itself
                self.exited(-signal.SIGKILL, 0)
        return self.returncode is not None

    def send(self, order: Order) -> None:
        """Passed on to the server, for this trial (leaving is the server's own business)."""
        if order.kind is Kind.GO:
            if self.pid is not None:
                self.server.send(Order(Kind.GO, pid=self.pid))
        elif order.kind is Kind.RUN and self.prepared:  # forked already: its trial, and its log
            if self.pid is not None:
                self.server.send(Order(Kind.RUN, config=order.config, log=str(self.log_path), pid=self.pid))
            else:  # the server has not said its pid yet: given as soon as it has
                self._given = order.config
        elif order.kind in (Kind.RUN, Kind.PROBE):  # fork now (a trial, or the experiment's probe)
            self.server.asked.append(self)
            self.server.send(Order(order.kind, config=order.config, log=str(self.log_path)))

    def make_context(self) -> None:
        """A prepared process that started only its device's driver, ready: it makes the context
        now (``harness/prepared.py``) and is not ready until it says so again (the window gate
        counts it as importing meanwhile)."""
        assert self.pid is not None and self.ready and not self.context, "a ready process without its context"
        self.context, self.ready = True, False
        self.server.send(Order(Kind.PREPARE, pid=self.pid))

    def kill(self) -> None:
        if self._killed_at is None:
            self._killed_at = time.monotonic()
        if self.pid is None:
            self._kill_when_forked = True
            return
        kill_group(self.pid)
        try:
            os.kill(self.pid, signal.SIGKILL)  # before its setsid, it is in no group of its own
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        pass
