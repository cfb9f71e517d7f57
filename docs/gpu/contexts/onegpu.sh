#!/usr/bin/env bash
# Tried and not kept (2026-11-27): the headline from an empty folder with no --devices on a 4-GPU host: the code before the one
# slot showed its trials only its GPU (.before_onegpu/: git archive 38efa54 orchestrator experiments)
# against this checkout, alternating, ROUNDS pairs. Per command: its wall, trials, and from each
# trial's result the seconds its process took to initialise CUDA (prepared: forked -> prepared;
# else device -> device_ready).
set -uo pipefail
R=$PWD; OUT=${OUT:-/tmp/gpu-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 16 "$(python3 -c 'import importlib.util as u, os; print(os.path.dirname(os.path.dirname(u.find_spec("torch").origin)))')" /tmp/site >/dev/null 2>&1
python3 -c "import torch; torch.zeros(1, device='cuda')" >/dev/null 2>&1
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in before after; do
    code=$R; [ "$v" = before ] && code=$R/.before_onegpu
    d=$(mktemp -d); cd "$d"
    s=$(date +%s.%N)
    PYTHONPATH=$code:/tmp/site PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore timeout 200 python3 -m orchestrator.cli "$R/sweeps/bert_memory.yaml" > "$OUT/onegpu_${v}_$r.log" 2>&1
    e=$(date +%s.%N)
    python3 - "$v" "$r" "$s" "$e" <<'P'
import glob, json, statistics, sys
v, r, s, e = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
prep, own = [], []
for p in glob.glob("mlruns/.trials/*/trial-*/**/result.json", recursive=True):
    tl = json.load(open(p)).get("timeline", {})
    if "prepared" in tl and "forked" in tl:
        prep.append(tl["prepared"] - tl["forked"])
    elif "device_ready" in tl and "device" in tl:
        own.append(tl["device_ready"] - tl["device"])
med = lambda x: f"{statistics.median(x):.2f}" if x else "-"
print(f"round {r} {v}: {e - s:.1f} s, {len(prep) + len(own)} processes; CUDA initialised: prepared {len(prep)} "
      f"(median {med(prep)} s), in the trial {len(own)} (median {med(own)} s)", flush=True)
P
    cd "$R"
  done
done
