"""``python -m orchestrator.harness --fork-server EXPERIMENT [FOLDER]`` (Linux): one import of
torch, the harness and the experiment, then one forked process per trial.

Where ``fork`` is safe, this replaces a pre-started interpreter per trial: the import (2-4 s,
all CPU) is paid once per slot and environment instead of once per trial, and no import ever
runs again beside a timed window. Each trial is still a process of its own: forked from an
interpreter that has touched no device (``import torch`` creates no CUDA context and no
allocator: ``orchestrator/launch/spares.py`` cites the source), it builds its allocator itself, from
the environment the server was started with (the launcher uses a server only for a trial whose
whole environment equals the server's), and its memory is freed when it exits. Not on macOS:
Apple's frameworks are not safe to use in a child forked without ``exec``, so there every trial
gets its own pre-started interpreter (``--serve``).

The slot's first server also answers the command's experiment probe: forked like a trial, the
probe checks the experiment, resolves and touches the device, and runs the smoke step
(``probe.answer``), so a command imports torch once, not once for the probe and once for the
trials; the server itself still touches no device.

Protocol (``protocol.py``): the server reads its orders on stdin (fork a trial or the probe, let
a trial open its window, leave) and says on its status pipe that it is ready, then for each
process that it forked it and, once it has reaped it, how it exited and its peak RSS; its trials
say ``window`` and ``result`` there themselves, with their pid (the probe: ``result`` after each
answer it wrote).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import Any, Callable, TextIO

from orchestrator.harness import orders, subreaper
from orchestrator.harness.ahead import preload_params
from orchestrator.harness.child import pin_cores, preload, run_given, watch_parent
from orchestrator.harness.prepared import prepared
from orchestrator.protocol import (GO, PARENT_PID_ENV, STATUS_FD_ENV, Kind, Order, StatusLine, Word, decode_order,
                                           encode_order, encode_status, probe_answer)


def fork_server(experiment: str) -> int:
    timeline = {"main": time.time()}
    status = os.fdopen(int(os.environ[STATUS_FD_ENV]), "w", buffering=1)
    watch_parent(thread=False)  # PR_SET_PDEATHSIG: the server starts no thread of its own
    pin_cores()
    preload(experiment, preload_params())
    timeline["imports_done"] = time.time()
    wake_r, wake_w = os.pipe()  # SIGCHLD wakes the select below: nothing polls during a window
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server_pid = os.getpid()
    children: dict[int, int] = {}  # trial pid -> write end of its "go" pipe
    pending = b""
    status.write(encode_status(StatusLine(Word.READY)))
    while True:
        try:
            readable, _, _ = select.select([0, wake_r], [], [])
        except InterruptedError:
            readable = []
        if wake_r in readable:
            os.read(wake_r, 4096)
        _reap(children, status)
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return 0
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            order = decode_order(line.decode(errors="replace"), server=True)
            if order.kind is Kind.LEAVE:
                return 0
            if order.kind is Kind.GO or order.pid is not None:
                fd = children.get(order.pid)  # type: ignore[arg-type]  # GO has no pid: get(None) is None
                if fd is not None:
                    os.write(fd, encode_order(_passed_on(order)).encode())
                continue
            go_r, go_w = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(go_w)
                for fd in children.values():
                    os.close(fd)
                os.close(wake_r)
                os.close(wake_w)
                if order.kind is Kind.PROBE:
                    _child(_probe, str(order.config), str(order.log), go_r, server_pid, status)  # never returns
                if order.kind is Kind.PREPARE:  # its output the server's until it has a trial
                    _child(lambda device, st: prepared(device, st, {**timeline, "forked": time.time()},
                                                       context=order.context),
                           str(order.device), None, go_r, server_pid, status)  # never returns
                _child(lambda config, st: run_forked(config, st, {**timeline, "forked": time.time()}),
                       str(order.config), str(order.log), go_r, server_pid, status)  # never returns
            os.close(go_r)
            children[pid] = go_w
            if os.environ.get("ORCHESTRATE_TEST_FORKED_DELAY_S"):  # tests only: the child speaks first
                time.sleep(float(os.environ["ORCHESTRATE_TEST_FORKED_DELAY_S"]))
            status.write(encode_status(StatusLine(Word.FORKED, pid)))


def _passed_on(order: Order) -> Order:
    """A server's order for one child, as that child reads it: ``go``, or to a prepared process
    (``prepared.py``) make its context, or its configuration and log."""
    if order.kind is Kind.GO:
        return GO
    if order.kind is Kind.PREPARE:
        return Order(Kind.PREPARE)
    return Order(Kind.RUN, config=order.config, log=order.log)


def _reap(children: dict[int, int], status: TextIO) -> None:
    """Reap what exited: a trial (or the probe) is said; once one has, what it left behind,
    re-parented to this server (a subreaper: ``subreaper``), is killed, and reaped here later."""
    ended = False
    while True:
        try:
            pid, wait_status, rusage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not pid:
            break
        fd = children.pop(pid, None)
        if fd is None:  # an orphan this server adopted and killed
            continue
        os.close(fd)
        ended = True
        status.write(encode_status(StatusLine(Word.EXITED, pid, os.waitstatus_to_exitcode(wait_status), rusage.ru_maxrss)))
    if ended:
        for orphan in subreaper.adopted(children):
            try:
                os.kill(orphan, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _child(body: Callable[[str, TextIO], int], path: str, log_path: str | None, go_fd: int, server_pid: int,
           status: TextIO) -> None:
    """A forked child (a trial, the probe, or a prepared process): a session of its own (the
    launcher kills its group), its orders on its "go" pipe and stdin /dev/null (``orders``), output
    to its log (None: the server's), then ``body(path, status)``, whose return is its exit code."""
    code = 1
    try:
        os.setsid()
        _oom_first()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        orders.take(go_fd)  # its orders on the "go" pipe, stdin /dev/null (not the server's orders)
        if log_path is not None:
            log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
        os.environ[PARENT_PID_ENV] = str(server_pid)
        code = body(path, status)
    except BaseException:  # noqa: BLE001 - whatever happens, this process must not return into the server
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        subreaper.end_descendants()  # what it started ends with it, setsid or not
        if os.environ.get("ORCHESTRATE_TEST_EXIT_DELAY_S"):  # tests only: a process slow to exit
            time.sleep(float(os.environ["ORCHESTRATE_TEST_EXIT_DELAY_S"]))
        os._exit(code)


OOM_SCORE_ADJ = 500
"""A forked child's ``/proc/self/oom_score_adj`` (-1000 to 1000; raising one's own needs no
privilege): where the host runs out of memory, Linux's OOM killer takes the trial that used it,
which is then recorded as killed (``crashed``), before the fork server or the orchestrator, whose
death would cut off every trial of the slot (a dead server's trial is ``interrupted`` and run again)."""


def _oom_first() -> None:
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(OOM_SCORE_ADJ))
    except OSError:  # not Linux, or no /proc: nothing to prefer
        pass


def _probe(request_path: str, status: TextIO) -> int:
    """The probe, forked: ``probe.answer`` for the request, each answer written beside it
    (``protocol.probe_answer``) and then said (``PID result``)."""
    import json

    from orchestrator.trialdir import write_atomically
    from orchestrator.harness.probe import answer

    watch_parent()  # the server: if it dies (with the orchestrator), so does the probe
    with open(request_path) as f:
        request = json.load(f)

    def say(name: str, out: dict[str, Any]) -> None:
        write_atomically(probe_answer(request_path, name), json.dumps(out, indent=1, default=str))
        status.write(encode_status(StatusLine(Word.RESULT, os.getpid())))

    answer(request["experiment"], request["device"], request["fixed"], request.get("smoke"), say,
           request.get("smoke_script"), os.path.join(os.path.dirname(request_path), "probe.log"),
           request.get("temp_dir"))
    return 0


def run_forked(config_path: str, status: TextIO, timeline: dict[str, Any]) -> int:
    """The trial, as ``--serve`` runs it once it has its configuration; ``timeline`` holds the
    server's start and end of imports, and when this process was forked."""
    watch_parent()  # the server: if it dies (with the orchestrator), so does this trial
    return run_given(config_path, status, timeline, pid=os.getpid())
