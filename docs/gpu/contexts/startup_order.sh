#!/usr/bin/env bash
# When the slots' first trial processes are forked at start-up: with the probe (the code before,
# .before_order/: git archive 28ed97d orchestrator experiments) against once the probe has its
# device (this checkout), alternating, ROUNDS rounds, on one GPU (--devices cuda:0) and on every
# GPU (--devices auto). The spec: the headline's model and trial settings, four configurations
# on a grid (one trial per slot with four GPUs). Per command, from its timeline: seconds after the
# command began to the probe's answer, the smoke step's, the loop, each slot's first trial
# start and the first result, and the command's wall.
set -uo pipefail
R=$PWD; OUT=${OUT:-/tmp/gpu-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 16 "$(python3 -c 'import importlib.util as u, os; print(os.path.dirname(os.path.dirname(u.find_spec("torch").origin)))')" /tmp/site >/dev/null 2>&1
python3 -c "import torch; [torch.zeros(1, device=f'cuda:{i}') for i in range(torch.cuda.device_count())]" >/dev/null 2>&1
python3 - "$R/sweeps/bert_memory.yaml" > /tmp/order_spec.yaml <<'P'
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
d["name"] = "order"
d["space"] = {"batch_size": [256], "dtype": ["bfloat16", "float16"], "grad_accum_steps": [1, 2]}
d["search"] = {"sampler": "grid"}
print(yaml.safe_dump(d, sort_keys=False))
P
for r in $(seq 1 "${ROUNDS:-3}"); do
  for devices in cuda:0 auto; do
    for v in before after; do
      code=$R; [ "$v" = before ] && code=$R/.before_order
      d=$(mktemp -d); cp /tmp/order_spec.yaml "$d/spec.yaml"; cd "$d"
      s=$(date +%s.%N)
      ORCHESTRATE_TIMELINE=$d/events.jsonl PYTHONPATH=$code:/tmp/site PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore \
          timeout 120 python3 -m orchestrator.cli spec.yaml --devices "$devices" > "$OUT/order_${devices//:/}_${v}_$r.log" 2>&1
      e=$(date +%s.%N)
      python3 - "$v" "$r" "$devices" "$s" "$e" <<'P'
import json, sys
v, r, devices, s, e = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
ev = [json.loads(x) for x in open("events.jsonl") if x.strip()]
first = lambda name: next((x["t"] - s for x in ev if x["event"] == name), float("nan"))
starts = sorted(x["t"] - s for x in ev if x["event"] == "start" and x.get("trial") is not None)
told = sorted(x["t"] - s for x in ev if x["event"] == "told" and x.get("trial") is not None)
print(f"round {r} {devices:<6} {v:<6}: probe {first('probe_answered'):.2f}, smoke {first('smoke_answered'):.2f}, "
      f"loop {first('loop_start'):.2f}, first trials started {', '.join(f'{t:.2f}' for t in starts[:4])}, "
      f"first result {told[0] if told else float('nan'):.2f}, wall {e - s:.1f} s", flush=True)
P
      cd "$R"
    done
  done
done
