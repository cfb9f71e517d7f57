"""Each trial of the sweep in this folder against the script's own log (own-TAG.log, a line an
optimizer step: ``step time seen``): the harness's samples/s, the script's own over the same last
``measure_s`` seconds of its log, the samples a step counted, and what the sweep was told of the
window (another loader's batches, checkpoints saved)."""
import glob
import json
import os

for res in sorted(glob.glob("mlruns/.trials/*/trial-*/result.json")):
    r = json.load(open(res))
    argv = json.load(open(os.path.join(os.path.dirname(res), "config.json")))["script"]["argv"]
    tag = argv[argv.index("--tag") + 1]
    m, info = r.get("metrics") or {}, r.get("info") or {}
    told = {k: round(info[k], 2) for k in ("other_batches", "saves", "save_s") if k in info}
    line = (f"{tag:22s} {r['status']:5s} samples/step={info.get('samples_per_step')} "
            f"harness={m.get('samples_per_s') or 0:9,.1f} told={told}")
    log = f"own-{tag}.log"
    if os.path.exists(log) and m.get("measure_s"):
        rows = [tuple(map(float, s.split()[:3])) for s in open(log) if len(s.split()) >= 3]
        end = rows[-1]
        first = next(row for row in rows if row[1] >= end[1] - m["measure_s"])
        own = (end[2] - first[2]) / (end[1] - first[1])
        line += f" own={own:9,.1f} harness/own={m['samples_per_s'] / own:.3f}"
    print(line, flush=True)
