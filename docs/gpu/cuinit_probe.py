"""Does ``torch.cuda.init()`` make a CUDA context (GPU memory), or only initialise the driver?
(issue #41: whether a slot's next process could initialise the driver beside other slots'
windows and make only its context later.) One process steps through the two phases; between
them the GPU's used memory and its compute processes are read with ``nvidia-smi``.

    python3 docs/gpu/cuinit_probe.py --rounds 3

Prints, per round: each phase's seconds, and the GPU's memory used and compute processes after it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
t = time.time(); import torch; imported = time.time() - t
print(json.dumps({"phase": "imported", "s": imported}), flush=True); sys.stdin.readline()
t = time.time(); torch.cuda.init(); s = time.time() - t
print(json.dumps({"phase": "torch.cuda.init()", "s": s}), flush=True); sys.stdin.readline()
t = time.time(); torch.empty(1, device="cuda"); torch.cuda.synchronize(); s = time.time() - t
print(json.dumps({"phase": "first allocation", "s": s}), flush=True); sys.stdin.readline()
"""


def smi() -> str:
    used = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=memory.used", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()
    apps = subprocess.run(["nvidia-smi", "-i", "0", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip().replace("\n", "; ")
    return f"GPU memory used {used}, compute processes: {apps or 'none'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    for r in range(1, args.rounds + 1):
        print(f"round {r}: before: {smi()}", flush=True)
        p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert p.stdin is not None and p.stdout is not None
        for _ in range(3):
            got = json.loads(p.stdout.readline())
            time.sleep(0.5)
            print(f"round {r}: after {got['phase']} ({got['s']:.3f} s, pid {p.pid}): {smi()}", flush=True)
            p.stdin.write("\n")
            p.stdin.flush()
        p.wait()


if __name__ == "__main__":
    main()
