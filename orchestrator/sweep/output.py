"""The sweep's own output, guarded: a reader that leaves (``orchestrate SPEC | head -1``: a closed
pipe) or a terminal that closes (its writes fail with EIO after SIGHUP) stops the sweep as a
signal does, instead of ending it with a traceback between a trial's start and its record.

Python ignores SIGPIPE: a write to a closed pipe raises ``BrokenPipeError``. While the sweep runs,
``sys.stdout`` and ``sys.stderr`` are line-buffered ``Guarded`` streams (Python block-buffers a
pipe's stdout: without ``PYTHONUNBUFFERED`` the trial lines waited in the buffer, and ``| head -1``
let a sweep run to its end and exit 0): the first write that fails sends that
stream to ``/dev/null`` from then on and trips the sweep's ``StopFlag`` with SIGPIPE (or SIGHUP,
for a terminal gone), so the loop records the trials in flight as interrupted, closes MLflow's
parent run and exits 141 (129); the one line that says so goes to stderr if it still reaches
someone (``| head`` leaves the terminal on stderr). A write the disk refuses (``> sweep.log`` on a
disk that fills) is not a reader leaving: that stream goes to ``/dev/null``, stderr says so once,
and the sweep goes on (its results are in the stores).
"""

from __future__ import annotations

import errno
import io
import os
import signal
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from orchestrator.launch.process import StopFlag


class Guarded:
    """A text stream whose failed writes stop the sweep instead of raising (see the module)."""

    def __init__(self, stream: Any, stop: StopFlag) -> None:
        self._stream, self._stop = stream, stop
        self.lost = False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return self._stream.write(text)
            except OSError as exc:  # BrokenPipeError, or EIO from a terminal that hung up
                self._gone(exc)
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._stream.flush()
            except OSError as exc:
                self._gone(exc)

    def _gone(self, exc: OSError) -> None:
        self.lost = True
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
        except (OSError, ValueError):
            pass
        if not isinstance(exc, BrokenPipeError) and exc.errno != errno.EIO:  # a full disk under `> log`:
            other = sys.__stderr__ if self._stream is not sys.__stderr__ else None  # nobody left; the sweep goes on
            try:
                if other is not None:
                    print(f"orchestrate: its output could not be written ({exc.strerror}); the sweep goes on, "
                          "its results are in the stores (orchestrate report)", file=other, flush=True)
            except (OSError, ValueError):
                pass
            return
        if not self._stop.tripped:
            self._stop.trip(signal.SIGPIPE if isinstance(exc, BrokenPipeError) else signal.SIGHUP)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...: the stream's own
        return getattr(self._stream, name)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP before the sweep's own handlers (``guarded``) are set: as Ctrl-C there,
    the probe and the fork servers are ended on the way out, and the command says so in one line."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_early: dict[int, Any] = {}
"""SIGTERM's and SIGHUP's handlers before ``stop_early``, while it holds them."""
began = False
"""Whether ``guarded`` was entered: the sweep has said its own last line (a summary, a stop)."""


def stop_early() -> None:
    """Until the sweep takes them over (``guarded``), SIGTERM and SIGHUP raise ``Stopped`` (a
    signal the caller ignores, as ``nohup`` ignores SIGHUP, stays ignored). The first one ignores
    any that follow, to the command's exit: a second SIGTERM must not cut short the ending of the
    processes started, nor kill the command after its line (a sender's second signal can come late)."""
    global began
    began = False

    def stop(signum: int, _frame: object) -> None:
        for s in _early:
            signal.signal(s, signal.SIG_IGN)
        _early.clear()  # ``end_early`` leaves them ignored
        raise Stopped(signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(s) is not signal.SIG_IGN:
            _early[s] = signal.signal(s, stop)


def end_early() -> None:
    """The handlers ``stop_early`` replaced, back (once; again does nothing)."""
    while _early:
        s, handler = _early.popitem()
        signal.signal(s, handler)


@contextmanager
def guarded(stop: StopFlag) -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as ``Guarded`` streams (see the module), and SIGHUP
    handled as SIGINT and SIGTERM are (``stop.trip``), until the block ends. A signal the caller
    ignores stays ignored: ``nohup`` ignores SIGHUP (the sweep outlives its terminal), and a shell
    script's ``orchestrate ... &`` starts with SIGINT ignored (Ctrl-C is the script's)."""
    global began
    began = True
    out, err = sys.stdout, sys.stderr
    for stream in (out, err):  # a pipe's stdout is block-buffered: its trial lines would wait for the
        if isinstance(stream, io.TextIOWrapper):  # end (`| tee` showed nothing live), and so would the
            stream.reconfigure(line_buffering=True)  # write that finds the reader gone
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    early = dict(_early)  # taken over (``stop_early``): what they replaced is put back at the end
    _early.clear()
    previous = {}
    for s in signals:
        if signal.getsignal(s) is not signal.SIG_IGN:
            replaced = signal.signal(s, stop.trip)
            previous[s] = early.get(s, replaced)
    sys.stdout, sys.stderr = Guarded(out, stop), Guarded(err, stop)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
        for s, handler in previous.items():
            signal.signal(s, handler)


NAMES: dict[int, str] = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP (its terminal closed)",
         signal.SIGPIPE: "a closed pipe (the reader of its output left)"}
"""How the line that ends an interrupted sweep names what stopped it."""


def stopped_line(signum: int, killed: list[int]) -> str:
    """The line that ends a sweep stopped by ``signum``: what stopped it, and the trials it killed
    (recorded as interrupted), or that none was running (a stop before the first trial)."""
    name = NAMES.get(signum, f"signal {signum}")
    what = (f"the running trial(s) ({', '.join(f'#{n}' for n in killed)}) were killed and recorded as interrupted"
            if killed else "no trial was running")
    return f"orchestrate: stopped by {name}; {what}."
