"""The signals a sweep command takes before, during and after its sweep (``sweep.output``): before,
SIGTERM and SIGHUP stop the start-up as Ctrl-C does (``Stopped``); during, the sweep's own
handlers trip its ``StopFlag``; after, the caller's handlers are back, not the start-up's (a
SIGTERM after the summary said "before the sweep started; nothing was run"). Real signals, sent
to this process."""

from __future__ import annotations

import os
import signal
from typing import Iterator

import pytest

from orchestrator.launch.process import StopFlag
from orchestrator.sweep import output


@pytest.fixture(autouse=True)
def own_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    output.end_early()
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_before_the_sweep_a_sigterm_stops_it_and_later_ones_are_ignored_to_the_exit() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    output.stop_early()
    with pytest.raises(output.Stopped) as stopped:
        os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.value.signum == signal.SIGTERM and not output.began
    os.kill(os.getpid(), signal.SIGTERM)  # while the start-up ends its processes: ignored, not a second raise
    output.end_early()  # the command's end: a sender's late second signal must not kill it after its line
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGTERM)


def test_before_the_sweep_with_no_signal_the_caller_s_handlers_come_back() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    output.stop_early()
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
    output.end_early()  # a command that ended before its sweep without a signal (a spec error, say)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_the_sweep_takes_them_over_and_after_it_the_caller_s_are_back() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup's: stays ignored throughout
    output.stop_early()
    stop = StopFlag()
    with output.guarded(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signum == signal.SIGTERM  # the sweep's own handler: no Stopped raised
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert output.began
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # not the start-up's Stopped again
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    output.end_early()  # nothing left to put back
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
