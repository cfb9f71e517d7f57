"""Fault injection: a tiny workload that fails on purpose, in every way a trial can fail.

Use from a spec (``experiment: experiments.faults``) with ``fault:`` fixed or swept, to see how
the orchestrator records each failure; the reliability tests use it. ``fault_step`` is the loss
call that fails (0 = the first warm-up micro-batch); the model itself is a small MLP.

| fault              | what happens                                                | recorded as |
|--------------------|-------------------------------------------------------------|-------------|
| none               | trains normally                                             | ok          |
| oom_cuda           | raises torch.OutOfMemoryError with CUDA's real message      | oom         |
| oom_mps            | raises RuntimeError with MPS's real message                 | oom         |
| oom_cpu            | raises RuntimeError with the CPU allocator's real message   | oom         |
| allocate           | allocates 256 MiB blocks until the real CPU allocator fails | oom (with cpu_memory_limit_gib) |
| segfault           | os.kill(getpid(), SIGSEGV)                                  | crashed (SIGSEGV) |
| sigkill            | os.kill(getpid(), SIGKILL)                                  | crashed (SIGKILL) |
| hang               | sleeps forever                                              | timeout     |
| exit               | os._exit(fault_exit_code) without a result                  | error       |
| exception          | raises ValueError                                           | error       |
| nan                | the loss becomes NaN                                        | diverged    |
| truncated_result   | writes half a JSON result, then exits 0                     | error       |
| garbage_result     | writes bytes that are not JSON, then exits 0                | error       |
| grandchild         | starts a `sleep` child process, then hangs                  | timeout (and the sleep is killed with the group) |
| daemon             | starts a grandchild that calls setsid (`sleep`, in a session of its own), then trains | ok (and the grandchild ends with the trial) |
| daemon_hang        | the same grandchild, then hangs                             | timeout (and the grandchild is killed) |
| delete_folder      | deletes its own trial folder, then trains                   | error (its result cannot be written) |
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch
from torch import nn

from orchestrator.harness.workload import Workload

FAULTS = ("none", "oom_cuda", "oom_mps", "oom_cpu", "allocate", "segfault", "sigkill", "hang",
          "exit", "exception", "nan", "truncated_result", "garbage_result", "grandchild", "daemon", "daemon_hang",
          "delete_folder")
PARAMS: dict[str, object] = {"fault": "none", "fault_step": 0, "fault_exit_code": 3,
                             "hidden_size": 32, "lr": 1e-3, "seed": 0}

# Real messages, as each backend prints them (see tests/fixtures/oom_messages.py).
CUDA_OOM = ("CUDA out of memory. Tried to allocate 279.40 GiB. GPU 0 has a total capacity of 79.18 GiB "
            "of which 77.73 GiB is free. Including non-PyTorch memory, this process has 1.44 GiB memory "
            "in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by "
            "PyTorch but unallocated.")
MPS_OOM = ("MPS backend out of memory (MPS allocated: 17.23 GiB, other allocations: 1.02 GiB, max "
           "allowed: 18.13 GiB). Tried to allocate 256.00 MiB on shared pool. Use "
           "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations "
           "(may cause system failure).")
CPU_OOM = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
           "you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)")


def validate_params(params: dict[str, Any]) -> None:
    if "fault" in params and params["fault"] not in FAULTS:
        raise ValueError(f"unknown fault {params['fault']!r}; choose one of {', '.join(FAULTS)}")


def inject(fault: str, exit_code: int = 3) -> torch.Tensor | None:
    """Fail as ``fault`` says; returns a NaN for ``nan``, None when nothing fails."""
    if fault == "oom_cuda":
        raise torch.OutOfMemoryError(CUDA_OOM)
    if fault == "oom_mps":
        raise RuntimeError(MPS_OOM)
    if fault == "oom_cpu":
        raise RuntimeError(CPU_OOM)
    if fault == "allocate":
        hoard = []
        while True:  # until the allocator refuses: a real out-of-memory under RLIMIT_DATA
            hoard.append(torch.ones(64 * 1024 * 1024))  # 256 MiB, touched so it is really used
    if fault == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "grandchild":  # like a compile or data-loader worker: a process of the trial's own
        import subprocess

        subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        fault = "hang"
    if fault in ("daemon", "daemon_hang"):  # a grandchild in a session of its own: out of the trial's group
        import subprocess
        import sys

        subprocess.run([sys.executable, "-c", "import subprocess; subprocess.Popen(['sleep', '600'], "
                        "start_new_session=True, stdin=subprocess.DEVNULL)"], check=True)
        fault = "hang" if fault == "daemon_hang" else "none"
    if fault == "delete_folder":  # a trial that cleans up after itself too eagerly
        import shutil

        shutil.rmtree(os.path.dirname(os.environ["ORCHESTRATE_RESULT_PATH"]))
        fault = "none"
    if fault == "hang":
        while True:
            time.sleep(3600)
    if fault == "exit":
        os._exit(exit_code)
    if fault == "exception":
        raise ValueError("injected failure: this is the exception's last line")
    if fault in ("truncated_result", "garbage_result"):
        path = os.environ["ORCHESTRATE_RESULT_PATH"]
        with open(path, "wb") as f:
            f.write(b'{"status": "ok", "metrics": {"samples_' if fault == "truncated_result"
                    else b"\x00\xffnot json at all\n")
        os._exit(0)
    if fault == "nan":
        return torch.tensor(float("nan"))
    return None


def build(params: dict[str, Any], device: torch.device) -> Workload:
    # Faults belong to trials: orchestrate's smoke step (ORCHESTRATE_SMOKE=1) checks that this
    # module trains at all, and must not trip on the fault its first configuration injects.
    fault = "none" if os.environ.get("ORCHESTRATE_SMOKE") else str(params.get("fault", "none"))
    fault_step = int(params.get("fault_step", 0))
    exit_code = int(params.get("fault_exit_code", 3))
    hidden = int(params.get("hidden_size", 32))
    model = nn.Sequential(nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 4)).to(device)
    calls = {"n": 0}

    def make_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch_size, 16, device=device)
        return x, (x[:, :4].argmax(dim=1))

    def loss(m: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        out = nn.functional.cross_entropy(m(x), y)
        if calls["n"] == fault_step:
            nan = inject(fault, exit_code)
            if nan is not None:
                out = out * nan.to(out.device)
        elif fault == "nan" and calls["n"] > fault_step:
            out = out * float("nan")
        calls["n"] += 1
        return out

    return Workload(model=model, make_batch=make_batch, loss=loss, blocks=(model[0],),
                    lr=float(params.get("lr", 1e-3)), info={"fault": fault})
