"""The MLflow server's guard (``orchestrator/report/uiguard.py``), with a real process group in
place of the server: told ``DONE``, it leaves the group alone; at end of file without it (its
``orchestrate ui`` killed outright), it stops the group, SIGTERM first, SIGKILL after its grace."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.report import uiguard

TRAP = "trap '' TERM; while :; do sleep 0.05; done"  # a server that ignores SIGTERM


def group(script: str = "exec sleep 60") -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def guard(pgid: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "orchestrator.report.uiguard", str(pgid)], stdin=subprocess.PIPE)


@pytest.mark.parametrize("said, stopped", [(uiguard.DONE, False), (b"", True)])
def test_guard_stops_the_group_only_when_its_pipe_closes_without_done(said: bytes, stopped: bool) -> None:
    server = group()
    g = guard(server.pid)
    try:
        assert g.stdin is not None
        g.stdin.write(said)
        g.stdin.close()  # as `orchestrate ui` leaving, or killed: the kernel closes its end
        if stopped:  # reaped here at once, as the server's own parent would (else a zombie counts as running)
            assert server.wait(timeout=20) == -signal.SIGTERM
        assert g.wait(timeout=20) == 0
        assert (server.poll() is not None) is stopped
    finally:
        server.kill()
        server.wait()


def test_a_group_deaf_to_sigterm_is_killed_after_the_grace() -> None:
    server = group(TRAP)
    deadline = time.monotonic() + 20
    while not signal_mask(server.pid, "SigIgn", signal.SIGTERM):  # the trap is set
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    uiguard.stop_group(server.pid, grace_s=0.5)
    assert server.wait(timeout=10) == -signal.SIGKILL
    assert 0.4 <= time.monotonic() - started < 5


def test_sigterm_to_the_guard_stops_the_group_before_it_leaves() -> None:
    """The protection does not go quietly: a guard asked to leave stops the server first."""
    server = group()
    g = guard(server.pid)
    try:
        deadline = time.monotonic() + 20
        while not catches(g.pid, signal.SIGTERM):  # its handler is set (Python starts first)
            assert time.monotonic() < deadline
            time.sleep(0.05)
        g.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == -signal.SIGTERM
        assert g.wait(timeout=20) == 0
    finally:
        server.kill()
        server.wait()
        g.kill()
        g.wait()


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum``."""
    return signal_mask(pid, "SigCgt", signum)


def signal_mask(pid: int, mask: str, signum: int) -> bool:
    """Whether ``signum`` is in process ``pid``'s ``mask`` (Linux /proc/PID/status: ``SigCgt``
    caught, ``SigIgn`` ignored, ``SigBlk`` blocked)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{mask}:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_port_the_last_ui_left_in_time_wait_is_free_and_one_listened_on_is_not() -> None:
    """The docs tour: `orchestrate ui` stopped with a browser's page open, then run again, was
    refused for a minute ("port 5000 ... is in use"): the server's side of each connection waits in
    TIME_WAIT, which a bind without SO_REUSEADDR counts as in use; MLflow's server binds with it."""
    import socket

    from orchestrator.errors import OrchestratorError
    from orchestrator.report.ui import HOST, check_port

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((HOST, 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection((HOST, port))
        accepted, _ = server.accept()
        with pytest.raises(OrchestratorError, match=f"port {port} on {HOST} is in use; choose another with --port"):
            check_port(port)  # listened on
        accepted.close()  # the server's side closes first: its end of the connection is in TIME_WAIT
        client.close()
    check_port(port)  # free to listen on again
