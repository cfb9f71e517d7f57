"""Each trial of the sweep in this folder against the script's own log (own-TAG.log, a line an
optimizer step: ``step time seen``): the harness's samples/s, the script's own over the same last
``measure_s`` seconds of its log (``script_tour/check.py``'s ``own_rate``), the samples a step
counted, and what the sweep was told of the window (another loader's batches, checkpoints saved).
Run from the sweep's folder as ``python3 docs/gpu/trainer_tour/check.py``."""
import glob
import importlib.util
import json
import os
from pathlib import Path

_spec = importlib.util.spec_from_file_location("script_tour_check", Path(__file__).resolve().parent.parent / "script_tour" / "check.py")
script_tour = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script_tour)

for res in sorted(glob.glob("mlruns/.trials/*/trial-*/result.json")):
    r = json.load(open(res))
    argv = json.load(open(os.path.join(os.path.dirname(res), "config.json")))["script"]["argv"]
    tag = argv[argv.index("--tag") + 1]
    m, info = r.get("metrics") or {}, r.get("info") or {}
    told = {k: round(info[k], 2) for k in ("other_batches", "saves", "save_s") if k in info}
    line = (f"{tag:22s} {r['status']:5s} samples/step={info.get('samples_per_step')} "
            f"harness={m.get('samples_per_s') or 0:9,.1f} told={told}")
    if os.path.exists(f"own-{tag}.log") and m.get("measure_s"):
        own = script_tour.own_rate(f"own-{tag}.log", m["measure_s"])
        line += f" own={own:9,.1f} harness/own={m['samples_per_s'] / own:.3f}"
    print(line, flush=True)
