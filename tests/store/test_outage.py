"""A store that goes away is said at once, and waited out (``outage.Outage``): real connection
errors from a real closed port, a call that hangs for real, and the line that ends the wait. The
whole commands against a tracking server nobody listens on: tests/scenarios/test_lost_and_damaged.py."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from orchestrator.store import outage as O


def refused() -> None:
    """A real lost connection: a TCP connect to a port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    socket.create_connection(("127.0.0.1", port), timeout=5)


def test_the_first_failure_is_said_at_once_once_per_outage_and_the_end_names_no_study() -> None:
    lines: list[str] = []
    waits: list[float] = []
    guard = O.Outage("the tracking store http://127.0.0.1:9", 300, sleep=waits.append, say=lines.append)
    calls = iter([refused, refused, lambda: "back", refused, lambda: "back again"])
    assert guard.call(lambda: next(calls)()) == "back"
    assert len(lines) == 2 and lines[0].startswith("orchestrate: the tracking store http://127.0.0.1:9 is unreachable (")
    assert "Connection refused" in lines[0] and "retrying for up to search.outage_s=300 s" in lines[0]
    assert waits == [0.5, 1.0]  # said once, though it failed twice
    assert lines[1] == "orchestrate: the tracking store http://127.0.0.1:9 answers again, after 0 s; going on"  # said too
    assert guard.call(lambda: next(calls)()) == "back again"
    assert len(lines) == 4  # a new outage is said again, and its end

    short = O.Outage("the tracking store X", 0.0, sleep=lambda s: time.sleep(0.01), say=lines.append)
    with pytest.raises(O.StoreDown) as down:
        short.call(refused)
    text = str(down.value)
    assert "the study is saved" not in text and text.endswith("run the same command once it is back")
    assert str(down.value.with_outcome("nothing was started")).endswith("; nothing was started")


def test_the_line_names_the_lost_connection_not_the_wrapper_around_it() -> None:
    """The PostgreSQL tour: with the server stopped, the line said Optuna's wrapper, "StorageInternalError:
    An exception is raised during the commit. This typically happens due to invalid data in the commit,
    e.g. exceeding max length", not why: the refused connection under it."""
    from optuna.exceptions import StorageInternalError

    def wrapped() -> None:
        try:
            refused()
        except OSError as exc:
            raise StorageInternalError("An exception is raised during the commit. This typically happens due to "
                                       "invalid data in the commit, e.g. exceeding max length.") from exc

    lines: list[str] = []
    guard = O.Outage("the study's database postgresql://db/optuna", 0.0, sleep=lambda s: time.sleep(0.01),
                     say=lines.append)
    with pytest.raises(O.StoreDown) as down:
        guard.call(wrapped)
    for text in (lines[0], str(down.value)):
        assert "Connection refused" in text and "invalid data" not in text, text


def test_a_call_with_no_answer_is_said_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that drops packets: no failure to see until a connection timeout; the wait is said
    after ``NOTICE_S`` of it (made short here), once."""
    monkeypatch.setattr(O, "NOTICE_S", 0.5)
    lines: list[str] = []
    guard = O.Outage("the study's database postgresql://db/optuna", 300, say=lines.append)
    release = threading.Event()
    started = time.monotonic()
    worker = threading.Thread(target=guard.call, args=(lambda: release.wait(10),))
    worker.start()
    while not lines and time.monotonic() - started < 5:
        time.sleep(0.05)
    release.set()
    worker.join()
    assert len(lines) == 1 and time.monotonic() - started < 5, lines
    assert lines[0].startswith("orchestrate: waiting for the study's database postgresql://db/optuna: no answer for 0.5 s")
    assert guard.call(lambda: "quick") == "quick" and len(lines) == 1


def test_the_retrying_storage_passes_on_optuna_s_interface_but_no_other_private_name(tmp_path: Path) -> None:
    """Optuna's private names stay behind the door (``optuna_internals.storage_interface``): the
    abstract ``_get_stale_trial_ids`` is a guarded method of the wrapper, a private attribute of
    the storage inside it (``_backend``) is not reached through it."""
    import optuna

    from orchestrator.store.optuna_internals import cached
    from orchestrator.store.outage import Outage, retrying_storage

    inner = cached(optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db"))
    storage = retrying_storage(inner, Outage("x", 1.0))
    assert "_get_stale_trial_ids" in type(storage).__dict__
    assert hasattr(inner, "_backend")
    with pytest.raises(AttributeError, match="_backend: a private name of Optuna's storage is reached through "
                                             "store/optuna_internals.py"):
        getattr(storage, "_backend")
    assert storage.get_all_studies() == []  # and the interface works through the guard
