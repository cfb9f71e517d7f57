"""Synthetic landscapes for the search's own cost on big spaces (issue #27 item 4): not
measurements, a formula, so that a space of 768, 2,304 or 10,000 configurations exists to replay.

    python bench/synthetic_landscape.py                # writes bench/landscapes/scale/*.csv

Throughput (samples/s) rises with the batch and saturates, half precision helps by a factor that
depends on the batch, checkpointing costs a fifth, accumulation helps a little, ``compile`` helps
some configurations and hurts others, and a fixed pseudo-random term per configuration stands for
everything the knobs do that no rule says (up to +-8%). Peak memory grows with the batch and the
micro-batches in flight, shrinks with half precision and checkpointing; past ``LIMIT_GIB`` the
configuration is ``oom``. Each trial costs 3-6 s, as a small model's trial does on a GPU. The
tables are written deterministically (a fixed seed): rerunning the script rewrites the same files.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "landscapes" / "scale"
LIMIT_GIB = 20.0

SPACES = {
    "synthetic_768.csv": {  # 6 knobs
        "batch_size": [8, 16, 32, 64, 128, 256, 512, 1024], "grad_accum_steps": [1, 2, 4, 8],
        "dtype": ["float32", "float16", "bfloat16"], "activation_checkpointing": [False, True],
        "compile": [False, True], "zero_grad": ["set_to_none", "zero_fill"]},
    "synthetic_2304.csv": {  # 7 knobs
        "batch_size": [8, 16, 32, 64, 128, 256, 512, 1024], "grad_accum_steps": [1, 2, 4, 8],
        "dtype": ["float32", "float16", "bfloat16"], "activation_checkpointing": [False, True],
        "compile": [False, True], "zero_grad": ["set_to_none", "zero_fill"], "optimizer": ["adamw", "sgd", "adamw_fused"]},
    "synthetic_10368.csv": {  # 8 knobs: the single-decision check (10,000 configurations and more)
        "batch_size": [8, 16, 32, 64, 128, 256, 512, 1024, 2048], "grad_accum_steps": [1, 2, 4, 8],
        "dtype": ["float32", "float16", "bfloat16"], "activation_checkpointing": [False, True],
        "compile": [False, True], "zero_grad": ["set_to_none", "zero_fill"], "optimizer": ["adamw", "sgd", "adamw_fused"],
        "empty_cache_every": [0, 1, 2, 4]},
}
DTYPE = {"float32": (0.0, 1.0), "float16": (0.5, 0.55), "bfloat16": (0.55, 0.55)}
"""(effect on the log of throughput at the largest batches, memory factor)."""


def row(config: dict, rng: random.Random) -> dict:
    b, accum = config["batch_size"], config.get("grad_accum_steps", 1)
    half, mem_factor = DTYPE[config["dtype"]]
    ckpt = config.get("activation_checkpointing", False)
    x = math.log2(b)
    log_sps = 5.0 + 0.9 * x - 0.035 * x * x + half * min(1.0, x / 8) + 0.03 * math.log2(accum)
    log_sps += -0.22 if ckpt else 0.0
    log_sps += (0.08 if x >= 6 else -0.05) if config.get("compile") else 0.0
    log_sps += {"adamw": 0.0, "sgd": 0.04, "adamw_fused": 0.02}.get(config.get("optimizer", "adamw"), 0.0)
    log_sps += -0.06 if config.get("empty_cache_every") else 0.0
    log_sps += rng.uniform(-0.08, 0.08)
    peak = 1.5 + b * 0.04 * mem_factor * (0.35 if ckpt else 1.0) * (1.0 + 0.1 * (accum > 1))
    duration = 3.0 + 3.0 * rng.random()
    if peak > LIMIT_GIB:
        return {"status": "oom", "samples_per_s": "", "peak_memory_gib": "", "duration_s": round(duration / 3, 3)}
    return {"status": "ok", "samples_per_s": round(math.exp(log_sps), 3), "peak_memory_gib": round(peak, 4),
            "duration_s": round(duration, 3)}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    index = {}
    for name, space in SPACES.items():
        rng = random.Random(name)
        configs = [dict(zip(space, combo)) for combo in itertools.product(*space.values())]
        with (OUT / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=[*space, "status", "samples_per_s", "peak_memory_gib", "duration_s"])
            w.writeheader()
            for c in configs:
                w.writerow({**{k: (str(v).lower() if isinstance(v, bool) else v) for k, v in c.items()}, **row(c, rng)})
        index[name] = {"device": "cuda", "memory_limit_gib": LIMIT_GIB}
        print(f"{OUT / name}: {len(configs)} configurations")
    (OUT / "landscapes.json").write_text(json.dumps(index, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
