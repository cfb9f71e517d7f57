"""What slows a launch-bound trial while other GPUs' trials compile (issue #41 item 3)?

On 4 x H100 the small BERT's eager batch 64 (bfloat16, 128 tokens) measured 0.839 and 0.929 of its
one-GPU throughput in two sweeps whose other slots were compiling (docs/gpu/beside). Each slot's
trials are pinned to their own cores (``launch/slots.gpu_cores``), so the compile's workers do not
share the measured trial's cores; this probe tells the candidates apart. One process trains the
small BERT eager (batch 64, bfloat16 autocast, AdamW) on GPU 0, pinned to GPU 0's cores as a sweep
pins it, and times windows of 40 steps, while the other GPUs' slots do, in turn:

- ``alone``: nothing;
- ``compile``: ``torch.compile`` of the same model (``max-autotune-no-cudagraphs``, Inductor's
  workers), again and again, each pinned to its own slot's cores, as a compiled trial there;
- ``burn``: one busy Python loop on every core of their slots (the cores busy, no GPU, no compile);
- ``burn_own``: the same loops on the cores of the measured process's own NUMA node outside its slot
  (none where its node has no other slot);
- ``contexts``: on each other GPU, one process (one core of its slot, no torch) making and
  destroying a CUDA context again and again (``cuCtxCreate``): the driver's work that a trial's
  set-up does, with little CPU.

Per phase: the median window's throughput (samples/s) and its ratio to ``alone``'s, and the mean
clock of the measured process's cores (``scaling_cur_freq``, else ``/proc/cpuinfo``) and of the
others'. If ``burn`` slows it as ``compile`` does, the cause is the shared CPU package (its clock
under load, its cache, its memory), not the GPU, PCIe or the compile as such.

    python3 docs/gpu/compile_beside_probe.py --rounds 2      # on a host with 2 or more GPUs
    python3 docs/gpu/compile_beside_probe.py --rounds 3 --phases alone,contexts,alone,burn
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MEASURED = r"""
import json, os, sys, time, torch
from experiments.bert import build
os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
dev = torch.device("cuda")
w = build({"model": "bert-mini", "seq_len": 128}, dev)
opt = torch.optim.AdamW(w.model.parameters(), lr=1e-4, fused=True)
batch = w.make_batch(64)
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = w.loss(w.model, batch)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(20): step()
torch.cuda.synchronize()
print("ready", flush=True)
for line in sys.stdin:
    n = int(line)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): step()
    torch.cuda.synchronize()
    print(json.dumps({"samples_per_s": 64 * n / (time.perf_counter() - t)}), flush=True)
"""

COMPILER = r"""
import os, sys, torch, torch._dynamo
from experiments.bert import build
os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
dev = torch.device("cuda")
w = build({"model": "bert-mini", "seq_len": 128}, dev)
batch = w.make_batch(64)
while True:
    torch._dynamo.reset()
    m = torch.compile(w.model, mode="max-autotune-no-cudagraphs")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        w.loss(m, batch).backward()
    torch.cuda.synchronize()
"""

BURN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass\n"

CONTEXTS = r"""
import ctypes, os, sys
os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
while True:  # a context made and destroyed, again and again: the driver's work, one core, no torch
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    cuda.cuCtxDestroy_v2(ctx)
"""


def clock_mhz(cores: set[int]) -> float | None:
    got = []
    for c in cores:
        try:
            got.append(int(Path(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq").read_text()) / 1000)
        except (OSError, ValueError):
            pass
    if not got:
        try:
            mhz = {}
            for block in Path("/proc/cpuinfo").read_text().split("\n\n"):
                kv = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
                if "processor" in {k.strip() for k in kv}:
                    fields = {k.strip(): v.strip() for k, v in kv.items()}
                    mhz[int(fields["processor"])] = float(fields.get("cpu MHz", "nan"))
            got = [mhz[c] for c in cores if c in mhz]
        except (OSError, ValueError, KeyError):
            return None
    return statistics.fmean(got) if got else None


def main() -> None:
    from orchestrator.harness import hostcpu
    from orchestrator.launch.slots import _parse_list, available_cores, gpu_cores
    from orchestrator.machine import list_gpus

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--windows", type=int, default=8, help="timed windows per phase")
    p.add_argument("--steps", type=int, default=40, help="steps per window")
    p.add_argument("--settle-s", type=float, default=6.0, help="seconds a phase's load runs before its windows")
    p.add_argument("--phases", default="alone,compile,alone,burn,alone,burn_own",
                   help="the phases of a round, in order (alone, compile, burn, burn_own, contexts)")
    args = p.parse_args()
    gpus = list_gpus()
    cores = gpu_cores(gpus, available_cores())
    assert len(gpus) >= 2 and cores is not None, "needs 2 or more GPUs and pinning"
    mine, others = cores[0], list(cores[1:])
    node = None
    try:
        bus = gpus[0].pci_bus_id.lower()
        bus = bus[4:] if len(bus) == 16 else bus
        node = _parse_list(Path(f"/sys/bus/pci/devices/{bus}/local_cpulist").read_text())
    except (OSError, ValueError):
        pass
    own_node_rest = sorted((node or set()) - mine - set().union(*others)) if node else []
    print(f"GPUs {len(gpus)}; measured on GPU 0 pinned to {len(mine)} CPUs; others' slots {[len(o) for o in others]} CPUs; "
          f"GPU 0's node {len(node or ())} CPUs, {len(own_node_rest)} of them in no slot")
    env0 = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus[0].uuid, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    measured = subprocess.Popen([sys.executable, "-c", MEASURED, ",".join(map(str, sorted(mine)))], env=env0,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert measured.stdout.readline().strip() == "ready"

    def windows() -> tuple[list[float], list[float], list[float]]:
        out, mhz_mine, mhz_others = [], [], []
        start = hostcpu.read()
        for _ in range(args.windows):
            measured.stdin.write(f"{args.steps}\n")
            measured.stdin.flush()
            a, b = clock_mhz(mine), clock_mhz(set().union(*others))
            out.append(json.loads(measured.stdout.readline())["samples_per_s"])
            mhz_mine += [x for x in (a, clock_mhz(mine)) if x]
            mhz_others += [x for x in (b, clock_mhz(set().union(*others))) if x]
        busy.append(hostcpu.others_busy(start, hostcpu.read()))  # the measured process's own core included
        return out, mhz_mine, mhz_others

    def load(phase: str) -> list[subprocess.Popen]:
        procs = []
        if phase == "compile":
            for g, c in zip(gpus[1:], others):
                env = {**env0, "CUDA_VISIBLE_DEVICES": g.uuid}
                procs.append(subprocess.Popen([sys.executable, "-c", COMPILER, ",".join(map(str, sorted(c)))], env=env,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        elif phase == "burn":
            for c in sorted(set().union(*others)):
                procs.append(subprocess.Popen([sys.executable, "-c", BURN, str(c)], start_new_session=True))
        elif phase == "contexts":
            for g, c in zip(gpus[1:], others):
                env = {**env0, "CUDA_VISIBLE_DEVICES": g.uuid}
                procs.append(subprocess.Popen([sys.executable, "-c", CONTEXTS, str(min(c))], env=env,
                                              start_new_session=True))
        elif phase == "burn_own" and own_node_rest:
            for c in own_node_rest:
                procs.append(subprocess.Popen([sys.executable, "-c", BURN, str(c)], start_new_session=True))
        return procs

    busy: list[float | None] = []
    results: dict[str, list[float]] = {}
    clocks: dict[str, tuple[list[float], list[float]]] = {}
    try:
        for r in range(args.rounds):
            for phase in args.phases.split(","):
                procs = load(phase)
                time.sleep(args.settle_s if procs else 1.0)
                got, a, b = windows()
                for proc in procs:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                results.setdefault(phase, []).extend(got)
                ca, cb = clocks.setdefault(phase, ([], []))
                ca.extend(a)
                cb.extend(b)
                print(f"round {r + 1} {phase:<9} median {statistics.median(got):8.0f} samples/s over {len(got)} windows, "
                      f"host CPU busy {busy[-1] if busy[-1] is not None else float('nan'):.0%}"
                      f"{'' if procs or phase == 'alone' else ' (no load: nothing to run it on)'}", flush=True)
    finally:
        measured.kill()
    base = statistics.median(results["alone"])
    print(f"\n{'phase':<10} {'samples/s':>10} {'x alone':>8} {'MHz own cores':>14} {'MHz others':>11}")
    for phase, got in results.items():
        a, b = clocks[phase]
        fa = f"{statistics.fmean(a):14.0f}" if a else f"{'-':>14}"
        fb = f"{statistics.fmean(b):11.0f}" if b else f"{'-':>11}"
        print(f"{phase:<10} {statistics.median(got):10.0f} {statistics.median(got) / base:8.3f} {fa} {fb}")


if __name__ == "__main__":
    main()
