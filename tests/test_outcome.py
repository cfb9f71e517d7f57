"""Every way a trial process can end maps to exactly one status (a table of cases)."""

from __future__ import annotations

import json
import signal

import pytest

from orchestrator.outcome import classify

OK = json.dumps({"status": "ok", "metrics": {"samples_per_s": 10.0}})
OOM = json.dumps({"status": "oom", "detail": "RuntimeError: MPS backend out of memory"})

CASES = [
    # returncode, result file, flags, status, detail contains
    (0, OK, {}, "ok", None),
    (0, OOM, {}, "oom", "MPS backend"),
    (0, json.dumps({"status": "diverged", "detail": "NaN"}), {}, "diverged", "NaN"),
    (0, json.dumps({"status": "error", "detail": "ValueError: x"}), {}, "error", "ValueError: x"),
    (-signal.SIGSEGV, None, {}, "crashed", "SIGSEGV"),
    (-signal.SIGKILL, None, {}, "crashed", "memory killer"),
    (-signal.SIGABRT, None, {}, "crashed", "SIGABRT"),
    (3, None, {}, "error", "exited with code 3"),
    (3, None, {"log_tail": "ImportError: no torch"}, "error", "ImportError: no torch"),
    (0, None, {}, "error", "exited with code 0 before its result was written (a script that ends by os._exit"),
    (0, None, {"log_tail": "trained 2 steps"}, "error", "os._exit leaves the harness no time to write it); its last "
                                                         "output: trained 2 steps"),
    (0, '{"status": "ok", "metr', {}, "error", "unreadable result file"),
    (0, "\x00garbage", {}, "error", "unreadable result file"),
    (0, json.dumps({"status": "great"}), {}, "error", "no valid status"),
    (0, json.dumps([1, 2]), {}, "error", "no valid status"),
    (-signal.SIGKILL, None, {"timed_out": True, "timeout_s": 5}, "timeout", "timeout_s=5"),
    (-signal.SIGKILL, None, {"interrupted": True}, "interrupted", "stopped"),
    (0, OK, {"interrupted": True}, "interrupted", None),  # a Ctrl-C wins over a late result
    # its fork server died first, and the trial with it: cut off, not a crash of its own
    (-signal.SIGKILL, None, {"server_died": True}, "interrupted", "fork server died"),
    (0, OK, {"server_died": True}, "ok", None),  # its result was written before: it stands
    (-signal.SIGKILL, None, {"server_died": True, "timed_out": True, "timeout_s": 5}, "timeout", "timeout_s=5"),
]


@pytest.mark.parametrize("returncode, text, flags, status, detail", CASES)
def test_classify(returncode, text, flags, status, detail) -> None:  # noqa: ANN001
    outcome = classify(returncode, text, **flags)
    assert outcome.status == status
    if detail:
        assert detail in (outcome.detail or "")


def test_crash_records_the_signal_name() -> None:
    assert classify(-signal.SIGSEGV, None).signal == "SIGSEGV"


def test_metrics_keep_numbers_only() -> None:
    outcome = classify(0, json.dumps({"status": "ok", "metrics": {"a": 1.5, "b": None, "c": "x"}}))
    assert outcome.metrics == {"a": 1.5}
