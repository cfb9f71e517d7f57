"""Trial process entry: ``python -m orchestrator.harness CONFIG.json``.

Runs one trial and writes its result as JSON to ``config["result_path"]`` (atomically). The
process exits 0 whenever it could write a result; the status lives in the file. Anything else
(a signal, a crash before the result is written) is classified by the orchestrator.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any


def watch_parent(interval_s: float = 0.5) -> None:
    """Kill this trial's process group if the orchestrator dies: at once on Linux, where the
    launcher's PR_SET_PDEATHSIG sends SIGTERM; within ``interval_s`` everywhere (macOS has no
    PDEATHSIG), by polling the parent pid from a thread (torch releases the GIL in its kernels)."""
    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(os.getpgrp(), signal.SIGKILL))

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=loop, name="parent-watchdog", daemon=True).start()


def write_result(path: str, result: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    body = lines[0] if lines else ""
    return f"{type(exc).__name__}: {body}" if body else type(exc).__name__


def main(argv: list[str]) -> int:
    t_main = time.time()
    if len(argv) != 2:
        print("usage: python -m orchestrator.harness CONFIG.json", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        config = json.load(f)
    if config.get("watch_parent", True):
        watch_parent()
    # Imported here so that a broken torch install is reported as this trial's error.
    from orchestrator.harness import backend, train
    from orchestrator.harness.oom import is_oom_exception

    t_imports = time.time()
    progress = train.Progress()
    result: dict[str, Any]
    device = config["params"].get("device", "auto")
    try:
        out = train.run(config, progress)
        device = out["device"]
        status = "ok" if out["finite"] else "diverged"
        result = {"status": status, "metrics": out["metrics"], "applied": out["applied"],
                  "not_applied": out["not_applied"], "info": out["info"]}
        if status == "diverged":
            result["detail"] = "the loss became NaN or infinite"
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded status
        traceback.print_exc()
        oom = is_oom_exception(exc)
        detail = last_line(exc)
        if progress.phase == "compile" and not oom:
            detail = f"torch.compile failed on {device} (experimental there): {detail}"
        result = {"status": "oom" if oom else "error", "detail": detail,
                  "phase": progress.phase, "step": progress.step}
        del exc
        try:
            device = backend.resolve(device)
            if oom:
                result["memory_at_failure"] = backend.memory_now(device)
        except Exception:  # noqa: BLE001
            pass
    try:
        result["provenance"] = backend.describe(backend.resolve(device))
    except Exception as exc:  # noqa: BLE001 - provenance must not hide the result
        result["provenance"] = {"error": last_line(exc)}
    result["timeline"] = {"main": t_main, "imports_done": t_imports, **progress.marks,
                          "result_written": time.time()}
    write_result(config["result_path"], result)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
