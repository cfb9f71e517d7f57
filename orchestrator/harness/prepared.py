"""The process a fork server forks for a slot's next trial before that trial is known
(``protocol.Kind.PREPARE``; the launcher's side: ``launch/spares.py``, ``SparePool.prepare_next``).

It initialises the device as the trial's set-up would first (a CUDA context: 0.3 s on an H100),
says ready, and waits for its configuration, which the launcher sends once the slot's previous
process has exited. The launcher asks for it once the current trial's window is over (``measured``),
so it is made while the old process writes its result and exits, never beside a timed window
(``launch/host.py`` gates it like an import). On a host of several CUDA slots, where some window
nearly always runs, it is forked instead as its slot's trial starts and initialises only the
driver (``init_driver``: 0.2 s of the 0.3 s on an H100, the part the host's driver does for one
process at a time, and 4 MiB of the GPU against the context's 520 MiB), beside the windows; the
context (0.1 s) follows once that trial's window is over and none runs on the host, else in the
trial's set-up. Nothing else of the trial moves: the same process
state, the same order of set-up steps, its memory cap set after the device as before.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any

from orchestrator.harness import orders
from orchestrator.harness.child import run_given, watch_parent
from orchestrator.protocol import Kind, StatusLine, Word, decode_order, encode_status

PREPARE_FAILED = 3
"""The exit code of a prepared process whose device could not be initialised (the previous
trial's process still held the memory a context needs, say): the launcher forks the trial afresh."""


def prepared(device: str, status: Any, timeline: dict[str, Any], context: bool = True) -> int:
    """A process forked for the next trial before its configuration is known (``PREPARE``): it
    initialises ``device`` now, as the trial's own set-up would first (``backend.init_device``:
    on CUDA the context, 0.3 s on an H100), says ``PID ready``, and waits on its stdin for the
    configuration and the log its output goes to (``{"run": CONFIG, "log": LOG}``); then it is
    the trial (``child.run_given``). If the device cannot be initialised it exits
    (``PREPARE_FAILED``) before saying ready, and the trial gets a process forked for it, as
    without preparing: a failed initialisation is never the trial's (the launcher gives a trial
    only to a process that is ready). EOF: leave, having run nothing. ``context`` false: only the
    device's driver (``backend.init_driver``: on CUDA no memory of the GPU), for a process forked
    while its slot's trial runs (``SparePool.prepare_driver``); it makes the context when told
    (``{"context": true}``, once that trial's window is over and none runs on the host) and says
    ready again, else its trial's set-up makes it."""
    watch_parent()  # the server: if it dies (with the orchestrator), so does this process
    pid = os.getpid()
    try:
        from orchestrator.harness import backend

        (backend.init_device if context else backend.init_driver)(backend.resolve(device))
    except Exception:  # noqa: BLE001 - said in the server's log; the trial is forked afresh
        traceback.print_exc()
        return PREPARE_FAILED
    timeline["prepared"] = time.time()
    status.write(encode_status(StatusLine(Word.READY, pid)))
    order = decode_order(orders.readline())
    if order.kind is Kind.PREPARE and not context:  # the context now, no window running on the host
        try:
            backend.init_device(backend.resolve(device))
        except Exception:  # noqa: BLE001 - as above
            traceback.print_exc()
            return PREPARE_FAILED
        timeline["context"] = time.time()
        status.write(encode_status(StatusLine(Word.READY, pid)))
        order = decode_order(orders.readline())
    if order.kind is not Kind.RUN:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open(str(order.log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    return run_given(str(order.config), status, timeline, pid=pid)
