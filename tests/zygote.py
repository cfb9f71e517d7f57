"""The installed ``orchestrate``, forked from a process that has its libraries imported.

A sweep's own process spends about 2 CPU-s importing MLflow, Optuna and SQLAlchemy before it
does anything. On the 2-core CI machine, ``tests/scenarios`` side by side (``-n 3``, 71 commands):
541 user CPU-s and 6 min 3 s as new processes, 418 CPU-s and 4 min 59 s forked from here. Each test
worker keeps one process here that imported them (never ``orchestrator`` itself, whose modules
load fresh in each command, nor torch); ``orchestrate(args, cwd, env)`` in ``conftest`` asks it
to fork, and the child runs the console script's ``entry()`` as the script does: its own pid,
``sys.argv[0]`` the script's path, the environment and folder given, stdin a file (empty, or the answer given), stdout
and stderr to files, its exit status the command's. ``popen(args, cwd, env)`` is the same command
running beside the test, as ``subprocess.Popen`` gives it (``Forked``): its pid to signal, its
stdout and stderr as pipes (passed to the server over a socket), a session of its own if asked; a
waiter forked for it reports its exit status in a file.

What a fork cannot give, the caller gets from a real ``subprocess.run`` instead (``usable``):
variables that change how an interpreter starts (``PYTHON*``, ``LD_*``, ``MALLOC_*``) set
differently from the worker's, or a server that could not start; but ``PYTHONPATH``,
``PYTHONDONTWRITEBYTECODE`` (the tests' own experiments, edited within a second) and
``PYTHONUNBUFFERED`` the child applies as the interpreter would (``sys.path`` after the script's
folder, ``sys.dont_write_bytecode``, stdout and stderr written through). Tests about the process itself
(signals, pasted commands, stdout's purity, secrets on command lines) run the script with
``subprocess``/``Popen`` directly, as before.

Run as a script, this file is the server: one request per line on stdin (JSON), one reply line
per event on stdout (``{"pid": N}``, then ``{"code": N}``; a ``popen`` request: ``{"pid": N}``
only, its three file descriptors sent on the socket after the line)."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PRELOAD = ("mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store", "optuna",
           "optuna.storages", "sqlalchemy", "alembic", "alembic.script", "yaml", "tqdm")
"""What the parent of a sweep imports anyway, heaviest first (no torch: the parent never imports it)."""

STARTUP = ("PYTHON", "LD_", "MALLOC_")
"""Prefixes of variables read as an interpreter starts: a fork keeps the server's..."""
APPLIED = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
"""... but these, which the child applies itself."""


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP) and k not in APPLIED}


def _python_path(env: dict[str, str]) -> list[str]:
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


class Zygote:
    """One worker's server (started on first use)."""

    def __init__(self, script: str) -> None:
        self.script = script
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.started_env: dict[str, str] = {}
        self.folder = Path(tempfile.mkdtemp(prefix="zygote-"))
        self.spawned = 0

    def usable(self, env: dict[str, str]) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            self.proc = None  # it died: start another
        if self.proc is None:
            self._start()
        return self.proc is not None and _startup_env(env) == self.started_env

    def _start(self) -> None:
        self.folder.mkdir(exist_ok=True)
        self.started_env = _startup_env(dict(os.environ))
        ours, theirs = socket.socketpair()
        with theirs:
            proc = subprocess.Popen([sys.executable, __file__, self.script, str(theirs.fileno())], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, cwd="/", pass_fds=(theirs.fileno(),))
        line = _read_line(proc, 120.0)
        if line != {"ready": True}:
            ours.close()
            proc.kill()
            proc.wait()
            return
        self.proc, self.sock = proc, ours

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float,
            answer: str = "") -> subprocess.CompletedProcess[str]:
        """``args`` run in ``cwd`` with ``env``, ``answer`` on its stdin, as ``subprocess.run``."""
        assert self.proc is not None and self.proc.stdin is not None
        out, err, given = self.folder / "stdout", self.folder / "stderr", self.folder / "stdin"
        given.write_text(answer)
        pid = self._ask({"args": args, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err), "in": str(given)})
        done = _read_line(self.proc, timeout)
        cmd = [self.script, *args]
        if done is None:  # as subprocess.run: the command killed, then TimeoutExpired
            os.kill(pid, signal.SIGKILL)
            _read_line(self.proc, 30.0)
            raise subprocess.TimeoutExpired(cmd, timeout, out.read_text(errors="replace"), err.read_text(errors="replace"))
        return subprocess.CompletedProcess(cmd, done["code"], out.read_text(errors="replace"), err.read_text(errors="replace"))

    def popen(self, args: list[str], cwd: Path, env: dict[str, str], merge_stderr: bool = False,
              new_session: bool = False) -> "Forked":
        """``args`` started in ``cwd`` with ``env``, as ``subprocess.Popen(..., text=True,
        stdout=PIPE, stderr=STDOUT if merge_stderr else PIPE, stdin=DEVNULL,
        start_new_session=new_session)`` starts it."""
        assert self.proc is not None and self.proc.stdin is not None and self.sock is not None
        self.spawned += 1
        status = self.folder / f"status-{self.spawned}.json"
        out_r, out_w = os.pipe()
        err_r, err_w = (None, out_w) if merge_stderr else os.pipe()
        given = [os.open(os.devnull, os.O_RDONLY), out_w, err_w]
        request = {"popen": True, "args": args, "cwd": str(cwd), "env": env, "status": str(status),
                   "new_session": new_session}
        try:
            pid = self._ask(request, given)
        finally:
            for fd in {*given}:
                os.close(fd)
        return Forked([self.script, *args], pid, status, out_r, err_r)

    def _ask(self, request: dict[str, Any], fds: list[int] | None = None) -> int:
        """``request`` sent (and ``fds`` after it, on the socket); the pid of the child it started."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        if fds is not None:
            assert self.sock is not None
            socket.send_fds(self.sock, [b"f"], fds)
        started = _read_line(self.proc, 30.0)
        if not isinstance(started, dict) or "pid" not in started:
            raise RuntimeError(f"zygote: no child started ({started!r})")
        return int(started["pid"])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        shutil.rmtree(self.folder, ignore_errors=True)


class Forked:
    """A command forked by the server, as ``subprocess.Popen`` (text mode) shows one: ``pid``,
    ``stdout``, ``stderr``, ``returncode``, ``poll``, ``wait``, ``communicate``, ``send_signal``,
    ``terminate``, ``kill``. Not the worker's child: its exit status comes from its waiter's file."""

    def __init__(self, args: list[str], pid: int, status: Path, out: int, err: int | None) -> None:
        self.args, self.pid, self._status = args, pid, status
        self.returncode: int | None = None
        self.stdout = open(out, encoding="utf-8", errors="replace")
        self.stderr = open(err, encoding="utf-8", errors="replace") if err is not None else None
        self._read: dict[str, list[str]] = {}
        self._readers: list[threading.Thread] = []

    def poll(self) -> int | None:
        if self.returncode is None and self._status.exists():
            self.returncode = int(json.loads(self._status.read_text())["code"])
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)
        return code

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Both streams read to their end, then the exit awaited; ``TimeoutExpired`` after
        ``timeout`` s, and a later call goes on where this one stopped (as ``Popen``'s)."""
        assert input is None, "stdin is /dev/null"
        if not self._readers:
            for name, f in (("out", self.stdout), ("err", self.stderr)):
                if f is not None:
                    self._read[name] = []
                    self._readers.append(threading.Thread(target=_drain, args=(f, self._read[name]), daemon=True))
            for t in self._readers:
                t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out = "".join(self._read["out"])
        err = "".join(self._read["err"]) if "err" in self._read else None
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it ended between the poll and the signal
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _drain(f: Any, into: list[str]) -> None:
    with f:
        while chunk := f.read(1 << 16):
            into.append(chunk)


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> Any:
    """The server's next reply line (JSON), or None after ``timeout`` s or at its end."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1)  # one byte at a time: nothing of the next reply read ahead
        if not chunk:
            return None
        buf += chunk
    return json.loads(buf)


def _child(request: dict[str, Any], script: str, fds: list[int] | None = None, ready: int | None = None) -> None:
    """In the forked child: become the command, run it, exit with its status (never returns).
    ``fds``: its stdin, stdout and stderr (a ``popen`` request's); else the request's files.
    ``ready``: written to, then closed, once it is in its session, folder and files (as
    ``Popen`` returns only then)."""
    code: Any = 1
    try:
        if request.get("new_session"):
            os.setsid()
        os.chdir(request["cwd"])
        before = _python_path(dict(os.environ))
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR read again, as a new process would
        sys.path[1:1 + len(before)] = _python_path(os.environ)  # the server's PYTHONPATH replaced
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        if fds is not None:
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in set(fds) - {0, 1, 2}:
                os.close(fd)
        else:
            os.dup2(os.open(request["in"], os.O_RDONLY), 0)
            for fd, path in ((1, request["out"]), (2, request["err"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        if os.environ.get("PYTHONUNBUFFERED"):
            sys.stdout.reconfigure(write_through=True)  # type: ignore[union-attr]
            sys.stderr.reconfigure(write_through=True)  # type: ignore[union-attr]
        if ready is not None:
            os.write(ready, b"1")
            os.close(ready)
        sys.argv = [script, *request["args"]]
        from orchestrator.cli import entry

        try:
            entry()
            code = 0
        except SystemExit as exc:
            code = exc.code
    except BaseException:  # noqa: BLE001 - as the interpreter does with an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        try:
            import atexit

            threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own exit order
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _waiter(request: dict[str, Any], script: str, fds: list[int], reply: int) -> None:
    """A ``popen`` request's waiter, forked by the server (never returns): forks the command, says
    its pid on ``reply``, waits for it and writes its exit status to the request's file."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)  # the server's request and reply pipes: not held by the waiter
        os.dup2(devnull, 1)
        os.close(devnull)
        wait_r, ready = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(reply)
            os.close(wait_r)
            _child(request, script, fds, ready)
        os.close(ready)
        for fd in fds:
            os.close(fd)
        os.read(wait_r, 1)  # its session and files set (or it ended before)
        os.close(wait_r)
        os.write(reply, str(pid).encode())
        os.close(reply)
        _, status = os.waitpid(pid, 0)
        tmp = request["status"] + ".tmp"
        Path(tmp).write_text(json.dumps({"code": os.waitstatus_to_exitcode(status)}))
        os.replace(tmp, request["status"])
    finally:
        os._exit(0)


def _serve(script: str, sock_fd: int) -> None:
    import importlib

    sys.path[0] = os.path.dirname(script)  # as the console script's interpreter has it
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork beside threads is not safe: say no
        os.write(1, b'{"ready": false}\n')
        return
    sock = socket.socket(fileno=sock_fd)
    os.write(1, b'{"ready": true}\n')
    stdin = os.fdopen(0, "rb", buffering=0)
    waiters: list[int] = []
    while line := stdin.readline():
        waiters = [w for w in waiters if os.waitpid(w, os.WNOHANG)[0] == 0]  # reap the ended ones
        request = json.loads(line)
        if request.get("popen"):
            _, fds, _, _ = socket.recv_fds(sock, 16, 3)
            read, reply = os.pipe()
            waiter = os.fork()
            if waiter == 0:
                stdin.close()
                sock.close()
                os.close(read)
                _waiter(request, script, fds, reply)
            os.close(reply)
            for fd in fds:
                os.close(fd)
            pid = int(os.read(read, 32) or b"0")
            os.close(read)
            waiters.append(waiter)
            os.write(1, json.dumps({"pid": pid}).encode() + b"\n")
            continue
        pid = os.fork()
        if pid == 0:
            stdin.close()
            sock.close()
            _child(request, script)
        os.write(1, json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        os.write(1, json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
