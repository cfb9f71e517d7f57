"""The installed ``orchestrate``, forked from a process that has its libraries imported.

A sweep's own process spends about 2 CPU-s importing MLflow, Optuna and SQLAlchemy before it
does anything. On the 2-core CI machine, ``tests/scenarios`` side by side (``-n 3``, 71 commands):
541 user CPU-s and 6 min 3 s as new processes, 418 CPU-s and 4 min 59 s forked from here. Each test
worker keeps one process here that imported them (never ``orchestrator`` itself, whose modules
load fresh in each command, nor torch); ``orchestrate(args, cwd, env)`` in ``conftest`` asks it
to fork, and the child runs the console script's ``entry()`` as the script does: its own pid,
``sys.argv[0]`` the script's path, the environment and folder given, stdin a file (empty, or the answer given), stdout
and stderr to files, its exit status the command's.

What a fork cannot give, the caller gets from a real ``subprocess.run`` instead (``usable``):
variables that change how an interpreter starts (``PYTHON*``, ``LD_*``, ``MALLOC_*``) set
differently from the worker's, or a server that could not start; but ``PYTHONPATH`` and
``PYTHONDONTWRITEBYTECODE`` (the tests' own experiments, edited within a second) the child applies
as the interpreter would (``sys.path`` after the script's folder, ``sys.dont_write_bytecode``). Tests about the process itself
(signals, pasted commands, stdout's purity, secrets on command lines) run the script with
``subprocess``/``Popen`` directly, as before.

Run as a script, this file is the server: one request per line on stdin (JSON), one reply line
per event on stdout (``{"pid": N}``, then ``{"code": N}``)."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PRELOAD = ("mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store", "optuna",
           "optuna.storages", "sqlalchemy", "alembic", "alembic.script", "yaml", "tqdm")
"""What the parent of a sweep imports anyway, heaviest first (no torch: the parent never imports it)."""

STARTUP = ("PYTHON", "LD_", "MALLOC_")
"""Prefixes of variables read as an interpreter starts: a fork keeps the server's..."""
APPLIED = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
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
        self.started_env: dict[str, str] = {}
        self.folder = Path(tempfile.mkdtemp(prefix="zygote-"))

    def usable(self, env: dict[str, str]) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            self.proc = None  # it died: start another
        if self.proc is None:
            self._start()
        return self.proc is not None and _startup_env(env) == self.started_env

    def _start(self) -> None:
        self.folder.mkdir(exist_ok=True)
        self.started_env = _startup_env(dict(os.environ))
        proc = subprocess.Popen([sys.executable, __file__, self.script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, cwd="/")
        line = _read_line(proc, 120.0)
        if line != {"ready": True}:
            proc.kill()
            proc.wait()
            return
        self.proc = proc

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float,
            answer: str = "") -> subprocess.CompletedProcess[str]:
        """``args`` run in ``cwd`` with ``env``, ``answer`` on its stdin, as ``subprocess.run``."""
        assert self.proc is not None and self.proc.stdin is not None
        out, err, given = self.folder / "stdout", self.folder / "stderr", self.folder / "stdin"
        given.write_text(answer)
        request = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err), "in": str(given)}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        started = _read_line(self.proc, 30.0)
        if not isinstance(started, dict) or "pid" not in started:
            raise RuntimeError(f"zygote: no child started ({started!r})")
        pid = started["pid"]
        done = _read_line(self.proc, timeout)
        cmd = [self.script, *args]
        if done is None:  # as subprocess.run: the command killed, then TimeoutExpired
            os.kill(pid, signal.SIGKILL)
            _read_line(self.proc, 30.0)
            raise subprocess.TimeoutExpired(cmd, timeout, out.read_text(errors="replace"), err.read_text(errors="replace"))
        return subprocess.CompletedProcess(cmd, done["code"], out.read_text(errors="replace"), err.read_text(errors="replace"))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        shutil.rmtree(self.folder, ignore_errors=True)


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


def _child(request: dict[str, Any], script: str) -> None:
    """In the forked child: become the command, run it, exit with its status (never returns)."""
    code: Any = 1
    try:
        os.chdir(request["cwd"])
        before = _python_path(dict(os.environ))
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[1:1 + len(before)] = _python_path(os.environ)  # the server's PYTHONPATH replaced
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        os.dup2(os.open(request["in"], os.O_RDONLY), 0)
        for fd, path in ((1, request["out"]), (2, request["err"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
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
            import threading

            threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own exit order
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _serve(script: str) -> None:
    import importlib
    import threading

    sys.path[0] = os.path.dirname(script)  # as the console script's interpreter has it
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork beside threads is not safe: say no
        os.write(1, b'{"ready": false}\n')
        return
    os.write(1, b'{"ready": true}\n')
    stdin = os.fdopen(0, "rb", buffering=0)
    while line := stdin.readline():
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            stdin.close()
            _child(request, script)
        os.write(1, json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        os.write(1, json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


if __name__ == "__main__":
    _serve(sys.argv[1])
