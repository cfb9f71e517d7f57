"""The trial process's own side: what ``python -m orchestrator.harness`` runs (the entry,
``__main__.py``, only dispatches here).

A trial runs in a process of its own, given a ``protocol.TrialConfig``, and writes its
``protocol.TrialResult`` to the config's ``result_path`` (atomically). The process exits 0 whenever it could write a result; the status lives in the file.
Anything else (a signal, a crash before the result is written) is classified by the orchestrator.
Three ways in: ``main`` (one trial, started cold from a config file), ``serve`` (a pre-started
interpreter, given its configuration on stdin) and the fork server's children
(``forkserver.py``), which run ``run_given`` as ``serve`` does. Every one of them first installs
``watch_parent``, before anything heavy is imported; so do the other harness processes the
orchestrator starts (``probe``, ``doctor``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from orchestrator.errors import first_line
from orchestrator.harness import orders, subreaper
from orchestrator.harness.ahead import preload_params
from orchestrator.trialdir import LOG, write_atomically
from orchestrator.protocol import (CPU_CORES_ENV, PARENT_PID_ENV, SERVE_FLAG, STATUS_FD_ENV, Kind, StatusLine,
                                           TrialConfig, TrialResult, Word, decode_config, decode_order,
                                           encode_result, encode_status)

if TYPE_CHECKING:
    from orchestrator.harness.train import Progress


def watch_parent(interval_s: float = 0.5, thread: bool = True) -> None:
    """Kill this trial's process group if the orchestrator dies: at once on Linux, where
    PR_SET_PDEATHSIG sends SIGTERM; within ``interval_s`` everywhere (macOS has no PDEATHSIG), by
    polling the parent pid from a thread (torch releases the GIL in its kernels). Set here, in the
    child, rather than in a ``preexec_fn``, which is unsafe in an orchestrator that runs threads.
    ``thread=False``: PDEATHSIG alone (the Linux fork server, which must not start threads)."""
    expected = os.environ.get(PARENT_PID_ENV)
    parent = int(expected) if expected and expected.isdigit() else os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: end_all())
    subreaper.become()  # its descendants stay in its tree, setsid or not, and end with it
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the orchestrator died before the line above took effect
        end_all()
    if not thread:
        return

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                end_all()

    threading.Thread(target=loop, name="parent-watchdog", daemon=True).start()


def end_all() -> None:
    """This process, its process group and every descendant that left it, those first
    (``subreaper.end_outside_group``: its DataLoader's workers die with it, not before it), its
    named semaphores unlinked."""
    subreaper.unlink_semaphores()
    subreaper.end_outside_group(os.getpid(), os.getpgrp())
    os.killpg(os.getpgrp(), signal.SIGKILL)


def pin_cores() -> None:
    """A CPU slot's trial runs on its own cores (``ORCHESTRATE_CPU_CORES``), set before ``import
    torch`` so that its thread pools are sized to them."""
    cores = os.environ.get(CPU_CORES_ENV)
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})


def use_temp_dir(folder: str | None) -> None:
    """multiprocessing's files (the sockets by which DataLoader workers pass tensors) in ``folder``,
    the orchestrator's to remove (``TrialConfig.temp_dir``): set before the script or the
    experiment forks its workers, which inherit it."""
    if folder is not None:
        from multiprocessing import process

        process.current_process()._config["tempdir"] = folder  # type: ignore[attr-defined]  # multiprocessing.util.get_temp_dir reads it first


def write_result(path: str, result: TrialResult) -> None:
    """The trial's result, written atomically (``encode_result``)."""
    write_atomically(path, encode_result(result))


def run_config(config: TrialConfig, timeline: dict[str, float],
               before_window: Callable[[], None] | None = None,
               said: Callable[[], None] | None = None,
               after_window: Callable[[], None] | None = None) -> None:
    """Run one trial and write its result file; every failure becomes a recorded status. A script
    trial (``config.script``) ends its process once its window closes: its result written and,
    given ``said``, said, the process exits here (the script need not finish)."""
    # Imported here so that a broken torch install is reported as this trial's error.
    from orchestrator.harness import backend, train

    timeline.setdefault("imports_done", time.time())
    assert config.result_path is not None, "the launcher gives every trial its result's path"
    os.environ["ORCHESTRATE_RESULT_PATH"] = config.result_path  # for experiments that report themselves
    use_temp_dir(config.temp_dir)
    progress = train.Progress(before_window, after_window)
    device = config.params.get("device", "auto")
    try:
        if config.script is not None:
            from orchestrator.harness import script

            def end(result: TrialResult, where: str) -> None:
                conclude(config, result, where, progress, timeline)
                if said is not None:
                    said()
                sys.stdout.flush()
                sys.stderr.flush()
                subreaper.end_descendants()  # what the script started ends with it, setsid or not
                os._exit(0)  # the window is over: the script need not finish

            def finish(out: dict[str, Any]) -> None:
                end(measured(out), out["device"])

            def abort(exc: BaseException) -> None:
                end(failed(exc, config, progress, device), device)

            script.run(config, progress, finish, abort)  # returns only by raising
        out = train.run(config, progress)
        device = out["device"]
        result = measured(out)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded status
        result = failed(exc, config, progress, device)
        del exc
        try:
            device = backend.resolve(device)
            if result.status == "oom":
                result.memory_at_failure = backend.memory_now(device)
        except Exception:  # noqa: BLE001
            pass
    conclude(config, result, device, progress, timeline)


def measured(out: dict[str, Any]) -> TrialResult:
    """The result of a trial that measured its window (``train.run``'s or the script meter's figures)."""
    status = out.get("status", "ok") if out["finite"] else "diverged"
    result = TrialResult(status, metrics=out["metrics"], applied=out["applied"], not_applied=out["not_applied"],
                         info=out["info"])
    if status == "diverged":
        result.detail = "the loss became NaN or infinite"
    elif out.get("detail"):
        result.detail = out["detail"]
    return result


def failed(exc: BaseException, config: TrialConfig, progress: Progress, device: str) -> TrialResult:
    """The result of a trial that raised: out of memory, or an error with one line on it (a
    script's: where in it, and the last lines it printed)."""
    from orchestrator.harness.oom import is_oom_exception

    oom = is_oom_exception(exc)
    detail = first_line(exc)
    if progress.phase == "compile" and not oom:
        detail = f"torch.compile failed on {device} (experimental there): {detail}"
    if config.script is not None and not oom:  # what it printed last, read before the traceback is
        from orchestrator.harness.scriptfile import describe_failure

        own = getattr(exc, "ended", False)  # the harness's own words (``script.ScriptEnded``, ``Unmeasurable``)
        log = os.path.join(os.path.dirname(str(config.result_path)), LOG)
        detail = describe_failure(exc, config.script.path, log, str(exc) if own else detail)
        if own:
            return TrialResult("error", detail, phase=progress.phase, step=progress.step)
    traceback.print_exception(exc)
    return TrialResult("oom" if oom else "error", detail, phase=progress.phase, step=progress.step)


def conclude(config: TrialConfig, result: TrialResult, device: str, progress: Progress,
             timeline: dict[str, float]) -> None:
    """Where and how the trial ran, then its result written (atomically)."""
    from orchestrator.harness import backend

    try:
        result.provenance = backend.describe(backend.resolve(device))
    except Exception as exc:  # noqa: BLE001 - provenance must not hide the result
        result.provenance = {"error": first_line(exc)}
    result.placement = placement()
    import resource

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    result.process_peak_rss_gib = maxrss / (1024 ** 3 if sys.platform == "darwin" else 1024 ** 2)
    result.timeline = {**timeline, **progress.marks, "result_written": time.time()}
    assert config.result_path is not None
    write_result(config.result_path, result)


def placement() -> dict[str, Any]:
    """Where this process ran: the GPU it was given and the cores it may use."""
    out: dict[str, Any] = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
                           if k in os.environ}
    if hasattr(os, "sched_getaffinity"):
        out["cpu_cores"] = len(os.sched_getaffinity(0))
    if "torch" in sys.modules:  # what ran, beside what the environment asked (a script may set it)
        out["threads"] = sys.modules["torch"].get_num_threads()
    return out


def main(argv: list[str]) -> int:
    """``python -m orchestrator.harness CONFIG.json``: one trial, started cold."""
    timeline = {"main": time.time()}
    if len(argv) != 2:
        print(f"usage: python -m orchestrator.harness CONFIG.json | {SERVE_FLAG} EXPERIMENT", file=sys.stderr)
        return 2
    if argv[1] == SERVE_FLAG:
        print(f"usage: python -m orchestrator.harness {SERVE_FLAG} EXPERIMENT", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        config = decode_config(f.read())
    if config.watch_parent:
        watch_parent()
    pin_cores()
    preload(config.experiment)  # what a pre-started interpreter has loaded: not the trial's start-up
    timeline["imports_done"] = time.time()
    run_config(config, timeline)
    return 0


def serve(experiment: str) -> int:
    """``python -m orchestrator.harness --serve EXPERIMENT [FOLDER]``: a pre-started trial interpreter.

    Imports torch, the harness and the experiment module, says ``ready`` on the status pipe
    (``ORCHESTRATE_STATUS_FD``) and waits, idle, for a line on stdin: the path of its trial's
    config (an empty line or EOF: exit). Nothing here touches a device before that line: ``import
    torch`` creates no CUDA context and no MPS allocator (``orchestrator/launch/spares.py`` cites
    the source), so the allocator settings in this process's environment are still unread. At
    the end of the warm-up it says ``window`` and waits for ``go`` (the launcher holds the window
    until the device's next pre-started interpreter is idle), once the window's figures are read
    ``measured``, and after the result file ``result``. The lines are ``protocol.py``'s.
    """
    timeline = {"main": time.time()}
    status = os.fdopen(int(os.environ[STATUS_FD_ENV]), "w", buffering=1)
    watch_parent()
    pin_cores()
    preload(experiment, preload_params())
    timeline["imports_done"] = time.time()
    status.write(encode_status(StatusLine(Word.READY)))
    order = decode_order(orders.readline())
    if order.kind is not Kind.RUN:  # leave
        return 0
    return run_given(str(order.config), status, timeline)


def run_given(config_path: str, status: Any, timeline: dict[str, Any], pid: int | None = None) -> int:
    """The trial, once its configuration's path has arrived: in a ``--serve`` interpreter, or in a
    child of the fork server, which gives its ``pid`` in its status lines. Says ``window`` and
    waits for ``go`` on stdin before the timed window, ``measured`` once it is over, ``result``
    after the result file (``protocol.py``)."""
    timeline["config_received"] = time.time()
    with open(config_path) as f:
        config = decode_config(f.read())

    def gate() -> None:
        status.write(encode_status(StatusLine(Word.WINDOW, pid)))
        orders.readline()  # go (or EOF: the launcher is gone, and the watchdog acts)
        timeline["go"] = time.time()

    def said() -> None:
        status.write(encode_status(StatusLine(Word.RESULT, pid)))

    def over() -> None:
        status.write(encode_status(StatusLine(Word.MEASURED, pid)))

    run_config(config, timeline, gate, said, over)
    sys.stdout.flush()
    sys.stderr.flush()
    said()
    return 0


def is_script(workload: str) -> bool:
    """Whether a trial process's workload is a script's file rather than a module's name."""
    return workload.endswith(".py") or os.sep in workload


def preload(experiment: str, fixed: dict[str, Any] | None = None) -> None:
    """The imports every trial needs, done before its configuration is known. Device-neutral:
    no tensor is made, no backend is initialised. A failure here is left for the trial (or the
    probe) to report: it imports the module again and records the error. The experiment comes
    first (it imports torch itself): what it does at import time happens at once, and a module
    that cannot be imported, or that has no ``build`` (no trial of it can run), is reported by
    the probe without waiting for the seconds of the rest. Last, given the sweep's ``fixed``
    parameters, the module's own preload hook (``ahead.run_hook``). All of it under
    ``ahead.fork_safe``: a module that asks whether CUDA is there does not spoil the forks."""
    from orchestrator.harness.ahead import fork_safe, run_hook

    with fork_safe():
        module = _imports(experiment)
        if module is not None and fixed is not None:
            run_hook(module, fixed)


def _imports(experiment: str) -> Any:
    """``preload``'s imports; the experiment's module where trials of it can run (None: a
    script, or a module that cannot be imported or has no ``build``)."""
    import importlib

    module = None
    if is_script(experiment):
        from orchestrator.harness.scriptfile import preload_imports

        preload_imports(experiment)  # the script's own top-level imports (transformers, lightning, ...)
    else:
        try:
            module = importlib.import_module(experiment)
        except BaseException:  # noqa: BLE001
            return None
        if not callable(getattr(module, "build", None)):
            return None
    try:
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401 - optimizers import it on first use (1.5 s on a small CPU)
        import torch.optim  # noqa: F401
        import torch.utils.checkpoint  # noqa: F401

        from orchestrator.harness import backend, train  # noqa: F401
        from orchestrator.harness.oom import is_oom_exception  # noqa: F401
        if is_script(experiment):
            from orchestrator.harness import script  # noqa: F401
    except BaseException:  # noqa: BLE001
        pass
    return module
